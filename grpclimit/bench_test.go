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
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// BenchmarkUnary measures what the interceptor adds to a unary call: the
// interceptor called as a gRPC server calls it, with a no-op handler and a
// context carrying a peer and a server stream, minus the handler alone.
// "allowed" is the allowed path on one key; "denied" builds the refusal's
// status and details on every call.
func BenchmarkUnary(b *testing.B) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, nopStream{})
	info := &grpc.UnaryServerInfo{FullMethod: methodSay}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	run := func(b *testing.B, call func() error, want codes.Code) {
		if err := call(); status.Code(err) != want {
			b.Fatalf("%v, want %v", err, want)
		}
		b.ReportAllocs()
		for b.Loop() {
			call()
		}
	}
	b.Run("bare", func(b *testing.B) {
		run(b, func() error { _, err := handler(ctx, nil); return err }, codes.OK)
	})
	b.Run("allowed", func(b *testing.B) {
		intercept := grpclimit.UnaryServerInterceptor(adaptertest.BenchLimiter(b))
		run(b, func() error { _, err := intercept(ctx, nil, info, handler); return err }, codes.OK)
	})
	b.Run("denied", func(b *testing.B) {
		l, err := core.New(core.Policy{Limit: 1, Window: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		intercept := grpclimit.UnaryServerInterceptor(l)
		intercept(ctx, nil, info, handler) // the key's only unit
		run(b, func() error { _, err := intercept(ctx, nil, info, handler); return err }, codes.ResourceExhausted)
	})
}

// nopStream is a grpc.ServerTransportStream that drops the metadata set on
// it, so that only the interceptor is measured.
type nopStream struct{}

func (nopStream) Method() string                  { return methodSay }
func (nopStream) SetHeader(metadata.MD) error     { return nil }
func (nopStream) SendHeader(metadata.MD) error    { return nil }
func (nopStream) SetTrailer(md metadata.MD) error { return nil }
