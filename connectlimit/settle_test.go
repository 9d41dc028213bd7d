package connectlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/connectlimit"
	"github.com/ratekit/ratekit/core"
)

// A call counted at its estimate is settled at what its handler reports
// through connectlimit.SetCost, on every protocol: less gives the rest
// back, more puts the client into debt, which its next call waits out
// exactly.
func TestSettle(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			// 100 units a minute: one unit refills every 600 ms.
			rate := memory(t, core.Policy{Name: "tokens", Limit: 100, Window: time.Minute}, clock)
			ic := connectlimit.NewInterceptor(rate,
				connectlimit.WithSettle(),
				connectlimit.WithCost(func(context.Context, string) (int64, error) { return 10, nil }),
				connectlimit.WithClock(clock))
			mux := http.NewServeMux()
			mux.Handle(sayProc, connect.NewUnaryHandler(sayProc,
				func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
					var n int64
					if _, err := fmt.Sscanf(req.Msg.Value, "cost:%d", &n); err == nil && !connectlimit.SetCost(ctx, n) {
						t.Error("SetCost found no limit to settle")
					}
					return connect.NewResponse(wrapperspb.String("ok")), nil
				}, connect.WithInterceptors(ic)))
			srv := httptest.NewUnstartedServer(mux)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			t.Cleanup(srv.Close)
			c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+sayProc, proto.opts...)
			left := func() int64 {
				d, _ := rate.Peek(context.Background(), "127.0.0.1", 1)
				return d.Remaining
			}
			if _, err := sayCall(c, "cost:3"); err != nil || left() != 97 {
				t.Fatalf("estimate 10, used 3: %v, %d left; want 97", err, left())
			}
			// 97 left (3 held), used 110: 113 held, 13 past the limit; a
			// call of 10 fits once 23 units have refilled, 13.8 s.
			if _, err := sayCall(c, "cost:110"); err != nil {
				t.Fatal(err)
			}
			if _, err := sayCall(c, "cost:1"); connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("in debt: %v, want ResourceExhausted", err)
			}
			clock.Advance(13800*time.Millisecond - time.Microsecond)
			if _, err := sayCall(c, "cost:1"); connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("1µs before the debt is repaid: %v", err)
			}
			clock.Advance(time.Microsecond)
			if _, err := sayCall(c, "cost:10"); err != nil || left() != 0 {
				t.Fatalf("the debt repaid: %v, %d left; want 0", err, left())
			}
		})
	}
}
