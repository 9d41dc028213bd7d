package echo5limit_test

import (
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/echo5limit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// BenchmarkHello measures what the middleware adds to a hello-world route on
// the allowed path: ratekit minus bare.
func BenchmarkHello(b *testing.B) {
	hello := func(c *echo.Context) error { return c.String(200, "hello") }
	b.Run("bare", func(b *testing.B) {
		e := echo.New()
		e.GET("/hello", hello)
		adaptertest.BenchHTTP(b, e)
	})
	b.Run("ratekit", func(b *testing.B) {
		e := echo.New()
		e.Use(echo5limit.New(adaptertest.BenchLimiter(b)))
		e.GET("/hello", hello)
		adaptertest.BenchHTTP(b, e)
	})
}
