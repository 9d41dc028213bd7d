package connectlimit_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/connectlimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// A procedure is the handler's, never the path a client sends: a handler
// mounted for every path, sent 1,000 made-up procedure names over every
// protocol, is one procedure. WithProcedureFunc is asked once, and keyed
// per route the calls share one bucket and one key.
func TestMadeUpProcedures(t *testing.T) {
	clock := core.NewManualClock(start)
	def := memory(t, core.Policy{Name: "api", Limit: 2, Window: time.Minute}, clock)
	var asked []string // the interceptor asks from handler goroutines, one call at a time here
	ic := connectlimit.NewInterceptor(def,
		connectlimit.WithKey(keyfunc.Join(keyfunc.Route, keyfunc.PeerIP)),
		connectlimit.WithProcedureFunc(func(p string) core.Limiter {
			asked = append(asked, p)
			return nil
		}))
	h := connect.NewUnaryHandler(sayProc,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(req.Msg), nil
		}, connect.WithInterceptors(ic))
	srv := httptest.NewUnstartedServer(h) // every path
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	served, refused := 0, 0
	for i := range 1000 {
		p := protocols[i%len(protocols)]
		c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), fmt.Sprintf("%s/made.Up/Method%d", srv.URL, i), p.opts...)
		_, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
		switch {
		case err == nil:
			served++
		case connect.CodeOf(err) == connect.CodeResourceExhausted:
			refused++
		default:
			t.Fatalf("call %d over %s: %v", i, p.name, err)
		}
	}
	if served != 2 || refused != 998 {
		t.Errorf("1,000 made-up procedures on a limit of 2: %d served, %d refused; want 2 and 998", served, refused)
	}
	if !slices.Equal(asked, []string{sayProc}) {
		t.Errorf("WithProcedureFunc asked %d times (first %q), want once for %s", len(asked), asked[:min(len(asked), 3)], sayProc)
	}
	if keys := def.Stats().Keys; keys != 1 {
		t.Errorf("%d keys after 1,000 made-up procedures, want 1", keys)
	}
}
