package fiberlimit_test

import (
	"testing"

	"github.com/gofiber/fiber/v2"

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
		adaptertest.BenchFiber(b, app)
	})
	b.Run("ratekit", func(b *testing.B) {
		app := fiber.New()
		app.Use(fiberlimit.New(adaptertest.BenchLimiter(b)))
		app.Get("/hello", hello)
		adaptertest.BenchFiber(b, app)
	})
}
