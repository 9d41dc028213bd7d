package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
)

// A call counted at its estimate is settled at what its handler reports:
// less gives the rest back, more puts the peer into debt, which its next
// call waits out exactly; a handler that panics stays at the estimate.
// Streams settle as unary calls do; WithPerMessage is refused with it.
func TestSettle(t *testing.T) {
	clock := core.NewManualClock(start)
	// 100 units a minute: one unit refills every 600 ms.
	rate := memory(t, core.Policy{Name: "tokens", Limit: 100, Window: time.Minute}, clock)
	opts := []grpclimit.Option{
		grpclimit.WithSettle(),
		grpclimit.WithCost(func(context.Context, string) (int64, error) { return 10, nil }),
		grpclimit.WithClock(clock),
	}
	unary := grpclimit.UnaryServerInterceptor(rate, opts...)
	info := &grpc.UnaryServerInfo{FullMethod: methodSay}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}})
	call := func(actual int64) error {
		_, err := unary(grpc.NewContextWithServerTransportStream(ctx, &recordStream{}), "req", info, func(ctx context.Context, _ any) (any, error) {
			if actual >= 0 && !grpclimit.SetCost(ctx, actual) {
				t.Error("SetCost found no limit to settle")
			}
			return "resp", nil
		})
		return err
	}
	left := func() int64 {
		d, _ := rate.Peek(ctx, "192.0.2.1", 1)
		return d.Remaining
	}
	if err := call(3); err != nil || left() != 97 {
		t.Fatalf("estimate 10, used 3: %v, %d left; want 97", err, left())
	}
	if err := call(-1); err != nil || left() != 87 {
		t.Fatalf("nothing reported: %v, %d left; want 87, the estimate", err, left())
	}
	func() {
		defer func() { _ = recover() }()
		unary(grpc.NewContextWithServerTransportStream(ctx, &recordStream{}), "req", info, func(ctx context.Context, _ any) (any, error) {
			grpclimit.SetCost(ctx, 0)
			panic("boom")
		})
	}()
	if left() != 77 {
		t.Fatalf("a panic: %d left; want 77, the estimate", left())
	}
	// 77 left (23 held), estimate 10, used 97: 120 held, 20 past the
	// limit. A call of 10 fits once 30 units have refilled: 18 s.
	if err := call(97); err != nil {
		t.Fatal(err)
	}
	err := call(10)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("in debt: %v, want ResourceExhausted", err)
	}
	clock.Advance(18*time.Second - time.Microsecond)
	if err := call(10); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("1µs before the debt is repaid: %v", err)
	}
	clock.Advance(time.Microsecond)
	if err := call(10); err != nil {
		t.Fatalf("the debt repaid: %v", err)
	}

	clock.Advance(time.Minute) // full again
	stream := grpclimit.StreamServerInterceptor(rate, opts...)
	before := left()
	err = stream(struct{}{}, &serverStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: methodSay, IsServerStream: true}, func(_ any, ss grpc.ServerStream) error {
		if !grpclimit.SetCost(ss.Context(), 1) {
			t.Error("a stream's SetCost found no limit to settle")
		}
		return nil
	})
	if err != nil || left() != before-1 {
		t.Errorf("a stream that used 1 of 10: %v, %d left; want %d", err, left(), before-1)
	}

	defer func() {
		if recover() == nil {
			t.Error("WithSettle with WithPerMessage: no panic")
		}
	}()
	grpclimit.StreamServerInterceptor(rate, append(opts, grpclimit.WithPerMessage())...)
}

// serverStream is a grpc.ServerStream with a context and nothing to send.
type serverStream struct{ ctx context.Context }

func (s *serverStream) SetHeader(metadata.MD) error  { return nil }
func (s *serverStream) SendHeader(metadata.MD) error { return nil }
func (s *serverStream) SetTrailer(metadata.MD)       {}
func (s *serverStream) Context() context.Context     { return s.ctx }
func (s *serverStream) SendMsg(any) error            { return nil }
func (s *serverStream) RecvMsg(any) error            { return nil }
