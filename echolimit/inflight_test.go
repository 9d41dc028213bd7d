package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
)

// A handler that panics, behind echo's Recover, gives its lease back.
func TestInFlightPanicReleases(t *testing.T) {
	rate, _ := core.New(core.Policy{Limit: 100, Window: time.Minute})
	cap1, _ := inflight.New(1)
	e := echo.New()
	e.Use(middleware.Recover(), echolimit.New(rate, httplimit.WithInFlight(cap1)))
	e.GET("/panic", func(echo.Context) error { panic("boom") })
	e.GET("/ok", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	for _, path := range []string{"/panic", "/panic", "/ok"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if want := map[string]int{"/panic": 500, "/ok": 200}[path]; w.Code != want {
			t.Fatalf("GET %s: %d, want %d (a panic's lease held would make it 429)", path, w.Code, want)
		}
	}
}
