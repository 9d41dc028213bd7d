package echolimit_test

import (
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// BenchmarkHello measures what the middleware adds to a hello-world route on
// the allowed path: ratekit minus bare.
func BenchmarkHello(b *testing.B) {
	hello := func(c echo.Context) error { return c.String(200, "hello") }
	b.Run("bare", func(b *testing.B) {
		e := echo.New()
		e.GET("/hello", hello)
		adaptertest.BenchHTTP(b, e)
	})
	b.Run("ratekit", func(b *testing.B) {
		e := echo.New()
		e.Use(echolimit.New(adaptertest.BenchLimiter(b)))
		e.GET("/hello", hello)
		adaptertest.BenchHTTP(b, e)
	})
}
