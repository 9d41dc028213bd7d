package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

// ExampleNewObserved counts the outcomes of a policy with an ObserverFunc;
// a metrics package (ratekitprom) or a core.SlogObserver plugs in the same
// way.
func ExampleNewObserved() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	mem, _ := core.New(core.Policy{Name: "api", Limit: 2, Window: time.Minute}, core.WithClock(clock))
	counts := map[string]int{}
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		counts[e.Policy+" "+e.Outcome().String()]++
	})
	l, _ := core.NewObserved(mem, obs, core.WithClock(clock))
	for range 3 {
		l.Allow(context.Background(), "203.0.113.7")
	}
	fmt.Println(counts["api allowed"], "allowed,", counts["api denied"], "denied")
	// Output: 2 allowed, 1 denied
}

// ExampleNewShadow rolls out a stricter limit by watching it first: the
// enforced policy allows 3 a minute and decides; the candidate, 2 a minute,
// only reports what it would have done. Observing the enforced limiter
// reports its decisions to the same observer.
func ExampleNewShadow() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	enforced, _ := core.New(core.Policy{Name: "api", Limit: 3, Window: time.Minute}, core.WithClock(clock))
	candidate, _ := core.New(core.Policy{Name: "api-v2", Limit: 2, Window: time.Minute}, core.WithClock(clock))
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		if e.Op == core.OpAllow {
			fmt.Printf("  %s shadow=%v: %s\n", e.Policy, e.Shadow, e.Outcome())
		}
	})
	observed, _ := core.NewObserved(enforced, obs, core.WithClock(clock))
	l, _ := core.NewShadow(observed, candidate, obs, core.WithClock(clock))
	for i := range 3 {
		d, _ := l.Allow(context.Background(), "203.0.113.7")
		fmt.Printf("request %d allowed: %v\n", i+1, d.Allowed)
	}
	// Output:
	//   api shadow=false: allowed
	//   api-v2 shadow=true: allowed
	// request 1 allowed: true
	//   api shadow=false: allowed
	//   api-v2 shadow=true: allowed
	// request 2 allowed: true
	//   api shadow=false: allowed
	//   api-v2 shadow=true: denied
	// request 3 allowed: true
}

// ExampleKeyHash shows the hash a SlogObserver logs for a key, here with a
// salt: `printf %s 203.0.113.7 | openssl dgst -sha256 -hmac pepper` starts
// with the same 16 hex digits.
func ExampleKeyHash() {
	fmt.Println(core.KeyHash([]byte("pepper"), "203.0.113.7"))
	// Output: f9a092447a622340
}
