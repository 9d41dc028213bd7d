package benchmarks

import (
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// benchFiber is adaptertest.BenchHTTP for fiber: it calls app's handler for
// GET /hello b.N times on one reused fasthttp.RequestCtx, without a
// connection, and fails the benchmark if the last response is not 200 OK.
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
