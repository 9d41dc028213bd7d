package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/inflight"
)

// One call per peer in flight: a call made while another runs is
// ResourceExhausted and counts nothing in the rate limit; a handler that
// panics gives its lease back; WithPerMessage is refused with the cap.
func TestInFlight(t *testing.T) {
	clock := core.NewManualClock(start)
	rate := memory(t, core.Policy{Name: "calls", Limit: 10, Window: time.Minute}, clock)
	one, err := inflight.New(1, inflight.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	intercept := grpclimit.UnaryServerInterceptor(rate, grpclimit.WithInFlight(one))
	info := &grpc.UnaryServerInfo{FullMethod: methodSay}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}})
	call := func(h grpc.UnaryHandler) error {
		_, err := intercept(grpc.NewContextWithServerTransportStream(ctx, &recordStream{}), "req", info, h)
		return err
	}
	ok := func(context.Context, any) (any, error) { return "resp", nil }

	var nested error
	if err := call(func(context.Context, any) (any, error) {
		nested = call(ok)
		return "resp", nil
	}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if status.Code(nested) != codes.ResourceExhausted {
		t.Fatalf("call while another runs: %v, want ResourceExhausted", nested)
	}
	for range 2 {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the handler's panic did not reach the caller")
				}
			}()
			call(func(context.Context, any) (any, error) { panic("boom") })
		}()
	}
	if err := call(ok); err != nil {
		t.Fatalf("after the panics: %v, want OK (a panic's lease held would refuse it)", err)
	}
	if d, _ := rate.Peek(ctx, "192.0.2.1", 1); d.Remaining != 10-4 {
		t.Errorf("rate limit: %d remaining, want 6: the refused call counted nothing", d.Remaining)
	}

	defer func() {
		if recover() == nil {
			t.Error("WithInFlight with WithPerMessage: no panic")
		}
	}()
	grpclimit.StreamServerInterceptor(rate, grpclimit.WithInFlight(one), grpclimit.WithPerMessage())
}
