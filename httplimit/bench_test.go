package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
)

// BenchmarkCheck splits the allowed path of the middleware into its parts:
// the limiter alone, the default key alone, and the engine with and without
// writing the headers.
func BenchmarkCheck(b *testing.B) {
	l, err := core.New(core.Policy{Limit: core.MaxLimit, Window: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/hello", nil)
	ctx := context.Background()
	b.Run("limiter", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.AllowN(ctx, "192.0.2.1", 1)
		}
	})
	b.Run("key", func(b *testing.B) {
		b.ReportAllocs()
		kr := keyfunc.FromHTTP(req)
		for b.Loop() {
			keyfunc.PeerIP(kr)
		}
	})
	e := httplimit.MustNew(l)
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		var view httpview.Request // pooled, as the adapters' is
		for b.Loop() {
			view.Reset(req, "/hello", nil)
			res := e.Check(&view)
			if !res.Serve() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("check+headers", func(b *testing.B) {
		b.ReportAllocs()
		h := make(http.Header)
		var view httpview.Request // pooled, as the adapters' is
		for b.Loop() {
			view.Reset(req, "/hello", nil)
			res := e.Check(&view)
			res.WriteHeaders(h)
			clear(h) // a response's headers start empty
		}
	})
}

// BenchmarkCheckLayered is the allowed path with a layered limiter of two
// layers (per second and per day): every layer in the RateLimit fields.
func BenchmarkCheckLayered(b *testing.B) {
	perSecond, err := core.New(core.Policy{Name: "burst", Limit: core.MaxLimit, Window: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	perDay, err := core.New(core.Policy{Name: "daily", Algorithm: core.FixedWindow, Limit: core.MaxLimit, Window: 24 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	l, err := core.NewLayered(perSecond, perDay)
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/hello", nil)
	e := httplimit.MustNew(l)
	b.Run("check+headers", func(b *testing.B) {
		b.ReportAllocs()
		h := make(http.Header)
		var view httpview.Request // pooled, as the adapters' is
		for b.Loop() {
			view.Reset(req, "/hello", nil)
			res := e.Check(&view)
			res.WriteHeaders(h)
			clear(h) // a response's headers start empty
		}
	})
}

// BenchmarkMiddlewareHello measures what Middleware adds to a hello-world
// route on the standard ServeMux, on the allowed path: ratekit minus bare.
func BenchmarkMiddlewareHello(b *testing.B) {
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) })
	b.Run("bare", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.Handle("GET /hello", hello)
		adaptertest.BenchHTTP(b, mux)
	})
	b.Run("ratekit", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.Handle("GET /hello", httplimit.Middleware(adaptertest.BenchLimiter(b))(hello))
		adaptertest.BenchHTTP(b, mux)
	})
}
