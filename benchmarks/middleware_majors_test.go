package benchmarks

import (
	"testing"
	"time"

	fiber3 "github.com/gofiber/fiber/v3"
	fiber3limiter "github.com/gofiber/fiber/v3/middleware/limiter"
	echo5 "github.com/labstack/echo/v5"
	echo5mw "github.com/labstack/echo/v5/middleware"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/echo5limit"
	"github.com/ratekit/ratekit/fiber3limit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// BenchmarkMiddlewareEcho5 is echo v5 bare, with echo5limit and with echo
// v5's built-in RateLimiter on its memory store, as BenchmarkMiddlewareEcho
// is for v4.
func BenchmarkMiddlewareEcho5(b *testing.B) {
	hello := func(c *echo5.Context) error { return c.String(200, "hello") }
	cases := map[string]func() echo5.MiddlewareFunc{
		"bare":    nil,
		"ratekit": func() echo5.MiddlewareFunc { return echo5limit.New(openLimiter(b)) },
		"ratekit-no-headers": func() echo5.MiddlewareFunc {
			return echo5limit.New(openLimiter(b), httplimit.WithHeaders(httplimit.NoHeaders))
		},
		"echo": func() echo5.MiddlewareFunc {
			return echo5mw.RateLimiter(echo5mw.NewRateLimiterMemoryStoreWithConfig(echo5mw.RateLimiterMemoryStoreConfig{
				Rate: float64(openPerMinute) / 60, Burst: openPerMinute,
			}))
		},
	}
	for _, name := range []string{"bare", "ratekit", "ratekit-no-headers", "echo"} {
		b.Run(name, func(b *testing.B) {
			e := echo5.New()
			if mw := cases[name]; mw != nil {
				e.Use(mw())
			}
			e.GET("/hello", hello)
			adaptertest.BenchHTTP(b, e)
		})
	}
}

// BenchmarkMiddlewareFiber3 is fiber v3 bare, with fiber3limit and with
// fiber v3's built-in limiter, as BenchmarkMiddlewareFiber is for v2.
func BenchmarkMiddlewareFiber3(b *testing.B) {
	hello := func(c fiber3.Ctx) error { return c.SendString("hello") }
	cases := map[string]func() fiber3.Handler{
		"bare":    nil,
		"ratekit": func() fiber3.Handler { return fiber3limit.New(openLimiter(b)) },
		"fiber": func() fiber3.Handler {
			return fiber3limiter.New(fiber3limiter.Config{Max: openPerMinute, Expiration: time.Minute})
		},
	}
	for _, name := range []string{"bare", "ratekit", "fiber"} {
		b.Run(name, func(b *testing.B) {
			app := fiber3.New()
			if mw := cases[name]; mw != nil {
				app.Use(mw())
			}
			app.Get("/hello", hello)
			benchFasthttp(b, app.Handler())
		})
	}
}

// benchFasthttp is benchFiber for any fasthttp handler.
func benchFasthttp(b *testing.B, h fasthttp.RequestHandler) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("GET")
	ctx.Request.SetRequestURI("/hello")
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(&ctx)
	}
	if s := ctx.Response.StatusCode(); s != 200 {
		b.Fatalf("status %d, want 200", s)
	}
}
