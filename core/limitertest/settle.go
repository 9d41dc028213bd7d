package limitertest

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// RunSettle runs the settle suite against the limiters newLimiter builds,
// which must be [core.Settler]s ([core.As] must find the capability; the
// suite fails t otherwise). For every algorithm it checks that a key
// overspent by k units is denied, with Remaining 0, for exactly the wait
// its algorithm defines and allowed at that time (not 1 µs before); that
// settling below the estimate gives back what [core.Refunder.Refund]
// would, and at it changes nothing; that a debt is bounded at one
// capacity; that a key not held is charged; errors for bad arguments; and
// eight goroutines taking estimates and settling them on one key, the
// clock standing, leaving it holding exactly their actual costs. Run it
// beside [Run].
func RunSettle(t *testing.T, newLimiter NewLimiter) {
	s := settleSuite{newLimiter: newLimiter}
	t.Run("Overspend", s.testOverspend)
	t.Run("Below", s.testBelow)
	t.Run("Bound", s.testBound)
	t.Run("AbsentKey", s.testAbsentKey)
	t.Run("Errors", s.testErrors)
	t.Run("Race", s.testRace)
}

type settleSuite struct {
	newLimiter NewLimiter
}

// build returns a Settler for p on a manual clock at StartTime.
func (s settleSuite) build(t *testing.T, p core.Policy) (core.Settler, *core.ManualClock) {
	t.Helper()
	clock := core.NewManualClock(limitercheck.StartTime())
	l := s.newLimiter(t, p, clock)
	st, ok := core.As[core.Settler](l)
	if !ok {
		t.Fatalf("%T cannot settle: not a core.Settler", l)
	}
	return st, clock
}

func settle(t *testing.T, s core.Settler, key string, estimate, actual int64, elapsed time.Duration) {
	t.Helper()
	if err := s.Settle(ctx, key, estimate, actual, elapsed); err != nil {
		t.Fatalf("Settle(%q, %d, %d, %v): %v", key, estimate, actual, elapsed, err)
	}
}

// settlePolicy is 10 per 10 s: a unit refills in 1 s.
var settlePolicy = core.Policy{Limit: 10, Window: 10 * time.Second}

// A key that took its whole capacity and settled it k units higher, 2.5 s
// into a window, waits for n units exactly as its algorithm defines:
// (k + n)·T for the buckets; the window's end (7.5 s) for the fixed
// window; for the sliding window, until the estimate of the next window
// lets n in; and for the sliding log, until its entry, the capacity and
// the charge at 2.5 s, has left (10 s).
func (s settleSuite) testOverspend(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, settlePolicy, func(t *testing.T, p core.Policy) {
		for _, k := range []int64{1, 4, 10} {
			for _, n := range []int64{1, 3, 10} {
				lim, clock := s.build(t, p)
				clock.Set(limitercheck.StartTime().Add(2500 * time.Millisecond))
				key := "k"
				if d := allow(t, lim, key, 10); !d.Allowed {
					t.Fatalf("the whole capacity: %+v", d)
				}
				settle(t, lim, key, 10, 10+k, 0)
				var want time.Duration
				switch p.Algorithm {
				case core.TokenBucket, core.LeakyBucket:
					want = time.Duration(k+n) * time.Second
				case core.FixedWindow:
					want = 7500 * time.Millisecond
				case core.SlidingWindow:
					// prev = 10+k weighs (10 s - e)/10 s in the next window.
					e := 10*time.Second - time.Duration((10-n)*int64(10*time.Second/time.Microsecond)/(10+k))*time.Microsecond
					want = 7500*time.Millisecond + e
				case core.SlidingLog:
					// The capacity and the charge share one entry, at
					// 2.5 s: it leaves a window later.
					want = 10 * time.Second
				}
				for _, d := range []core.Decision{peek(t, lim, key, n), allow(t, lim, key, n)} {
					if d.Allowed || d.Remaining != 0 || d.RetryAfter != want || d.ResetAfter < d.RetryAfter {
						t.Fatalf("k=%d n=%d: in debt %+v, want denied, Remaining 0, RetryAfter %v", k, n, d, want)
					}
				}
				clock.Advance(want - time.Microsecond)
				if d := allow(t, lim, key, n); d.Allowed || d.RetryAfter != time.Microsecond {
					t.Fatalf("k=%d n=%d: 1µs before: %+v", k, n, d)
				}
				clock.Advance(time.Microsecond)
				if d := allow(t, lim, key, n); !d.Allowed {
					t.Fatalf("k=%d n=%d: at RetryAfter: %+v", k, n, d)
				}
			}
		}
	})
}

// Settling below the estimate gives back what a Refund of the difference
// does, elapsed included; at the estimate nothing changes. Three keys
// take the same requests at the same times: one settles, one refunds, one
// takes only what the other two keep.
func (s settleSuite) testBelow(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, settlePolicy, func(t *testing.T, p core.Policy) {
		lim, clock := s.build(t, p)
		ref, ok := core.As[core.Refunder](lim)
		if !ok {
			t.Skip("not a Refunder")
		}
		rng := rand.New(rand.NewPCG(1, uint64(p.Algorithm)))
		for step := range 60 {
			clock.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
			est := 1 + rng.Int64N(4)
			a, b := allow(t, lim, "settled", est), allow(t, lim, "refunded", est)
			if a != b {
				t.Fatalf("step %d: %+v, twin %+v", step, a, b)
			}
			if !a.Allowed {
				continue
			}
			elapsed := time.Duration(rng.Int64N(int64(2 * time.Second)))
			clock.Advance(elapsed)
			actual := rng.Int64N(est + 1)
			settle(t, lim, "settled", est, actual, elapsed)
			if actual < est {
				refund(t, ref, "refunded", est-actual, elapsed)
			}
			sameAs(t, lim, "settled", "refunded", "after settling below the estimate")
		}
	})
}

// A huge actual cost overflows nothing: the key waits at most what a debt
// of one capacity takes, twice the capacity's refill for the buckets and
// two windows for the others.
func (s settleSuite) testBound(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, settlePolicy, func(t *testing.T, p core.Policy) {
		lim, clock := s.build(t, p)
		allow(t, lim, "k", 1)
		for range 3 {
			settle(t, lim, "k", 1, 1<<62, 0)
		}
		d := peek(t, lim, "k", 1)
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > 20*time.Second {
			t.Fatalf("at the bound: %+v, want denied for at most 20 s", d)
		}
		clock.Advance(d.RetryAfter)
		if d := allow(t, lim, "k", 1); !d.Allowed {
			t.Fatalf("at RetryAfter: %+v", d)
		}
	})
}

// A key not held is charged, as its first request would be: the request
// ran while its state was dropped (or on another instance).
func (s settleSuite) testAbsentKey(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, settlePolicy, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		settle(t, lim, "new", 2, 5, 0)
		allow(t, lim, "twin", 3)
		sameAs(t, lim, "new", "twin", "a key not held, charged 3")
		settle(t, lim, "none", 2, 1, 0) // a give-back creates nothing
		sameAs(t, lim, "none", "never", "a key not held, given back 1")
	})
}

func (s settleSuite) testErrors(t *testing.T) {
	lim, _ := s.build(t, settlePolicy)
	for _, c := range []struct {
		key         string
		est, actual int64
		elapsed     time.Duration
		want        error
	}{
		{"", 1, 1, 0, core.ErrEmptyKey},
		{"k", 0, 1, 0, core.ErrInvalidCost},
		{"k", -1, 1, 0, core.ErrInvalidCost},
		{"k", 1, -1, 0, core.ErrInvalidCost},
		{"k", 1, 2, -time.Nanosecond, core.ErrInvalidElapsed},
	} {
		err := lim.Settle(ctx, c.key, c.est, c.actual, c.elapsed)
		if !errors.Is(err, c.want) || !core.CallerError(ctx, err) {
			t.Errorf("Settle(%q, %d, %d, %v) = %v, want %v, a caller error", c.key, c.est, c.actual, c.elapsed, err, c.want)
		}
	}
	if d := peek(t, lim, "k", 1); d.Remaining != settlePolicy.Limit {
		t.Fatalf("failed settles counted: %+v", d)
	}
}

// Eight goroutines on one key, the clock standing: each takes estimates of
// 1 to 4 units and settles them at 0 to 6, and the key then holds exactly
// the sum of the actual costs (it stays below the limit, so Remaining
// tells).
func (s settleSuite) testRace(t *testing.T) {
	p := core.Policy{Limit: 100_000, Window: time.Hour}
	limitercheck.ForEachAlgorithm(t, p, func(t *testing.T, p core.Policy) {
		lim, clock := s.build(t, p)
		clock.Set(limitercheck.StartTime().Add(time.Minute))
		var total, errs atomic.Int64
		limitercheck.Race(8, func(g int) {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 200 {
				est := 1 + rng.Int64N(4)
				d, err := lim.AllowN(ctx, "hot", est)
				if err != nil || !d.Allowed {
					errs.Add(1)
					continue
				}
				actual := rng.Int64N(7)
				if lim.Settle(ctx, "hot", est, actual, 0) != nil {
					errs.Add(1)
					continue
				}
				total.Add(actual)
			}
		})
		if errs.Load() != 0 {
			t.Fatalf("%d requests failed or were denied", errs.Load())
		}
		if d := peek(t, lim, "hot", 1); d.Remaining != p.Capacity()-total.Load() {
			t.Fatalf("after settles totalling %d: %+v, want %d left", total.Load(), d, p.Capacity()-total.Load())
		}
	})
}
