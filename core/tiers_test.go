package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// A single plan decides exactly as its Memory. The plan's name is no valid
// policy name, so the policy keeps the suite's (empty) Name.
func TestTieredConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		tl, err := core.NewTiered(map[string]core.Policy{"the only plan": p},
			func(context.Context, string) (string, error) { return "the only plan", nil },
			core.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return tl
	})
}

// plans is a PlanFunc reading a map that tests change under it.
type plans struct {
	mu sync.Mutex
	m  map[string]string
}

func (p *plans) set(key, plan string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[key] = plan
}

func (p *plans) planOf(_ context.Context, key string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if plan, ok := p.m[key]; ok {
		return plan, nil
	}
	return "free", nil
}

func newTiered(t *testing.T) (*core.Tiered, *plans, *core.ManualClock) {
	t.Helper()
	clock := core.NewManualClock(layeredStart)
	pl := &plans{m: map[string]string{}}
	tl, err := core.NewTiered(map[string]core.Policy{
		"free": {Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute},
		"pro":  {Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute},
	}, pl.planOf, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return tl, pl, clock
}

// A plan change takes effect on the key's next request; each plan keeps
// the usage it counted.
func TestTieredSwitch(t *testing.T) {
	tl, pl, clock := newTiered(t)
	type step struct {
		at        time.Duration
		plan      string
		n         int64
		allowed   bool
		remaining int64
	}
	for i, st := range []step{
		{0, "free", 3, true, 0},
		{0, "free", 1, false, 0},
		{time.Second, "pro", 1, true, 9},       // upgraded: pro decides at once
		{time.Second, "pro", 8, true, 1},       // from pro's own count
		{2 * time.Second, "free", 1, false, 0}, // back on free: its usage is still there
		{3 * time.Second, "pro", 1, true, 0},   // and pro's too
		{3 * time.Second, "pro", 1, false, 0},
		{time.Minute, "free", 1, true, 2}, // a new window
	} {
		clock.Set(layeredStart.Add(st.at))
		pl.set("k", st.plan)
		d, err := tl.AllowN(ctx, "k", st.n)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining || d.Policy.Name != st.plan {
			t.Errorf("step %d (%s, n=%d): allowed=%v remaining=%d policy %q, want %v, %d, %q",
				i, st.plan, st.n, d.Allowed, d.Remaining, d.Policy.Name, st.allowed, st.remaining, st.plan)
		}
	}
	// Reset gives a fresh start in every plan.
	if err := tl.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	pl.set("k", "pro")
	if d, _ := tl.AllowN(ctx, "k", 10); !d.Allowed {
		t.Errorf("10 on pro after Reset: %+v, want allowed", d)
	}
}

// Reset forgets the key in every plan, the one it is on and the ones it
// was on, and no other key.
func TestTieredReset(t *testing.T) {
	tl, pl, _ := newTiered(t)
	for _, k := range []string{"k", "other"} {
		for _, plan := range []string{"free", "pro"} {
			pl.set(k, plan)
			if d, err := tl.AllowN(ctx, k, 3); err != nil || !d.Allowed {
				t.Fatalf("%s on %s: %+v, %v", k, plan, d, err)
			}
		}
	}
	if err := tl.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	for _, st := range []struct {
		key, plan string
		allowed   bool
		remaining int64 // after one more unit
	}{{"k", "free", true, 2}, {"k", "pro", true, 9}, {"other", "free", false, 0}, {"other", "pro", true, 6}} {
		pl.set(st.key, st.plan)
		d, err := tl.Allow(ctx, st.key)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining {
			t.Errorf("%s on %s after Reset(k): allowed=%v remaining=%d, want %v, %d",
				st.key, st.plan, d.Allowed, d.Remaining, st.allowed, st.remaining)
		}
	}
	if err := tl.Reset(ctx, ""); !errors.Is(err, core.ErrEmptyKey) {
		t.Errorf("Reset(\"\"): %v, want ErrEmptyKey", err)
	}
}

// A key whose plan flips on every request gets at most the sum of the
// plans' limits in a window.
func TestTieredFlipping(t *testing.T) {
	tl, pl, _ := newTiered(t)
	allowed := 0
	for i := range 100 {
		pl.set("k", []string{"free", "pro"}[i%2])
		if d, _ := tl.Allow(ctx, "k"); d.Allowed {
			allowed++
		}
	}
	if allowed != 13 {
		t.Fatalf("%d allowed, want 3 + 10", allowed)
	}
}

func TestTieredCostAndErrors(t *testing.T) {
	tl, pl, _ := newTiered(t)
	pl.set("big", "pro")
	if _, err := tl.AllowN(ctx, "small", 5); !errors.Is(err, core.ErrCostTooHigh) {
		t.Errorf("cost 5 on free (3/min): %v, want ErrCostTooHigh", err)
	}
	if d, err := tl.AllowN(ctx, "big", 5); err != nil || !d.Allowed || d.Remaining != 5 {
		t.Errorf("cost 5 on pro: %+v, %v; want allowed with 5 left", d, err)
	}
	pl.set("gold", "gold")
	if _, err := tl.Allow(ctx, "gold"); !errors.Is(err, core.ErrUnknownPlan) {
		t.Errorf("unknown plan: %v, want ErrUnknownPlan", err)
	}
	boom := errors.New("boom")
	var calls atomic.Int64
	failing, err := core.NewTiered(map[string]core.Policy{"free": {Limit: 1, Window: time.Second}},
		func(context.Context, string) (string, error) { calls.Add(1); return "", boom })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := failing.Allow(ctx, "k"); !errors.Is(err, boom) {
		t.Errorf("PlanFunc error: %v, want it wrapped", err)
	}
	if _, err := failing.Allow(ctx, ""); !errors.Is(err, core.ErrEmptyKey) || calls.Load() != 1 {
		t.Errorf("empty key: %v after %d PlanFunc calls; want ErrEmptyKey, PlanFunc not asked", err, calls.Load())
	}
	if _, err := failing.AllowN(ctx, "k", 0); !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("cost 0: %v, want ErrInvalidCost", err)
	}
	planOf := func(context.Context, string) (string, error) { return "free", nil }
	for name, bad := range map[string]struct {
		plans  map[string]core.Policy
		planOf core.PlanFunc
	}{
		"no plans":      {nil, planOf},
		"nil PlanFunc":  {map[string]core.Policy{"free": {Limit: 1, Window: time.Second}}, nil},
		"empty name":    {map[string]core.Policy{"": {Limit: 1, Window: time.Second}}, planOf},
		"invalid limit": {map[string]core.Policy{"free": {Window: time.Second}}, planOf},
	} {
		if _, err := core.NewTiered(bad.plans, bad.planOf); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if ps := tl.Plans(); len(ps) != 2 || ps["free"].Limit != 3 || ps["pro"].Name != "pro" || ps["pro"].Limit != 10 {
		t.Errorf("Plans() = %v", ps)
	}
}

// Goroutines on keys of two plans, changing plans under them: each plan
// admits exactly its limit per key.
func TestTieredRace(t *testing.T) {
	tl, pl, _ := newTiered(t)
	pl.set("p", "pro")
	var free, pro atomic.Int64
	var next atomic.Int64
	limitercheck.Race(16, func(int) {
		key := []string{"f", "p"}[next.Add(1)%2]
		for range 10 {
			d, err := tl.Allow(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed && key == "f" {
				free.Add(1)
			} else if d.Allowed {
				pro.Add(1)
			}
		}
	})
	if free.Load() != 3 || pro.Load() != 10 {
		t.Fatalf("free key %d, pro key %d allowed; want 3 and 10", free.Load(), pro.Load())
	}
}

// Plans from the API key's account: the free key is held to 60 per
// minute, the pro key to 1,000, and an upgrade applies on the next request.
func ExampleNewTiered() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	accounts := map[string]string{"key-ana": "free", "key-bob": "pro"} // your database
	var mu sync.Mutex
	planOf := func(_ context.Context, apiKey string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		return accounts[apiKey], nil
	}
	limiter, err := core.NewTiered(map[string]core.Policy{
		"free": {Limit: 60, Window: time.Minute},
		"pro":  {Limit: 1000, Window: time.Minute},
	}, planOf, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"key-ana", "key-bob"} {
		allowed := 0
		for range 100 {
			if d, _ := limiter.Allow(ctx, key); d.Allowed {
				allowed++
			}
		}
		d, _ := limiter.Peek(ctx, key, 1)
		fmt.Printf("%s on %s: %d of 100 allowed, %d left\n", key, d.Policy.Name, allowed, d.Remaining)
	}

	mu.Lock()
	accounts["key-ana"] = "pro" // ana upgrades
	mu.Unlock()
	d, _ := limiter.Allow(ctx, "key-ana")
	fmt.Printf("key-ana on %s: allowed=%v, %d left\n", d.Policy.Name, d.Allowed, d.Remaining)
	// Output:
	// key-ana on free: 60 of 100 allowed, 0 left
	// key-bob on pro: 100 of 100 allowed, 900 left
	// key-ana on pro: allowed=true, 999 left
}
