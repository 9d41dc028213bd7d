package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
)

// One export per client at once, beside a rate limit: a second export
// asked while the first runs gets 429 with Retry-After, and counts nothing
// in the rate limit.
func ExampleWithInFlight() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rate, _ := core.New(core.Policy{Name: "exports", Limit: 10, Window: time.Hour}, core.WithClock(clock))
	one, _ := inflight.New(1, inflight.WithClock(clock))

	var h http.Handler
	h = httplimit.Middleware(rate, httplimit.WithInFlight(one))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("again") {
			return
		}
		// While this export runs, the same client asks for another.
		second := httptest.NewRecorder()
		h.ServeHTTP(second, httptest.NewRequest("POST", "/exports?again", nil))
		fmt.Println("second:", second.Code, "Retry-After", second.Header().Get("Retry-After"))
	}))

	first := httptest.NewRecorder()
	h.ServeHTTP(first, httptest.NewRequest("POST", "/exports", nil))
	fmt.Println("first:", first.Code, first.Header().Get("RateLimit"))

	third := httptest.NewRecorder()
	h.ServeHTTP(third, httptest.NewRequest("POST", "/exports?again", nil))
	fmt.Println("third:", third.Code, third.Header().Get("RateLimit"))
	// Output:
	// second: 429 Retry-After 1
	// first: 200 "exports";r=9;t=360
	// third: 200 "exports";r=8;t=720
}
