package observe_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
)

// ExampleNewObserved counts the outcomes of a policy with an ObserverFunc;
// a metrics package (ratekitprom) or a observe.Slog plugs in the same
// way.
func ExampleNew() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	mem, _ := core.New(core.Policy{Name: "api", Limit: 2, Window: time.Minute}, core.WithClock(clock))
	counts := map[string]int{}
	obs := observe.ObserverFunc(func(_ context.Context, e observe.Event) {
		counts[e.Policy+" "+e.Outcome().String()]++
	})
	l, _ := observe.New(mem, obs, observe.WithClock(clock))
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
	obs := observe.ObserverFunc(func(_ context.Context, e observe.Event) {
		if e.Op == observe.OpAllow {
			fmt.Printf("  %s shadow=%v: %s\n", e.Policy, e.Shadow, e.Outcome())
		}
	})
	observed, _ := observe.New(enforced, obs, observe.WithClock(clock))
	l, _ := observe.NewShadow(observed, candidate, obs, observe.WithClock(clock))
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
	fmt.Println(observe.KeyHash([]byte("pepper"), "203.0.113.7"))
	// Output: f9a092447a622340
}
