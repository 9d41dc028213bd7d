package fiberlimit_test

import (
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// BenchmarkHello measures what the middleware adds to a hello-world route on
// the allowed path: ratekit minus bare. It calls fiber's handler on one
// reused fasthttp.RequestCtx, without a connection.
func BenchmarkHello(b *testing.B) {
	hello := func(c *fiber.Ctx) error { return c.SendString("hello") }
	b.Run("bare", func(b *testing.B) {
		app := fiber.New()
		app.Get("/hello", hello)
		benchFiber(b, app)
	})
	b.Run("ratekit", func(b *testing.B) {
		app := fiber.New()
		app.Use(fiberlimit.New(adaptertest.BenchLimiter(b)))
		app.Get("/hello", hello)
		benchFiber(b, app)
	})
	// A key from what earlier middleware stored with c.Locals, through
	// the native WithKeyGenerator.
	b.Run("ratekit, key from Locals", func(b *testing.B) {
		app := fiber.New()
		app.Use(func(c *fiber.Ctx) error { c.Locals("user", "alice"); return c.Next() })
		app.Use(fiberlimit.New(adaptertest.BenchLimiter(b), fiberlimit.WithKeyGenerator(func(c *fiber.Ctx) (string, error) {
			u, _ := c.Locals("user").(string)
			return u, nil
		})))
		app.Get("/hello", hello)
		benchFiber(b, app)
	})
}

// benchFiber is adaptertest.BenchHTTP for fiber: it calls app's handler for
// GET /hello b.N times on one reused fasthttp.RequestCtx, without a
// connection, and fails the benchmark if the last response is not 200 OK.
// It lives here, not in adaptertest, so that only the fiber module needs
// fiber and fasthttp.
func benchFiber(b *testing.B, app *fiber.App) {
	h := app.Handler()
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
