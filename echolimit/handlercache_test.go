package echolimit_test

import (
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
)

// echo applies Echo.Use's middleware to the route's handler on every
// request; the handler built for one route is kept for it, and never
// serves another route, whichever middleware comes after.
func TestUseMiddlewareKeepsEachRoute(t *testing.T) {
	for name, after := range map[string][]echo.MiddlewareFunc{
		"alone":                   nil,
		"before another per-call": {middleware.RequestID()},
	} {
		e := echo.New()
		e.Use(echolimit.New(newLimiter(t, 1_000)))
		e.Use(after...)
		routes := []string{"/a", "/b", "/c/:id"}
		for _, r := range routes {
			e.GET(r, func(c echo.Context) error { return c.String(200, c.Path()) })
		}
		for i := range 30 {
			r := routes[i%len(routes)]
			path := r
			if r == "/c/:id" {
				path = "/c/7"
			}
			w := httptest.NewRecorder()
			e.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
			if w.Code != 200 || w.Body.String() != r || w.Header().Get("RateLimit") == "" {
				t.Fatalf("%s: request %d to %s: %d %q, RateLimit %q; want route %s's answer, limited", name, i, path, w.Code, w.Body, w.Header().Get("RateLimit"), r)
			}
		}
	}
}

// Under Echo.Use, the middleware adds one allocation to a request, the
// RateLimit value the response's header keeps: the handler it builds for
// the route is built once.
func TestUseMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector, which drops pooled items")
	}
	allocs := func(mw echo.MiddlewareFunc) float64 {
		e := echo.New()
		if mw != nil {
			e.Use(mw)
		}
		e.GET("/hello", func(c echo.Context) error { return c.String(200, "hello") })
		req := httptest.NewRequest("GET", "/hello", nil)
		w := httptest.NewRecorder()
		return testing.AllocsPerRun(200, func() {
			clear(w.Header())
			e.ServeHTTP(w, req)
		})
	}
	l, err := core.New(core.Policy{Limit: core.MaxLimit, Window: 60e9})
	if err != nil {
		t.Fatal(err)
	}
	if bare, limited := allocs(nil), allocs(echolimit.New(l)); limited-bare > 1 {
		t.Errorf("the middleware adds %v allocations per request (%v bare), want at most 1", limited-bare, bare)
	}
}
