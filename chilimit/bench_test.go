package chilimit_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/chilimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// BenchmarkHello measures what the middleware adds to a hello-world route on
// the allowed path: ratekit minus bare.
func BenchmarkHello(b *testing.B) {
	hello := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) }
	b.Run("bare", func(b *testing.B) {
		r := chi.NewRouter()
		r.Get("/hello", hello)
		adaptertest.BenchHTTP(b, r)
	})
	b.Run("ratekit", func(b *testing.B) {
		r := chi.NewRouter()
		r.Use(chilimit.New(adaptertest.BenchLimiter(b)))
		r.Get("/hello", hello)
		adaptertest.BenchHTTP(b, r)
	})
}
