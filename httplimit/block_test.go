package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/rules"
)

// A login route counting failures, with a block: the failure that finds
// the limit full locks the address for a minute, then two; while locked,
// even a good password gets a 429 with the lock's time as Retry-After.
func TestWithBlock(t *testing.T) {
	clock := core.NewManualClock(start)
	l, err := core.New(core.Policy{Algorithm: core.FixedWindow, Limit: 3, Window: time.Second}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	lockout, err := core.NewLockout(core.Block{For: time.Minute, Max: time.Hour}, clock,
		func(p core.Policy) (core.Limiter, error) { return core.New(p, core.WithClock(clock)) })
	if err != nil {
		t.Fatal(err)
	}
	h := httplimit.Middleware(l, httplimit.WithCountIf(httplimit.Failures), httplimit.WithBlock(lockout), httplimit.WithClock(clock))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("password") != "right" {
				w.WriteHeader(http.StatusUnauthorized)
			}
		}))
	try := func(password string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/login?password="+password, nil))
		return w
	}
	for round, lock := range []string{"60", "120"} {
		for i := range 3 {
			if w := try("wrong"); w.Code != http.StatusUnauthorized {
				t.Fatalf("round %d, failure %d: %d, want 401", round, i+1, w.Code)
			}
		}
		w := try("wrong")
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != lock {
			t.Fatalf("round %d, the failure past the limit: %d, Retry-After %q; want 429, %s", round, w.Code, w.Header().Get("Retry-After"), lock)
		}
		clock.Advance(2 * time.Second) // the window is long over
		w = try("right")
		if w.Code != http.StatusTooManyRequests || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/problem+json") {
			t.Fatalf("round %d, locked, the right password: %d %q; want a 429 problem", round, w.Code, w.Header().Get("Content-Type"))
		}
		clock.Advance(time.Duration(round+1)*time.Minute - 2*time.Second - time.Microsecond)
		if w := try("right"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("round %d, 1µs before the lock ends: %d, want 429", round, w.Code)
		}
		clock.Advance(time.Microsecond)
		if w := try("right"); w.Code != http.StatusOK {
			t.Fatalf("round %d, the lock over: %d, want 200", round, w.Code)
		}
	}
}

func TestWithBlockErrors(t *testing.T) {
	l, _ := core.New(core.Policy{Limit: 3, Window: time.Second})
	if _, err := httplimit.New(l, httplimit.WithBlock(nil)); err == nil || !strings.Contains(err.Error(), "WithBlock(nil)") {
		t.Errorf("WithBlock(nil): %v", err)
	}
	lockout, _ := core.NewLockout(core.Block{For: time.Minute}, nil, func(p core.Policy) (core.Limiter, error) { return core.New(p) })
	set, err := rules.Parse("rules.yaml", []byte(`rules: [{name: all, limits: [{name: per-ip, rate: 10/1m, key: ip}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	rl, err := rules.NewLimiter(set)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httplimit.New(rl, httplimit.WithBlock(lockout)); err == nil || !strings.Contains(err.Error(), "rule set") {
		t.Errorf("WithBlock on a rule set: %v", err)
	}
}
