package ginlimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
)

// A handler that panics, behind gin's Recovery, gives its lease back.
func TestInFlightPanicReleases(t *testing.T) {
	gin.SetMode(gin.TestMode)
	rate, _ := core.New(core.Policy{Limit: 100, Window: time.Minute})
	cap1, _ := inflight.New(1)
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), ginlimit.New(rate, httplimit.WithInFlight(cap1)))
	r.GET("/panic", func(*gin.Context) { panic("boom") })
	r.GET("/ok", func(c *gin.Context) { c.Status(http.StatusOK) })
	for _, path := range []string{"/panic", "/panic", "/ok"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if want := map[string]int{"/panic": 500, "/ok": 200}[path]; w.Code != want {
			t.Fatalf("GET %s: %d, want %d (a panic's lease held would make it 429)", path, w.Code, want)
		}
	}
}
