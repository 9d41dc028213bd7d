package echolimit_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
)

// Two requests per minute per client IP, on a manual clock: the third gets
// 429 with Retry-After.
func Example() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, err := core.New(core.Policy{Name: "api", Limit: 2, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.Use(echolimit.New(limiter))
	e.GET("/hello", func(c echo.Context) error { return c.String(200, "hello") })

	for range 3 {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
		fmt.Print(w.Code, " ", w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Print(" Retry-After: ", ra)
		}
		fmt.Println()
	}
	// Output:
	// 200 "api";r=1;t=30
	// 200 "api";r=0;t=60
	// 429 "api";r=0;t=30 Retry-After: 30
}

// One request per minute per user, the user being what an authentication
// middleware stored with c.Set: alice and bob share an address but not a
// limit.
func ExampleWithKey() {
	limiter, err := core.New(core.Policy{Name: "user", Limit: 1, Window: time.Minute})
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // authentication, say
		return func(c echo.Context) error {
			c.Set("user", c.Request().Header.Get("X-User"))
			return next(c)
		}
	})
	e.Use(echolimit.New(limiter, echolimit.WithKey(func(c echo.Context) (string, error) {
		user, _ := c.Get("user").(string)
		return user, nil
	})))
	e.GET("/hello", func(c echo.Context) error { return c.String(200, "hello") })

	for _, user := range []string{"alice", "bob", "alice"} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-User", user)
		e.ServeHTTP(w, req)
		fmt.Println(user, w.Code)
	}
	// Output:
	// alice 200
	// bob 200
	// alice 429
}
