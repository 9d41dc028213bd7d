package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// A token-metered endpoint: each request is counted at an estimate of 500
// tokens before the handler runs, and settled at the tokens it used after.
// The headers are written before the handler runs, with the estimate
// counted: the third request leaves 200 tokens by its estimate, but used
// 700 more, so the key owes 500 beyond its limit and the next request
// waits for 1,000 tokens (its 500 and the debt) to refill: 8,640 s.
func ExampleWithSettle() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	// 10,000 tokens a day, refilling continuously.
	limiter, err := core.New(core.Policy{Name: "tokens", Limit: 10000, Window: 24 * time.Hour}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	used := []int64{300, 9000, 1200}
	ai := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := used[0]
		used = used[1:]
		httplimit.SetCost(r.Context(), n) // what the model reported
		fmt.Fprintf(w, "used %d tokens", n)
	})
	h := httplimit.Middleware(limiter,
		httplimit.WithSettle(),
		httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 500, nil }),
		httplimit.WithClock(clock),
	)(ai)

	for range 4 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat", nil))
		if rec.Code == http.StatusOK {
			fmt.Println(rec.Code, rec.Header().Get("RateLimit"), rec.Body.String())
		} else {
			fmt.Println(rec.Code, rec.Header().Get("RateLimit"), "Retry-After:", rec.Header().Get("Retry-After"))
		}
	}
	// Output:
	// 200 "tokens";r=9500;t=4320 used 300 tokens
	// 200 "tokens";r=9200;t=6912 used 9000 tokens
	// 200 "tokens";r=200;t=84672 used 1200 tokens
	// 429 "tokens";r=0;t=8640 Retry-After: 8640
}
