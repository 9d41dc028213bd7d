package chilimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/chilimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// Two requests per minute per client IP on every route, on a manual clock:
// the third gets 429 with Retry-After.
func Example() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, err := core.New(core.Policy{Name: "api", Limit: 2, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}

	r := chi.NewRouter()
	r.Use(chilimit.New(limiter))
	r.Get("/hello", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) })

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

// A login route with its own limit that counts failed attempts only, per
// account: after 3 failures the right password is refused too, up front,
// until the window has passed.
func Example_login() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	loginLimiter, err := core.New(core.Policy{Name: "login", Algorithm: core.SlidingLog, Limit: 3, Window: 15 * time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	login := func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}

	r := chi.NewRouter()
	r.With(chilimit.New(loginLimiter,
		httplimit.WithKey(keyfunc.Email("email")),
		httplimit.WithCountIf(httplimit.Failures),
	)).Post("/login", login)

	for _, password := range []string{"right", "wrong", "wrong", "wrong", "right"} {
		req := httptest.NewRequest("POST", "/login", strings.NewReader("email=ana@example.com&password="+password))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(password, w.Code)
	}
	// Output:
	// right 200
	// wrong 401
	// wrong 401
	// wrong 401
	// right 429
}
