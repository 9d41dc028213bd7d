package benchmarks

import (
	"testing"

	"github.com/gofiber/fiber/v2"
)

// benchFiber is adaptertest.BenchHTTP for fiber: it calls app's handler for
// GET /hello b.N times on one reused fasthttp.RequestCtx, without a
// connection, and fails the benchmark if the last response is not 200 OK.
func benchFiber(b *testing.B, app *fiber.App) { benchFasthttp(b, app.Handler()) }
