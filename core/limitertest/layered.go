package limitertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// NewLayeredFunc builds a layered limiter of the policies ps, in that
// order, deciding by clock, and for each layer a Limiter that shares the
// layer's state (the layer seen alone, to check what was counted in it).
type NewLayeredFunc func(t *testing.T, ps []core.Policy, clock *core.ManualClock) (core.MultiKeyLimiter, []core.Limiter)

// RunLayered runs the layered limiter suite: a step table of a per-second
// and a per-day layer (the most restrictive layer decides, a denial counts
// nothing in any layer), the errors of bad keys and costs, and eight
// goroutines racing on a new key. Run [Run] too, on a one-layer limiter:
// it must decide exactly as its policy alone.
func RunLayered(t *testing.T, newLayered NewLayeredFunc) {
	t.Run("steps", func(t *testing.T) { layeredSteps(t, newLayered) })
	t.Run("errors", func(t *testing.T) { layeredErrors(t, newLayered) })
	t.Run("new key race", func(t *testing.T) { layeredNewKeyRace(t, newLayered) })
}

// 2 per second and 5 per day on one key, step by step: the decision is the
// most restrictive layer's, and a denial counts nothing in the other layer.
func layeredSteps(t *testing.T, newLayered NewLayeredFunc) {
	clock := core.NewManualClock(limitercheck.StartTime())
	l, alone := newLayered(t, []core.Policy{
		{Name: "second", Limit: 2, Window: time.Second},
		{Name: "day", Algorithm: core.FixedWindow, Limit: 5, Window: 24 * time.Hour},
	}, clock)
	second, day := alone[0], alone[1]
	steps := []struct {
		at         time.Duration
		n          int64
		allowed    bool
		layer      int
		remaining  int64
		retryAfter time.Duration
	}{
		{0, 1, true, 0, 1, 0},                       // second 1 left, day 4
		{0, 1, true, 0, 0, 0},                       // second 0, day 3
		{0, 1, false, 0, 0, 500 * time.Millisecond}, // second denies; day not counted
		{time.Second, 2, true, 0, 0, 0},             // second 0, day 1
		{2 * time.Second, 2, false, 1, 1, 23*time.Hour + 59*time.Minute + 58*time.Second},
		{2 * time.Second, 1, true, 1, 0, 0}, // second 1, day 0: day is tighter
		{3 * time.Second, 1, false, 1, 0, 23*time.Hour + 59*time.Minute + 57*time.Second},
		{24 * time.Hour, 2, true, 0, 0, 0},
	}
	for i, st := range steps {
		clock.Set(limitercheck.StartTime().Add(st.at))
		pd, err := l.PeekKeys(ctx, []string{"k"}, st.n)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.AllowKeys(ctx, []string{"k"}, st.n)
		if err != nil {
			t.Fatal(err)
		}
		if !peekPredictsLayered(pd, d, st.n) {
			t.Fatalf("step %d: PeekKeys %+v, AllowKeys %+v", i, pd, d)
		}
		if d.Allowed != st.allowed || d.Layer != st.layer || d.Remaining != st.remaining || d.RetryAfter != st.retryAfter {
			t.Errorf("step %d (at %v, n=%d):\n got allowed=%v layer=%d remaining=%d retryAfter=%v\nwant allowed=%v layer=%d remaining=%d retryAfter=%v",
				i, st.at, st.n, d.Allowed, d.Layer, d.Remaining, d.RetryAfter, st.allowed, st.layer, st.remaining, st.retryAfter)
		}
		layer := d.Layers[d.Layer]
		layer.Delay = d.Delay
		if d.Policy != l.Policies()[d.Layer] || d.Decision != layer {
			t.Errorf("step %d: Decision %+v is not layer %d's %+v", i, d.Decision, d.Layer, d.Layers[d.Layer])
		}
		if i != 6 {
			continue
		}
		// Step 2 counted nothing in day, steps 4 and 6 nothing in second:
		// day holds the 5 allowed units (1+1+2+1), and second, refilled
		// since step 5, is full.
		if d, _ := day.Peek(ctx, "k", 1); d.Allowed {
			t.Errorf("day layer on its own: %+v, want exhausted by the 5 allowed units", d)
		}
		if d, _ := second.Peek(ctx, "k", 2); !d.Allowed {
			t.Errorf("second layer on its own: %+v, want 2 free (denials counted nothing)", d)
		}
	}
}

// Bad keys and costs are errors naming the problem, and count nothing.
func layeredErrors(t *testing.T, newLayered NewLayeredFunc) {
	l, alone := newLayered(t, []core.Policy{
		{Name: "big", Limit: 100, Window: time.Hour},
		{Name: "small", Limit: 5, Window: time.Second},
	}, core.NewManualClock(limitercheck.StartTime()))
	d, err := l.AllowN(ctx, "k", 6)
	if !errors.Is(err, core.ErrCostTooHigh) || d.Policy.Name != "small" {
		t.Errorf("cost 6 over small's 5: %+v, %v; want ErrCostTooHigh naming small", d, err)
	}
	if _, err := l.AllowN(ctx, "", 1); !errors.Is(err, core.ErrEmptyKey) {
		t.Errorf("empty key: %v, want ErrEmptyKey", err)
	}
	if _, err := l.AllowKeys(ctx, []string{"a", ""}, 1); !errors.Is(err, core.ErrEmptyKey) {
		t.Errorf("empty second key: %v, want ErrEmptyKey", err)
	}
	if err := l.ResetKeys(ctx, []string{"a", ""}); !errors.Is(err, core.ErrEmptyKey) {
		t.Errorf("ResetKeys with an empty key: %v, want ErrEmptyKey", err)
	}
	if _, err := l.AllowN(ctx, "k", 0); !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("cost 0: %v, want ErrInvalidCost", err)
	}
	if _, err := l.AllowKeys(ctx, []string{"a", "b", "c"}, 1); err == nil {
		t.Errorf("3 keys for 2 layers: no error")
	}
	if d, _ := l.Peek(ctx, "k", 5); !d.Allowed {
		t.Errorf("a refused request counted: %+v", d)
	}
	if d, _ := alone[1].Peek(ctx, "k", 5); !d.Allowed {
		t.Errorf("a refused request counted in small: %+v", d)
	}
}

// Eight goroutines racing on a new key with layers of 1 and 10 per hour:
// exactly one is allowed, every round.
func layeredNewKeyRace(t *testing.T, newLayered NewLayeredFunc) {
	ten := core.Policy{Name: "ten", Limit: 10, Window: time.Hour}
	for _, one := range []core.Policy{
		{Name: "one", Limit: 1, Window: time.Hour},
		{Name: "one", Algorithm: core.SlidingLog, Limit: 1, Window: time.Hour},
	} {
		t.Run(one.Algorithm.String(), func(t *testing.T) {
			l, _ := newLayered(t, []core.Policy{one, ten}, core.NewManualClock(limitercheck.StartTime()))
			const rounds, racers = 300, 8
			for r := range rounds {
				key := fmt.Sprintf("new-%d", r)
				got := limitercheck.CountAllowed(t, racers, 1, func(int) (core.Decision, error) { return l.AllowN(ctx, key, 1) })
				if got != 1 {
					t.Fatalf("round %d: %d of %d allowed, want exactly 1", r, got, racers)
				}
			}
		})
	}
}
