package ginlimit_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
)

// Two requests per minute per client IP, on a manual clock: the third gets
// 429 with Retry-After.
func Example() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, err := core.New(core.Policy{Name: "api", Limit: 2, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.New(limiter))
	r.GET("/hello", func(c *gin.Context) { c.String(200, "hello") })

	for range 3 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
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

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("user", c.GetHeader("X-User")) }) // authentication, say
	r.Use(ginlimit.New(limiter, ginlimit.WithKey(func(c *gin.Context) (string, error) {
		return c.GetString("user"), nil
	})))
	r.GET("/hello", func(c *gin.Context) { c.String(200, "hello") })

	for _, user := range []string{"alice", "bob", "alice"} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-User", user)
		r.ServeHTTP(w, req)
		fmt.Println(user, w.Code)
	}
	// Output:
	// alice 200
	// bob 200
	// alice 429
}
