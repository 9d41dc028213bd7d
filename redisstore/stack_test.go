package redisstore

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// Limits stacked on one request decide together on Redis too: a request
// the route's limit refuses is given back to the app's limit, exactly,
// for every algorithm but the leaky bucket (whose Delay the middleware
// waits in real time), so the app's quota is spent only by requests served.
func TestStackedLimitsOnRedis(t *testing.T) {
	addr := singleNode(t)
	for _, a := range core.Algorithms() {
		if a == core.LeakyBucket {
			continue // its Delay is waited in real time
		}
		t.Run(a.String(), func(t *testing.T) {
			clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			prefix := uniquePrefix(t.Name())
			app := mustNew(t, newClient(t, addr), core.Policy{Name: "app", Algorithm: a, Limit: 3, Window: time.Hour}, WithPrefix(prefix), WithClock(clock))
			route := mustNew(t, newClient(t, addr), core.Policy{Name: "route", Algorithm: a, Limit: 1, Window: time.Hour}, WithPrefix(prefix), WithClock(clock))
			ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
			mux := http.NewServeMux()
			mux.Handle("/limited", httplimit.Middleware(route, httplimit.WithClock(clock))(ok))
			mux.Handle("/open", ok)
			h := httplimit.Middleware(app, httplimit.WithClock(clock))(mux)
			send := func(path string) int {
				w := httptest.NewRecorder()
				r := httptest.NewRequest("GET", path, nil)
				r.RemoteAddr = "192.0.2.1:1234"
				h.ServeHTTP(w, r)
				return w.Code
			}
			got := []int{send("/limited")}
			for range 4 {
				got = append(got, send("/limited"))
			}
			for range 3 {
				got = append(got, send("/open"))
			}
			want := []int{200, 429, 429, 429, 429, 200, 200, 429}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("statuses %v, want %v", got, want)
				}
			}
		})
	}
}
