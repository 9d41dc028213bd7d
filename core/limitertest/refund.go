package limitertest

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// RunRefund runs the refund suite against the limiters newLimiter builds,
// which must be [core.Refunder]s ([core.As] must find the capability; the
// suite fails t otherwise). For every algorithm it checks that units taken
// and refunded at once are given back exactly, that units a refill or the
// end of a window forgot are not given back again, that a refund never
// leaves a key more room than a fresh one, that refunding a key never seen
// creates nothing, partial refunds and elapsed times across window
// boundaries (step tables), the sliding log's choice of entries, errors for
// bad arguments, eight goroutines taking and giving back on one key with
// Limit 1, and the buckets after the clock steps back. Run it beside [Run].
func RunRefund(t *testing.T, newLimiter NewLimiter) {
	s := refundSuite{newLimiter: newLimiter}
	t.Run("TakeThenRefund", s.testTakeThenRefund)
	t.Run("Forgotten", s.testForgotten)
	t.Run("NeverPastFresh", s.testNeverPastFresh)
	t.Run("AbsentKey", s.testAbsentKey)
	t.Run("Steps", s.testSteps)
	t.Run("Errors", s.testErrors)
	t.Run("Race", s.testRace)
	t.Run("ClockBack", s.testClockBack)
}

type refundSuite struct {
	newLimiter NewLimiter
}

// build returns a Refunder for p on a manual clock at StartTime.
func (s refundSuite) build(t *testing.T, p core.Policy) (core.Refunder, *core.ManualClock) {
	t.Helper()
	clock := core.NewManualClock(limitercheck.StartTime())
	l := s.newLimiter(t, p, clock)
	r, ok := core.As[core.Refunder](l)
	if !ok {
		t.Fatalf("%T cannot give units back: not a core.Refunder", l)
	}
	return r, clock
}

func refund(t *testing.T, r core.Refunder, key string, n int64, elapsed time.Duration) {
	t.Helper()
	if err := r.Refund(ctx, key, n, elapsed); err != nil {
		t.Fatalf("Refund(%q, %d, %v): %v", key, n, elapsed, err)
	}
}

// sameAs fails t unless key decides exactly as twin for every cost, now.
func sameAs(t *testing.T, lim core.Limiter, key, twin string, what string) {
	t.Helper()
	pol := peek(t, lim, twin, 1).Policy
	for n := int64(1); n <= pol.Capacity(); n++ {
		if got, want := peek(t, lim, key, n), peek(t, lim, twin, n); got != want {
			t.Fatalf("%s: Peek(%d)\n got %+v\nwant %+v", what, n, got, want)
		}
	}
}

// refundPolicy is the policy of most of the suite's tests: 4 a minute, an
// emission interval of 15 s.
var refundPolicy = core.Policy{Limit: 4, Window: time.Minute}

// Units taken and given back at the same instant with elapsed 0 are given
// back exactly: the key decides as one that took only what was kept.
func (s refundSuite) testTakeThenRefund(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, refundPolicy, func(t *testing.T, p core.Policy) {
		lim, clock := s.build(t, p)
		clock.Set(limitercheck.StartTime().Add(10 * time.Second))
		c := p.Capacity()
		for k := int64(1); k <= c; k++ {
			key, twin := fmt.Sprintf("all-%d", k), fmt.Sprintf("kept-%d", k)
			allow(t, lim, key, c)
			if c > k {
				allow(t, lim, twin, c-k)
			}
			refund(t, lim, key, k, 0)
			sameAs(t, lim, key, twin, fmt.Sprintf("took %d, gave back %d", c, k))
		}
		// One unit at a time, from an exhausted key to a fresh one.
		allow(t, lim, "one-by-one", c)
		for k := int64(1); k <= c; k++ {
			refund(t, lim, "one-by-one", 1, 0)
			twin := fmt.Sprintf("step-%d", k)
			if c > k {
				allow(t, lim, twin, c-k)
			}
			sameAs(t, lim, "one-by-one", twin, fmt.Sprintf("took %d, gave back 1 %d times", c, k))
		}
	})
}

// Units that a refill or the end of a window has forgotten are not given
// back again: a refund naming them gives nothing, even when the key holds
// newer units.
func (s refundSuite) testForgotten(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, refundPolicy, func(t *testing.T, p core.Policy) {
		lim, clock := s.build(t, p)
		c := p.Capacity()
		allow(t, lim, "k", 1)
		// Two windows on, every algorithm has forgotten the unit.
		clock.Advance(2 * p.Window)
		allow(t, lim, "k", c)
		allow(t, lim, "twin", c)
		refund(t, lim, "k", 1, 2*p.Window)
		sameAs(t, lim, "k", "twin", "refund of a unit forgotten two windows ago")
		if d := peek(t, lim, "k", 1); d.Allowed {
			t.Fatalf("after the refund of a forgotten unit: %+v, want denied", d)
		}
	})
}

// A refund never raises a key past fresh, however much it names and
// however often.
func (s refundSuite) testNeverPastFresh(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, refundPolicy, func(t *testing.T, p core.Policy) {
		lim, clock := s.build(t, p)
		c := p.Capacity()
		allow(t, lim, "k", 1)
		refund(t, lim, "k", c, 0)
		refund(t, lim, "k", c, 0)
		sameAs(t, lim, "k", "never-seen", "refund of more than was taken")
		clock.Advance(time.Second)
		allow(t, lim, "k", 2)
		for range 3 {
			refund(t, lim, "k", 2, 0)
		}
		sameAs(t, lim, "k", "never-seen", "the same refund three times")
		if d := allow(t, lim, "k", c); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("capacity after the refunds: %+v, want allowed with 0 left", d)
		}
		if d := allow(t, lim, "k", 1); d.Allowed {
			t.Fatalf("one more than capacity after the refunds allowed: %+v", d)
		}
	})
}

// Refunding a key never seen creates nothing: it decides as a new key, and
// no credit was stored for it.
func (s refundSuite) testAbsentKey(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, refundPolicy, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		c := p.Capacity()
		refund(t, lim, "absent", c, 0)
		refund(t, lim, "absent", 1, time.Hour)
		sameAs(t, lim, "absent", "never-seen", "refund of a key never seen")
		if d := allow(t, lim, "absent", c); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("capacity after refunding an absent key: %+v, want allowed with 0 left", d)
		}
		if d := allow(t, lim, "absent", 1); d.Allowed {
			t.Fatalf("one more than capacity after refunding an absent key allowed: %+v", d)
		}
	})
}

type refundOp uint8

const (
	opAllow refundOp = iota
	opPeek
	opRefund
)

func (o refundOp) String() string { return [...]string{"AllowN", "Peek", "Refund"}[o] }

// refundStep is one call of a refund step table: at a time since StartTime, n
// units (and elapsed, for a refund), and for AllowN and Peek the Decision
// fields wanted.
type refundStep struct {
	at         time.Duration
	op         refundOp
	n          int64
	elapsed    time.Duration
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	delay      time.Duration
}

func runRefundSteps(t *testing.T, lim core.Refunder, clock *core.ManualClock, key string, steps []refundStep) {
	t.Helper()
	for i, st := range steps {
		clock.Set(limitercheck.StartTime().Add(st.at))
		if st.op == opRefund {
			if err := lim.Refund(ctx, key, st.n, st.elapsed); err != nil {
				t.Fatalf("step %d (at %v): Refund(%d, %v): %v", i, st.at, st.n, st.elapsed, err)
			}
			continue
		}
		var d core.Decision
		var err error
		if st.op == opAllow {
			d, err = lim.AllowN(ctx, key, st.n)
		} else {
			d, err = lim.Peek(ctx, key, st.n)
		}
		if err != nil {
			t.Fatalf("step %d (at %v): %v(%d): %v", i, st.at, st.op, st.n, err)
		}
		got := refundStep{st.at, st.op, st.n, 0, d.Allowed, d.Remaining, d.RetryAfter, d.Delay}
		if got != st {
			t.Errorf("step %d (at %v, %v n=%d):\n got allowed=%v remaining=%d retryAfter=%v delay=%v\nwant allowed=%v remaining=%d retryAfter=%v delay=%v",
				i, st.at, st.op, st.n, got.allowed, got.remaining, got.retryAfter, got.delay,
				st.allowed, st.remaining, st.retryAfter, st.delay)
		}
	}
}

// Partial refunds, elapsed times that reach back across a window boundary
// or past the refill, and the sliding log's choice of entries, at 4 a
// minute (a unit refills in 15 s).
func (s refundSuite) testSteps(t *testing.T) {
	const sec = time.Second
	take := func(at time.Duration, n int64, allowed bool, remaining int64, retryAfter time.Duration) refundStep {
		return refundStep{at: at, op: opAllow, n: n, allowed: allowed, remaining: remaining, retryAfter: retryAfter}
	}
	look := func(at time.Duration, n int64, allowed bool, remaining int64, retryAfter time.Duration) refundStep {
		return refundStep{at: at, op: opPeek, n: n, allowed: allowed, remaining: remaining, retryAfter: retryAfter}
	}
	give := func(at time.Duration, n int64, elapsed time.Duration) refundStep {
		return refundStep{at: at, op: opRefund, n: n, elapsed: elapsed}
	}
	queue := func(at time.Duration, remaining int64, delay time.Duration) refundStep {
		return refundStep{at: at, op: opAllow, n: 1, allowed: true, remaining: remaining, delay: delay}
	}
	tests := []struct {
		name  string
		alg   core.Algorithm
		steps []refundStep
	}{
		{"token-bucket", core.TokenBucket, []refundStep{
			take(0, 4, true, 0, 0),
			look(0, 1, false, 0, 15*sec),
			give(0, 1, 0), // backlog 60 s -> 45 s
			look(0, 1, true, 1, 0),
			// At 10 s the backlog is 35 s; of the unit's 15 s, 10 s have
			// refilled already: 5 s come back.
			give(10*sec, 1, 10*sec),
			look(10*sec, 2, true, 2, 0),
			look(10*sec, 3, false, 2, 15*sec),
			// A unit counted 20 s ago has refilled: nothing comes back.
			give(10*sec, 1, 20*sec),
			look(10*sec, 3, false, 2, 15*sec),
			// Elapsed rounds up to the microsecond: 30 s - 5.000001 s
			// come back, leaving 5.000001 s.
			give(10*sec, 2, 5*sec+1),
			look(10*sec, 4, false, 3, 5*sec+us),
			// Full at 20 s: nothing to give back, never past full.
			give(20*sec, 4, 0),
			look(20*sec, 4, true, 4, 0),
			take(20*sec, 4, true, 0, 0),
			look(20*sec, 1, false, 0, 15*sec),
		}},
		{"leaky-bucket", core.LeakyBucket, []refundStep{
			queue(0, 3, 0),
			queue(0, 2, 15*sec),
			queue(0, 1, 30*sec),
			give(0, 1, 0), // the last slot is free again
			queue(0, 1, 30*sec),
			// At 5 s the queue holds 40 s; 25 s of the two units' 30 s
			// come back.
			give(5*sec, 2, 5*sec),
			queue(5*sec, 2, 15*sec),
			look(5*sec, 3, false, 2, 15*sec),
		}},
		{"fixed-window", core.FixedWindow, []refundStep{
			take(10*sec, 3, true, 1, 0),
			give(20*sec, 2, 5*sec), // counted at 15 s or later: this window
			look(20*sec, 3, true, 3, 0),
			look(20*sec, 4, false, 3, 40*sec),
			take(50*sec, 3, true, 0, 0),
			take(65*sec, 4, true, 0, 0),
			// Counted at 55 s or later: maybe in the window gone by.
			give(70*sec, 4, 15*sec),
			look(70*sec, 1, false, 0, 50*sec),
			// 10 s and 1 ns rounds up to 10.000001 s: before the boundary.
			give(70*sec, 1, 10*sec+1),
			look(70*sec, 1, false, 0, 50*sec),
			// Counted at 60 s or later: in this window.
			give(70*sec, 1, 10*sec),
			look(70*sec, 1, true, 1, 0),
			give(70*sec, 4, 0), // 3 counted: back to 0, not below
			look(70*sec, 4, true, 4, 0),
			take(70*sec, 4, true, 0, 0),
			look(70*sec, 1, false, 0, 50*sec),
		}},
		{"sliding-window", core.SlidingWindow, []refundStep{
			take(30*sec, 4, true, 0, 0),
			// 10 s into the next window the previous 4 weigh 4·50/60.
			look(70*sec, 1, false, 0, 5*sec),
			// Counted at 25 s or later: the previous window loses 2.
			give(70*sec, 2, 45*sec),
			look(70*sec, 2, true, 2, 0),
			look(70*sec, 3, false, 2, 20*sec),
			take(70*sec, 2, true, 0, 0),
			// Counted at 65 s or later: the current window loses 2.
			give(80*sec, 2, 15*sec),
			look(80*sec, 2, true, 2, 0),
			look(80*sec, 3, false, 2, 10*sec),
			// Counted at 55 s or later: in the previous window or this
			// one; the previous one loses 1, which gives back less.
			give(80*sec, 1, 25*sec),
			look(80*sec, 3, true, 3, 0),
			take(100*sec, 2, true, 1, 0),
			// Counted at 55 s or later, seen at 130 s: maybe two windows
			// back, nothing comes back.
			give(130*sec, 2, 75*sec),
			look(130*sec, 4, false, 2, 50*sec),
			give(130*sec, 2, 40*sec), // at 90 s or later: the previous window
			look(130*sec, 4, true, 4, 0),
		}},
		{"sliding-log", core.SlidingLog, []refundStep{
			take(0, 2, true, 2, 0),
			take(10*sec, 1, true, 1, 0),
			take(20*sec, 1, true, 0, 0),
			// Counted at 5 s or later: the oldest such entry, at 10 s,
			// goes. Left: 2 at 0 s, 1 at 20 s.
			give(30*sec, 1, 25*sec),
			look(30*sec, 1, true, 1, 0),
			look(30*sec, 4, false, 1, 50*sec),
			// Counted at 0 s or later: one of the two at 0 s goes.
			give(30*sec, 1, 30*sec),
			look(30*sec, 3, false, 2, 30*sec),
			look(30*sec, 4, false, 2, 50*sec),
			// Counted at 0 s or later, seen at 65 s: the units may have
			// left, and the entry at 20 s is another request's.
			give(65*sec, 1, 65*sec),
			look(65*sec, 4, false, 3, 15*sec),
			take(65*sec, 2, true, 1, 0),
			// Counted at 15 s or later: the entry at 20 s goes.
			give(65*sec, 1, 50*sec),
			look(65*sec, 2, true, 2, 0),
			look(65*sec, 3, false, 2, 60*sec),
			// Counted at 70 s or later: no such entry.
			give(70*sec, 4, 0),
			look(70*sec, 3, false, 2, 55*sec),
			give(70*sec, 4, 5*sec), // at 65 s or later: both units
			look(70*sec, 4, true, 4, 0),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := refundPolicy
			p.Algorithm = tt.alg
			lim, clock := s.build(t, p)
			runRefundSteps(t, lim, clock, "steps", tt.steps)
		})
	}
}

// Bad arguments are errors, as for AllowN, and change nothing.
func (s refundSuite) testErrors(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, refundPolicy, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		c := p.Capacity()
		allow(t, lim, "k", c)
		for _, tt := range []struct {
			key     string
			n       int64
			elapsed time.Duration
			want    error
		}{
			{"", 1, 0, core.ErrEmptyKey},
			{"k", 0, 0, core.ErrInvalidCost},
			{"k", -1, 0, core.ErrInvalidCost},
			{"k", -1 << 63, 0, core.ErrInvalidCost},
			{"k", c + 1, 0, core.ErrCostTooHigh},
			{"k", 1, -time.Nanosecond, core.ErrInvalidElapsed},
			{"k", c, -time.Hour, core.ErrInvalidElapsed},
		} {
			err := lim.Refund(ctx, tt.key, tt.n, tt.elapsed)
			if !errors.Is(err, tt.want) {
				t.Errorf("Refund(%q, %d, %v): err = %v, want %v", tt.key, tt.n, tt.elapsed, err, tt.want)
			}
		}
		if d := peek(t, lim, "k", 1); d.Allowed {
			t.Fatalf("a refund that failed gave something back: %+v", d)
		}
	})
}

// Eight goroutines each take the key's one unit and give it back: never
// more than one holds it at once, and the key ends fresh.
func (s refundSuite) testRace(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 1, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		const racers, each = 8, 200
		var holding, allowed, worst atomic.Int64
		limitercheck.Race(racers, func(int) {
			for range each {
				d, err := lim.AllowN(ctx, "shared", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					continue
				}
				allowed.Add(1)
				if h := holding.Add(1); h > worst.Load() {
					worst.Store(h)
				}
				holding.Add(-1)
				if err := lim.Refund(ctx, "shared", 1, 0); err != nil {
					t.Error(err)
					return
				}
			}
		})
		if w := worst.Load(); w > p.Limit {
			t.Fatalf("%d held the key at once, want at most %d", w, p.Limit)
		}
		if allowed.Load() == 0 {
			t.Fatalf("no request allowed")
		}
		sameAs(t, lim, "shared", "never-seen", fmt.Sprintf("after %d takes given back", allowed.Load()))
	})
}

// A bucket whose clock steps back waits until the clock has caught up:
// stepping back never hands out a burst. A refund after the step gives back
// as it would have before it.
func (s refundSuite) testClockBack(t *testing.T) {
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			p := core.Policy{Algorithm: alg, Limit: 10, Window: time.Minute, Burst: 10}
			lim, clock := s.build(t, p)
			got := 0
			for range 20 {
				if allow(t, lim, "k", 1).Allowed {
					got++
				}
			}
			if got != 10 {
				t.Fatalf("%d of 20 allowed at once, want 10", got)
			}
			clock.Set(limitercheck.StartTime().Add(-5 * time.Minute))
			// The backlog reads 5 min + 60 s: one more unit (6 s) waits
			// until the clock is back at StartTime plus 6 s.
			if d := peek(t, lim, "k", 1); d.Allowed || d.RetryAfter != 5*time.Minute+6*time.Second {
				t.Fatalf("5 min back: %+v, want denied with RetryAfter 5m6s", d)
			}
			refund(t, lim, "k", 1, 0)
			if d := peek(t, lim, "k", 1); d.Allowed || d.RetryAfter != 5*time.Minute {
				t.Fatalf("5 min back, one unit given back: %+v, want denied with RetryAfter 5m", d)
			}
			for i := range 40 {
				if d := allow(t, lim, "k", 1); d.Allowed {
					t.Fatalf("request %d, %ds after the clock stepped back 5 min: allowed %+v", i+1, i, d)
				}
				clock.Advance(time.Second)
			}
			clock.Set(limitercheck.StartTime().Add(-us))
			if d := peek(t, lim, "k", 1); d.Allowed {
				t.Fatalf("1µs before the clock caught up: allowed %+v", d)
			}
			clock.Set(limitercheck.StartTime())
			if d := allow(t, lim, "k", 1); !d.Allowed {
				t.Fatalf("when the clock caught up: %+v, want allowed", d)
			}
		})
	}
}
