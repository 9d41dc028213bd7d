package ginlimit_test

import (
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// BenchmarkHello measures what the middleware adds to a hello-world route on
// the allowed path: ratekit minus bare.
func BenchmarkHello(b *testing.B) {
	hello := func(c *gin.Context) { c.String(200, "hello") }
	b.Run("bare", func(b *testing.B) {
		r := gin.New()
		r.GET("/hello", hello)
		adaptertest.BenchHTTP(b, r)
	})
	b.Run("ratekit", func(b *testing.B) {
		r := gin.New()
		r.Use(ginlimit.New(adaptertest.BenchLimiter(b)))
		r.GET("/hello", hello)
		adaptertest.BenchHTTP(b, r)
	})
}
