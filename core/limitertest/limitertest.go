// Package limitertest is the conformance suite for [core.Limiter]
// implementations. Every store (the in-memory one, Redis) runs it with
// [Run] and so proves the same decisions for the same policy, traffic and
// clock: the exact semantics of each algorithm, exact RetryAfter, no lost
// progress, all-or-nothing costs, Peek and Reset, errors for bad input, and
// atomicity under concurrency. A store's own test gives Run a [NewLimiter]:
//
//	func TestConformance(t *testing.T) {
//		limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
//			l, err := core.New(p, core.WithClock(clock))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return l
//		})
//	}
//
// A store that gives units back ([core.Refunder]) runs [RunRefund] too, and
// a layered one ([core.MultiKeyLimiter]) [RunLayered] with a
// [NewLayeredFunc].
//
// The suite drives time with a [core.ManualClock]; it never sleeps. Time
// resolution is one microsecond, the resolution of Redis's TIME: every store
// rounds the clock down to whole microseconds, and the suite checks exactness
// (RetryAfter, boundaries) to the microsecond.
package limitertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// NewLimiter builds the limiter under test for policy p, reading time from
// clock, which starts at 2026-01-01 00:00 UTC (a whole day, so that fixed
// windows of a second, a minute, an hour or a day all begin there). It is
// called once per subtest; it may register cleanup with t and
// should fail t (t.Fatal) if it cannot build the limiter.
type NewLimiter func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter

// Run runs the conformance suite against the limiters newLimiter builds.
func Run(t *testing.T, newLimiter NewLimiter) {
	s := suite{newLimiter: newLimiter}
	t.Run("Steps", s.testSteps)
	t.Run("FixedWindowBoundary", s.testFixedWindowBoundary)
	t.Run("SlidingLogExpiry", s.testSlidingLogExpiry)
	t.Run("SlidingWindowEstimate", s.testSlidingWindowEstimate)
	t.Run("TokenBucketIdle", s.testTokenBucketIdle)
	t.Run("LeakyBucketQueue", s.testLeakyBucketQueue)
	t.Run("NoLostProgress", s.testNoLostProgress)
	t.Run("RetryAfterExact", s.testRetryAfterExact)
	t.Run("RetryingClient", s.testRetryingClient)
	t.Run("PeekCountsNothing", s.testPeekCountsNothing)
	t.Run("PeekState", s.testPeekState)
	t.Run("PeekPeers", s.testPeekPeers)
	t.Run("Reset", s.testReset)
	t.Run("Cost", s.testCost)
	t.Run("BadInput", s.testBadInput)
	t.Run("ClockBackwards", s.testClockBackwards)
	t.Run("Extremes", s.testExtremes)
	t.Run("NewKeyRace", s.testNewKeyRace)
	t.Run("ExactlyLimit", s.testExactlyLimit)
}

type suite struct {
	newLimiter NewLimiter
}

var ctx = context.Background()

// build returns a limiter for p on a manual clock at StartTime.
func (s suite) build(t *testing.T, p core.Policy) (core.Limiter, *core.ManualClock) {
	t.Helper()
	clock := core.NewManualClock(limitercheck.StartTime())
	return s.newLimiter(t, p, clock), clock
}

// step is one request of a step table: at a time since StartTime, n units, and
// the Decision fields wanted.
type step struct {
	at         time.Duration
	n          int64
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
	delay      time.Duration
}

func run(t *testing.T, lim core.Limiter, clock *core.ManualClock, key string, steps []step) {
	t.Helper()
	for i, st := range steps {
		clock.Set(limitercheck.StartTime().Add(st.at))
		d, err := lim.AllowN(ctx, key, st.n)
		if err != nil {
			t.Fatalf("step %d (at %v, n=%d): AllowN: %v", i, st.at, st.n, err)
		}
		got := step{st.at, st.n, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay}
		if got != st {
			t.Errorf("step %d (at %v, n=%d):\n got allowed=%v remaining=%d retryAfter=%v resetAfter=%v delay=%v\nwant allowed=%v remaining=%d retryAfter=%v resetAfter=%v delay=%v",
				i, st.at, st.n, got.allowed, got.remaining, got.retryAfter, got.resetAfter, got.delay,
				st.allowed, st.remaining, st.retryAfter, st.resetAfter, st.delay)
		}
		if d.Limit != d.Policy.Limit {
			t.Errorf("step %d: Decision.Limit = %d, want the policy's %d", i, d.Limit, d.Policy.Limit)
		}
	}
}

const (
	ms = time.Millisecond
	us = time.Microsecond
)

func (s suite) testSteps(t *testing.T) {
	tests := []struct {
		name   string
		policy core.Policy
		steps  []step
	}{
		{"token-bucket", core.Policy{Limit: 10, Window: time.Second}, []step{
			{at: 0, n: 10, allowed: true, remaining: 0, resetAfter: time.Second},
			{at: 0, n: 1, remaining: 0, retryAfter: 100 * ms, resetAfter: time.Second},
			{at: 50 * ms, n: 1, remaining: 0, retryAfter: 50 * ms, resetAfter: 950 * ms},
			{at: 100 * ms, n: 1, allowed: true, remaining: 0, resetAfter: time.Second},
			{at: 350 * ms, n: 3, remaining: 2, retryAfter: 50 * ms, resetAfter: 750 * ms},
			{at: 400 * ms, n: 3, allowed: true, remaining: 0, resetAfter: time.Second},
			{at: 2400 * ms, n: 1, allowed: true, remaining: 9, resetAfter: 100 * ms},
		}},
		{"token-bucket burst", core.Policy{Limit: 1, Window: time.Second, Burst: 5}, []step{
			{at: 0, n: 5, allowed: true, remaining: 0, resetAfter: 5 * time.Second},
			{at: 0, n: 1, remaining: 0, retryAfter: time.Second, resetAfter: 5 * time.Second},
			{at: 2500 * ms, n: 3, remaining: 2, retryAfter: 500 * ms, resetAfter: 2500 * ms},
			{at: 3 * time.Second, n: 3, allowed: true, remaining: 0, resetAfter: 5 * time.Second},
		}},
		{"fixed-window", core.Policy{Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute}, []step{
			{at: 0, n: 2, allowed: true, remaining: 1, resetAfter: time.Minute},
			{at: 10 * time.Second, n: 2, remaining: 1, retryAfter: 50 * time.Second, resetAfter: 50 * time.Second},
			{at: 10 * time.Second, n: 1, allowed: true, remaining: 0, resetAfter: 50 * time.Second},
			{at: time.Minute - us, n: 1, remaining: 0, retryAfter: us, resetAfter: us},
			{at: time.Minute, n: 3, allowed: true, remaining: 0, resetAfter: time.Minute},
			{at: 150 * time.Second, n: 1, allowed: true, remaining: 2, resetAfter: 30 * time.Second},
		}},
		{"sliding-log", core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: time.Minute}, []step{
			{at: 0, n: 1, allowed: true, remaining: 2, resetAfter: time.Minute},
			{at: 10 * time.Second, n: 2, allowed: true, remaining: 0, resetAfter: time.Minute},
			{at: 20 * time.Second, n: 1, remaining: 0, retryAfter: 40 * time.Second, resetAfter: 50 * time.Second},
			{at: 20 * time.Second, n: 3, remaining: 0, retryAfter: 50 * time.Second, resetAfter: 50 * time.Second},
			{at: time.Minute, n: 1, allowed: true, remaining: 0, resetAfter: time.Minute},
			{at: 70*time.Second - us, n: 1, remaining: 0, retryAfter: us, resetAfter: 50*time.Second + us},
			{at: 70 * time.Second, n: 2, allowed: true, remaining: 0, resetAfter: time.Minute},
		}},
		{"sliding-window", core.Policy{Algorithm: core.SlidingWindow, Limit: 100, Window: time.Minute}, []step{
			{at: 10 * time.Second, n: 80, allowed: true, remaining: 20, resetAfter: 110 * time.Second},
			// 15 s into the next minute the previous 80 weigh 80·45/60 = 60.
			{at: 75 * time.Second, n: 30, allowed: true, remaining: 10, resetAfter: 105 * time.Second},
			{at: 75 * time.Second, n: 1, allowed: true, remaining: 9, resetAfter: 105 * time.Second},
			// 10 more fit once 80·(60-e)/60 <= 59: at e = 15.75 s.
			{at: 75 * time.Second, n: 10, remaining: 9, retryAfter: 750 * ms, resetAfter: 105 * time.Second},
			{at: 75750*ms - us, n: 10, remaining: 9, retryAfter: us, resetAfter: 104250*ms + us},
			{at: 75750 * ms, n: 10, allowed: true, remaining: 0, resetAfter: 104250 * ms},
			// The current 41 become the previous window at 120 s; at 120 s
			// they weigh fully, so 59 more fit and 61 wait until
			// 41·(60-e)/60 <= 39: e = 60 s - floor(39·60 s/41), in µs.
			{at: 120 * time.Second, n: 61, remaining: 59, retryAfter: 60*time.Second - 57073170*us, resetAfter: time.Minute},
			{at: 180 * time.Second, n: 1, allowed: true, remaining: 99, resetAfter: 2 * time.Minute},
		}},
		{"leaky-bucket", core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3}, []step{
			{at: 0, n: 1, allowed: true, remaining: 2, resetAfter: 100 * ms},
			{at: 0, n: 1, allowed: true, remaining: 1, resetAfter: 200 * ms, delay: 100 * ms},
			{at: 0, n: 1, allowed: true, remaining: 0, resetAfter: 300 * ms, delay: 200 * ms},
			{at: 0, n: 1, remaining: 0, retryAfter: 100 * ms, resetAfter: 300 * ms},
			{at: 50 * ms, n: 2, remaining: 0, retryAfter: 150 * ms, resetAfter: 250 * ms},
			{at: 100 * ms, n: 1, allowed: true, remaining: 0, resetAfter: 300 * ms, delay: 200 * ms},
			{at: time.Second, n: 2, allowed: true, remaining: 1, resetAfter: 200 * ms, delay: 100 * ms},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, clock := s.build(t, tt.policy)
			run(t, lim, clock, "steps", tt.steps)
		})
	}
}

// A fixed window allows up to 2·Limit in a short span across a boundary:
// Limit at the end of one window and Limit at the start of the next. That is
// the algorithm's nature, checked here so it stays documented behaviour.
func (s suite) testFixedWindowBoundary(t *testing.T) {
	lim, clock := s.build(t, core.Policy{Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute})
	clock.Set(limitercheck.StartTime().Add(59900 * ms))
	for i := range 100 {
		if d := allow(t, lim, "b", 1); !d.Allowed {
			t.Fatalf("request %d at :59.9 denied, want allowed", i+1)
		}
	}
	if d := allow(t, lim, "b", 1); d.Allowed || d.RetryAfter != 100*ms {
		t.Fatalf("request 101 at :59.9: allowed=%v retryAfter=%v, want denied and 100ms", d.Allowed, d.RetryAfter)
	}
	clock.Set(limitercheck.StartTime().Add(60100 * ms))
	for i := range 100 {
		if d := allow(t, lim, "b", 1); !d.Allowed {
			t.Fatalf("request %d at :00.1 denied, want allowed", i+1)
		}
	}
}

// A request allowed at s counts while now - W < s and leaves exactly at s+W.
func (s suite) testSlidingLogExpiry(t *testing.T) {
	lim, clock := s.build(t, core.Policy{Algorithm: core.SlidingLog, Limit: 2, Window: time.Minute})
	clock.Set(limitercheck.StartTime().Add(7 * time.Second))
	allow(t, lim, "l", 1)
	clock.Advance(13 * time.Second)
	allow(t, lim, "l", 1)
	clock.Set(limitercheck.StartTime().Add(67*time.Second - us))
	if d := allow(t, lim, "l", 1); d.Allowed || d.RetryAfter != us {
		t.Fatalf("at s+W-1µs: allowed=%v retryAfter=%v, want denied and 1µs", d.Allowed, d.RetryAfter)
	}
	clock.Set(limitercheck.StartTime().Add(67 * time.Second))
	if d := allow(t, lim, "l", 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("at s+W: allowed=%v remaining=%d, want allowed with 0 left", d.Allowed, d.Remaining)
	}
	if d := allow(t, lim, "l", 1); d.Allowed || d.RetryAfter != 13*time.Second {
		t.Fatalf("after: allowed=%v retryAfter=%v, want denied and 13s", d.Allowed, d.RetryAfter)
	}
}

// Previous minute 80, current 30, 15 s into it, limit 100: the estimate is
// 80·45/60 + 30 = 90, so the next request is allowed.
func (s suite) testSlidingWindowEstimate(t *testing.T) {
	lim, clock := s.build(t, core.Policy{Algorithm: core.SlidingWindow, Limit: 100, Window: time.Minute})
	clock.Set(limitercheck.StartTime().Add(30 * time.Second))
	allow(t, lim, "w", 80)
	clock.Set(limitercheck.StartTime().Add(61 * time.Second))
	// At 61 s the estimate is 80·59/60 ≈ 78.7; 30 would not fit yet.
	if d := peek(t, lim, "w", 30); d.Allowed {
		t.Fatalf("30 at 61s allowed, want denied (estimate 108.7)")
	}
	clock.Set(limitercheck.StartTime().Add(75 * time.Second))
	allow(t, lim, "w", 30)
	d := allow(t, lim, "w", 1)
	if !d.Allowed || d.Remaining != 9 {
		t.Fatalf("next request: allowed=%v remaining=%d, want allowed with 9 left", d.Allowed, d.Remaining)
	}
}

// An hour of silence buys exactly Burst, not thousands.
func (s suite) testTokenBucketIdle(t *testing.T) {
	for _, p := range []core.Policy{
		{Limit: 100, Window: time.Minute},
		{Limit: 100, Window: time.Minute, Burst: 5},
		{Limit: 3, Window: time.Second, Burst: 7},
	} {
		t.Run(p.String(), func(t *testing.T) {
			lim, clock := s.build(t, p)
			allow(t, lim, "idle", p.Capacity())
			clock.Advance(time.Hour)
			d := allow(t, lim, "idle", p.Capacity())
			if !d.Allowed || d.Remaining != 0 {
				t.Fatalf("Burst after an hour: allowed=%v remaining=%d, want allowed with 0 left", d.Allowed, d.Remaining)
			}
			if d := allow(t, lim, "idle", 1); d.Allowed {
				t.Fatalf("Burst+1 after an hour allowed, want denied")
			}
		})
	}
}

// The k-th of simultaneous requests waits (k-1)·W/L; the queue holds Burst
// of them and the one past it is denied.
func (s suite) testLeakyBucketQueue(t *testing.T) {
	p := core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: time.Second, Burst: 5}
	lim, _ := s.build(t, p)
	for k := int64(1); k <= p.Burst; k++ {
		d := allow(t, lim, "q", 1)
		if want := time.Duration(k-1) * 100 * ms; !d.Allowed || d.Delay != want {
			t.Fatalf("request %d: allowed=%v delay=%v, want allowed with delay %v", k, d.Allowed, d.Delay, want)
		}
	}
	if d := allow(t, lim, "q", 1); d.Allowed || d.RetryAfter != 100*ms {
		t.Fatalf("request %d: allowed=%v retryAfter=%v, want denied and 100ms", p.Burst+1, d.Allowed, d.RetryAfter)
	}
}

// L requests spaced exactly W/L apart are all allowed, round after round:
// no rounding drift, even where W/L is not a whole number of microseconds.
// The sliding window counter is left out: its estimate weighs the previous
// window as if spread evenly, so traffic at exactly the limit can exceed it
// by one — the estimate's known error, bounded by the Fuzz invariant instead.
func (s suite) testNoLostProgress(t *testing.T) {
	cases := []struct {
		limit  int64
		window time.Duration
		rounds int64
	}{
		{3, time.Second, 10000},
		{7, time.Second, 1000},
		{100, time.Minute, 200},
	}
	for _, a := range core.Algorithms() {
		if a == core.SlidingWindow {
			continue
		}
		for _, c := range cases {
			p := core.Policy{Algorithm: a, Limit: c.limit, Window: c.window}
			t.Run(p.String(), func(t *testing.T) {
				lim, clock := s.build(t, p)
				total := c.limit * c.rounds
				for i := range total {
					// ceil(i·W/L): the exact spacing, rounded up to the
					// microsecond, so no request comes early.
					w := int64(c.window / us)
					clock.Set(limitercheck.StartTime().Add(time.Duration((i*w+c.limit-1)/c.limit) * us))
					d, err := lim.AllowN(ctx, "steady", 1)
					if err != nil {
						t.Fatal(err)
					}
					// A leaky bucket serves each request at its slot; when
					// W/L is no whole number of microseconds a request on
					// the microsecond grid can be up to 1µs early for it.
					maxDelay := time.Duration(0)
					if int64(c.window/us)%c.limit != 0 {
						maxDelay = us
					}
					if !d.Allowed || d.Delay > maxDelay {
						t.Fatalf("request %d of %d: allowed=%v delay=%v retryAfter=%v, want allowed at once", i+1, total, d.Allowed, d.Delay, d.RetryAfter)
					}
				}
			})
		}
	}
}

// policies used by the randomized tests: whole and fractional emission
// intervals, bursts, long windows.
var randomPolicies = []core.Policy{
	{Limit: 3, Window: time.Second},
	{Limit: 7, Window: time.Second, Burst: 11},
	{Limit: 100, Window: time.Minute},
	{Limit: 5, Window: 15 * time.Minute, Burst: 2},
	{Limit: 97, Window: time.Minute},
}

// When a request is denied with RetryAfter r, the same request is allowed at
// now+r and still denied at now+r-1µs, also after the clock went back (one
// step in 25 goes back up to two windows). Before every AllowN, Peek
// predicts it, and after it reports the state AllowN left.
func (s suite) testRetryAfterExact(t *testing.T) {
	for _, base := range randomPolicies {
		limitercheck.ForEachAlgorithm(t, base, func(t *testing.T, p core.Policy) {
			lim, clock := s.build(t, p)
			rng := rand.New(rand.NewPCG(uint64(p.Limit), uint64(p.Window)))
			step := int64(p.Window/us) / p.Limit
			denials := 0
			for i := 0; i < 1000; i++ {
				clock.Advance(time.Duration(rng.Int64N(3*step/2+1)) * us)
				if rng.IntN(25) == 0 {
					clock.Advance(-time.Duration(rng.Int64N(2*int64(p.Window/us)+1)) * us)
				}
				n := 1 + rng.Int64N(min(p.Capacity(), 4))
				pd := peek(t, lim, "r", n)
				d := allow(t, lim, "r", n)
				if !peekPredicts(pd, d, n) {
					t.Fatalf("request %d: Peek said %+v, AllowN decided %+v", i, pd, d)
				}
				checkSane(t, p, pd)
				checkSane(t, p, d)
				if a := peek(t, lim, "r", 1); a.Remaining != d.Remaining || a.ResetAfter != d.ResetAfter {
					t.Fatalf("request %d: AllowN decided %+v, then Peek said %+v", i, d, a)
				}
				if d.Allowed {
					continue
				}
				denials++
				if d.RetryAfter <= 0 {
					t.Fatalf("request %d: denied with RetryAfter %v, want > 0", i, d.RetryAfter)
				}
				clock.Advance(d.RetryAfter - us)
				if e := peek(t, lim, "r", n); e.Allowed {
					t.Fatalf("request %d (n=%d): allowed 1µs before RetryAfter %v", i, n, d.RetryAfter)
				}
				clock.Advance(us)
				if e := allow(t, lim, "r", n); !e.Allowed {
					t.Fatalf("request %d (n=%d): denied at RetryAfter %v (now says %v)", i, n, d.RetryAfter, e.RetryAfter)
				}
			}
			if denials < 20 {
				t.Fatalf("only %d denials in the random traffic; the test needs more", denials)
			}
		})
	}
}

// checkSane checks the bounds every Decision keeps.
func checkSane(t *testing.T, p core.Policy, d core.Decision) {
	t.Helper()
	if d.Remaining < 0 || d.Remaining > p.Capacity() {
		t.Fatalf("Remaining %d outside [0, %d]: %+v", d.Remaining, p.Capacity(), d)
	}
	if d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0 {
		t.Fatalf("negative duration: %+v", d)
	}
	if d.Allowed != (d.RetryAfter == 0) {
		t.Fatalf("Allowed=%v with RetryAfter %v", d.Allowed, d.RetryAfter)
	}
	if d.Delay != 0 && (p.Algorithm != core.LeakyBucket || !d.Allowed) {
		t.Fatalf("Delay %v on %v (allowed=%v)", d.Delay, p.Algorithm, d.Allowed)
	}
	if d.Policy != p || d.Limit != p.Limit {
		t.Fatalf("Decision.Policy %v, Limit %d; want %v", d.Policy, d.Limit, p)
	}
}

// A client retrying every 100 ms while denied is not locked out: a denial
// counts nothing, so it gets in at the first retry at or after the moment
// the algorithm frees room.
func (s suite) testRetryingClient(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 10, Window: time.Minute, Burst: 10}, func(t *testing.T, p core.Policy) {
		lim, clock := s.build(t, p)
		clock.Set(limitercheck.StartTime().Add(15 * time.Second))
		var first core.Decision
		for {
			first = allow(t, lim, "retry", 1)
			if !first.Allowed {
				break
			}
		}
		free := clock.Now().Add(first.RetryAfter)
		for i := 1; ; i++ {
			clock.Advance(100 * ms)
			d := allow(t, lim, "retry", 1)
			now := clock.Now()
			if d.Allowed != !now.Before(free) {
				t.Fatalf("retry %d at +%v: allowed=%v, want allowed from +%v on", i, now.Sub(limitercheck.StartTime()), d.Allowed, free.Sub(limitercheck.StartTime()))
			}
			if d.Allowed {
				break
			}
			if got, want := d.RetryAfter, free.Sub(now); got != want {
				t.Fatalf("retry %d: RetryAfter %v, want %v (retries must not push it back)", i, got, want)
			}
		}
	})
}

func (s suite) testPeekCountsNothing(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 5, Window: time.Minute}, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		for range 20 {
			if d := peek(t, lim, "p", 1); !d.Allowed || d.Remaining != p.Capacity() || d.ResetAfter != 0 {
				t.Fatalf("Peek on a new key: %+v, want allowed with %d left", d, p.Capacity())
			}
		}
		for i := range p.Capacity() {
			if d := allow(t, lim, "p", 1); !d.Allowed {
				t.Fatalf("request %d after Peeks denied", i+1)
			}
		}
		before := peek(t, lim, "p", 1)
		for range 5 {
			if d := peek(t, lim, "p", 1); d != before {
				t.Fatalf("Peek changed its answer: %+v then %+v", before, d)
			}
		}
		if before.Allowed {
			t.Fatalf("Peek on an exhausted key says allowed")
		}
	})
}

func (s suite) testReset(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 4, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		allow(t, lim, "gone", p.Capacity())
		allow(t, lim, "kept", p.Capacity())
		if d := allow(t, lim, "gone", 1); d.Allowed {
			t.Fatalf("exhausted key allowed")
		}
		if err := lim.Reset(ctx, "gone"); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		if d := allow(t, lim, "gone", 1); !d.Allowed || d.Remaining != p.Capacity()-1 {
			t.Fatalf("after Reset: %+v, want allowed with %d left", d, p.Capacity()-1)
		}
		if d := allow(t, lim, "kept", 1); d.Allowed {
			t.Fatalf("Reset of one key freed another")
		}
		if err := lim.Reset(ctx, "never-seen"); err != nil {
			t.Fatalf("Reset of an unknown key: %v", err)
		}
	})
}

func (s suite) testCost(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 10, Window: time.Minute}, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		max := p.Capacity()
		if d := allow(t, lim, "c", 4); !d.Allowed || d.Remaining != max-4 {
			t.Fatalf("cost 4: %+v, want allowed with %d left", d, max-4)
		}
		if d := allow(t, lim, "c", max-3); d.Allowed || d.Remaining != max-4 {
			t.Fatalf("cost %d with %d left: %+v, want denied, nothing counted", max-3, max-4, d)
		}
		if d := allow(t, lim, "c", max-4); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("cost %d with %d left: %+v, want allowed with 0 left", max-4, max-4, d)
		}
		_, err := lim.AllowN(ctx, "fresh", max+1)
		if !errors.Is(err, core.ErrCostTooHigh) {
			t.Fatalf("cost %d above the most ever allowed (%d): err = %v, want ErrCostTooHigh", max+1, max, err)
		}
		if _, err := lim.Peek(ctx, "fresh", max+1); !errors.Is(err, core.ErrCostTooHigh) {
			t.Fatalf("Peek cost %d: err = %v, want ErrCostTooHigh", max+1, err)
		}
		if d := allow(t, lim, "fresh", max); !d.Allowed {
			t.Fatalf("the rejected cost counted something: %+v", d)
		}
	})
}

func (s suite) testBadInput(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 10, Window: time.Minute}, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		for _, n := range []int64{0, -1, -1 << 63} {
			if _, err := lim.AllowN(ctx, "k", n); !errors.Is(err, core.ErrInvalidCost) {
				t.Errorf("AllowN cost %d: err = %v, want ErrInvalidCost", n, err)
			}
			if _, err := lim.Peek(ctx, "k", n); !errors.Is(err, core.ErrInvalidCost) {
				t.Errorf("Peek cost %d: err = %v, want ErrInvalidCost", n, err)
			}
		}
		if _, err := lim.AllowN(ctx, "", 1); !errors.Is(err, core.ErrEmptyKey) {
			t.Errorf("AllowN empty key: err = %v, want ErrEmptyKey", err)
		}
		if _, err := lim.Peek(ctx, "", 1); !errors.Is(err, core.ErrEmptyKey) {
			t.Errorf("Peek empty key: err = %v, want ErrEmptyKey", err)
		}
		if err := lim.Reset(ctx, ""); !errors.Is(err, core.ErrEmptyKey) {
			t.Errorf("Reset empty key: err = %v, want ErrEmptyKey", err)
		}
		// Keys are opaque: any bytes, any length.
		for _, key := range []string{"\x00", "{tag}", "a:b", string(make([]byte, 4096)), "ключ"} {
			if d := allow(t, lim, key, 1); !d.Allowed {
				t.Errorf("first request for key %q denied", key[:min(len(key), 8)])
			}
		}
	})
}

// A clock that goes backwards must not panic or produce negative durations.
func (s suite) testClockBackwards(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 5, Window: time.Second, Burst: 5}, func(t *testing.T, p core.Policy) {
		lim, clock := s.build(t, p)
		clock.Set(limitercheck.StartTime().Add(time.Hour))
		for _, jump := range []time.Duration{0, -300 * ms, -time.Second, -time.Hour, 10 * time.Millisecond, -24 * time.Hour, 48 * time.Hour} {
			clock.Advance(jump)
			for range 7 {
				pd := peek(t, lim, "back", 1)
				checkSane(t, p, pd)
				checkSane(t, p, allow(t, lim, "back", 1))
			}
		}
	})
}

// The largest policies: Limit 1e9 over 30 days and a year, and a prime
// limit whose emission interval is no whole number of microseconds.
func (s suite) testExtremes(t *testing.T) {
	for _, base := range []core.Policy{
		{Limit: core.MaxLimit, Window: 30 * 24 * time.Hour},
		{Limit: 999_999_937, Window: 30 * 24 * time.Hour},
		{Limit: core.MaxLimit, Window: core.MaxWindow, Burst: core.MaxLimit},
		{Limit: 1, Window: core.MaxWindow},
	} {
		limitercheck.ForEachAlgorithm(t, base, func(t *testing.T, p core.Policy) {
			lim, clock := s.build(t, p)
			max := p.Capacity()
			d := allow(t, lim, "x", max)
			checkSane(t, p, d)
			if !d.Allowed || d.Remaining != 0 {
				t.Fatalf("cost %d on a new key: %+v, want allowed with 0 left", max, d)
			}
			d = allow(t, lim, "x", 1)
			checkSane(t, p, d)
			if d.Allowed || d.RetryAfter > 2*p.Window {
				t.Fatalf("one more: %+v, want denied within two windows", d)
			}
			clock.Advance(d.RetryAfter - us)
			if e := peek(t, lim, "x", 1); e.Allowed {
				t.Fatalf("allowed 1µs before RetryAfter %v", d.RetryAfter)
			}
			clock.Advance(us)
			if e := allow(t, lim, "x", 1); !e.Allowed {
				t.Fatalf("denied at RetryAfter %v: %+v", d.RetryAfter, e)
			}
		})
	}
}

// Eight goroutines released together on a brand-new key with Limit 1:
// exactly one is allowed, every round. The key's state is created once.
func (s suite) testNewKeyRace(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 1, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		const rounds, racers = 1000, 8
		for r := range rounds {
			key := fmt.Sprintf("new-%d", r)
			got := limitercheck.CountAllowed(t, racers, 1, func(int) (core.Decision, error) { return lim.AllowN(ctx, key, 1) })
			if got != 1 {
				t.Fatalf("round %d: %d of %d allowed, want exactly 1", r, got, racers)
			}
		}
	})
}

// 100 goroutines × 10 requests against Limit 100: exactly 100 allowed.
func (s suite) testExactlyLimit(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 100, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		got := limitercheck.CountAllowed(t, 100, 10, func(int) (core.Decision, error) { return lim.AllowN(ctx, "shared", 1) })
		if got != 100 {
			t.Fatalf("%d of 1000 allowed, want exactly 100", got)
		}
	})
}

func allow(t *testing.T, lim core.Limiter, key string, n int64) core.Decision {
	t.Helper()
	d, err := lim.AllowN(ctx, key, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", key, n, err)
	}
	return d
}

func peek(t *testing.T, lim core.Limiter, key string, n int64) core.Decision {
	t.Helper()
	d, err := lim.Peek(ctx, key, n)
	if err != nil {
		t.Fatalf("Peek(%q, %d): %v", key, n, err)
	}
	return d
}
