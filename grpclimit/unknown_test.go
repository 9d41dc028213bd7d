package grpclimit_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// proxy stands for a grpc.UnknownServiceHandler that forwards calls: it
// answers one message with itself.
func proxy(_ any, ss grpc.ServerStream) error {
	in := new(wrapperspb.StringValue)
	if err := ss.RecvMsg(in); err != nil {
		return err
	}
	return ss.SendMsg(in)
}

// A server with a grpc.UnknownServiceHandler (a proxy) hands the stream
// interceptor any method name a client makes up. All those calls are one
// method, grpclimit.UnknownMethod: keyed per route they share one bucket,
// and WithMethodFunc is asked for them once, so 5,000 made-up names keep
// nothing per name. The registered methods and those WithMethods names
// keep their own limits.
func TestUnknownMethods(t *testing.T) {
	clock := core.NewManualClock(start)
	def := memory(t, core.Policy{Name: "api", Limit: 2, Window: time.Minute}, clock)
	export := memory(t, core.Policy{Name: "export", Limit: 1, Window: time.Minute}, clock)
	var (
		mu    sync.Mutex
		asked []string
	)
	conn, _ := serve(t, grpc.UnknownServiceHandler(proxy),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(def,
			grpclimit.WithKey(keyfunc.Join(keyfunc.Route, keyfunc.PeerIP)),
			grpclimit.WithMethods(map[string]core.Limiter{"/shop.Orders/Export": export}),
			grpclimit.WithMethodFunc(func(m string) core.Limiter {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, m)
				return nil
			}))))
	ctx := context.Background()
	count := func(n int, method func(i int) string) map[codes.Code]int {
		got := map[codes.Code]int{}
		for i := range n {
			_, _, err := unary(ctx, conn, method(i), "x")
			got[status.Code(err)]++
		}
		return got
	}
	madeUp := func(i int) string { return fmt.Sprintf("/made.Up/Method%d", i) }
	// 60 made-up methods on a limit of 2 per route: 2 served.
	if got := count(60, madeUp); got[codes.OK] != 2 || got[codes.ResourceExhausted] != 58 {
		t.Errorf("60 made-up methods on a limit of 2: codes %v, want 2 OK and 58 ResourceExhausted", got)
	}
	// A method WithMethods names is known, proxied or not: its own limiter.
	if got := count(2, func(int) string { return "/shop.Orders/Export" }); got[codes.OK] != 1 || got[codes.ResourceExhausted] != 1 {
		t.Errorf("Export twice on its limit of 1: codes %v, want 1 OK and 1 ResourceExhausted", got)
	}
	// A registered stream is its own route: not refused by the made-up ones.
	if _, err := exchange(openChat(t, conn), "x"); err != nil {
		t.Errorf("Chat after the made-up methods: %v", err)
	}
	// 5,000 more made-up names ask for nothing new and mint no key: the
	// default limiter holds the made-up methods' key and Chat's.
	count(5000, func(i int) string { return madeUp(60 + i) })
	if keys := def.Stats().Keys; keys != 2 {
		t.Errorf("%d keys after 5,060 made-up methods and a Chat, want 2", keys)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{grpclimit.UnknownMethod, methodChat}; !slices.Equal(asked, want) {
		n := len(asked)
		asked = asked[:min(n, 4)]
		t.Errorf("WithMethodFunc asked %d times, first for %q; want %q", n, asked, want)
	}
}
