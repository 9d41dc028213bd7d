package connectlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/connectlimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// BenchmarkUnary measures what the interceptor adds to a unary call on the
// allowed path, one key (the peer's address): ratekit minus bare, where
// bare calls a no-op UnaryFunc and ratekit calls it through WrapUnary. The
// request is a real handler's, so it has a peer and a procedure; each call
// returns a fresh response, whose headers map the interceptor fills, as it
// fills a handler's response headers. Without the handler's context the
// interceptor writes to the response's headers, the same work.
func BenchmarkUnary(b *testing.B) {
	req := handlerRequest(b)
	msg := wrapperspb.String("hi")
	noop := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return connect.NewResponse(msg), nil
	}
	run := func(b *testing.B, f connect.UnaryFunc) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, noop) })
	b.Run("ratekit", func(b *testing.B) {
		f := connectlimit.NewInterceptor(adaptertest.BenchLimiter(b)).WrapUnary(noop)
		res, err := f(context.Background(), req)
		if err != nil || res.Header().Get("Ratelimit") == "" {
			b.Fatalf("not limited as in a server: %v, headers %v", err, res.Header())
		}
		run(b, f)
	})
}

// handlerRequest returns the request a unary handler is given for a real
// call over HTTP.
func handlerRequest(b *testing.B) connect.AnyRequest {
	b.Helper()
	var got connect.AnyRequest
	capture := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			got = req
			return next(ctx, req)
		}
	})
	mux := http.NewServeMux()
	mux.Handle(sayProc, connect.NewUnaryHandler(sayProc,
		func(context.Context, *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String("")), nil
		}, connect.WithInterceptors(capture)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+sayProc)
	if _, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("hi"))); err != nil {
		b.Fatal(err)
	}
	if got == nil || got.Peer().Addr == "" || got.Spec().Procedure != sayProc {
		b.Fatalf("captured request %v", got)
	}
	return got
}
