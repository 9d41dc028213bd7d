package adaptertest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// BenchLimiter returns an in-memory token bucket that allows every request
// of a benchmark: the allowed path, one key.
func BenchLimiter(b *testing.B) core.Limiter {
	l, err := core.New(core.Policy{Limit: core.MaxLimit, Window: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchHTTP serves GET /hello with h b.N times, reusing the request and a
// writer that discards the body, so that only the router and middleware
// are measured. It fails the benchmark if a response is not 200 OK.
func BenchHTTP(b *testing.B, h http.Handler) {
	req := httptest.NewRequest("GET", "/hello", nil)
	w := &discardWriter{h: make(http.Header)}
	h.ServeHTTP(w, req)
	if w.status != http.StatusOK {
		b.Fatalf("status %d, want 200", w.status)
	}
	b.ReportAllocs()
	for b.Loop() {
		w.status = 0
		clear(w.h) // a response's headers start empty
		h.ServeHTTP(w, req)
	}
	if w.status != http.StatusOK {
		b.Fatalf("status %d, want 200", w.status)
	}
}

type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}
