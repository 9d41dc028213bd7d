//go:build !race

package rules_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/rules"
)

// A request decided by a rule set through the middleware allocates
// nothing: the verdict comes from a pool and goes back when the adapter
// releases the request (the race detector's own allocations aside).
func TestLimiterInMiddlewareAllocations(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	set, err := rules.Parse("r.yaml", []byte(`
rules:
  - name: all
    limits:
      - {name: per-ip, rate: 1000000000/1m, key: ip}
      - {name: per-peer, rate: 1000000000/1m, key: peer}
`))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := rules.NewLimiter(set, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	h := httplimit.Middleware(lim)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/x", nil)
	w := httptest.NewRecorder()
	if a := testing.AllocsPerRun(1000, func() { clear(w.Header()); h.ServeHTTP(w, r) }); a != 0 {
		t.Errorf("%v allocations per request, want 0", a)
	}
}
