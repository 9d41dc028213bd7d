package limitertest

import (
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// peekPredicts reports whether pd, what Peek(key, n) reported, agrees with
// d, what AllowN(key, n) then decided on the same state at the same time.
// A denial counts nothing, so both describe the state as it is and are
// equal. An allowed AllowN describes the state after counting n units, a
// Peek the state before: the same decision, with n units more Remaining
// and a ResetAfter no later.
func peekPredicts(pd, d core.Decision, n int64) bool {
	if !d.Allowed {
		return pd == d
	}
	want := d
	want.Remaining += n
	want.ResetAfter = pd.ResetAfter
	return pd == want && pd.ResetAfter <= d.ResetAfter
}

// peekPredictsLayered is peekPredicts for layered decisions: the same
// layer decides, and every layer's Decision agrees (a denied request
// counted nothing in any layer, so each is as Peek reports it).
func peekPredictsLayered(pd, d core.LayeredDecision, n int64) bool {
	if pd.Layer != d.Layer || len(pd.Layers) != len(d.Layers) || !peekPredicts(pd.Decision, d.Decision, n) {
		return false
	}
	for i := range d.Layers {
		if d.Allowed && !peekPredicts(pd.Layers[i], d.Layers[i], n) || !d.Allowed && pd.Layers[i] != d.Layers[i] {
			return false
		}
	}
	return true
}

// A Peek reports the key's state as it is, counting nothing: Remaining and
// ResetAfter before the request, Allowed whether it would pass, and, when
// it would not, the exact RetryAfter. After an allowed AllowN a Peek
// reports what AllowN did.
func (s suite) testPeekState(t *testing.T) {
	// 3 a minute: a unit refills in 20 s. Every request comes 10 s into
	// a fixed window, so the window ends 50 s later.
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 3, Window: time.Minute}, func(t *testing.T, p core.Policy) {
		lim, clock := s.build(t, p)
		clock.Set(limitercheck.StartTime().Add(10 * time.Second))
		// resetAfter is the ResetAfter of a key that took k units at once
		// and was left alone for idle since.
		resetAfter := func(k int64, idle time.Duration) time.Duration {
			if k == 0 {
				return 0
			}
			switch p.Algorithm {
			case core.FixedWindow:
				return 50*time.Second - idle
			case core.SlidingWindow:
				return 110*time.Second - idle // both counters gone
			case core.SlidingLog:
				return time.Minute - idle
			}
			return max(time.Duration(k)*20*time.Second-idle, 0) // the buckets
		}
		for k := int64(0); k <= 3; k++ {
			d := peek(t, lim, "k", 1)
			want := core.Decision{Allowed: k < 3, Limit: 3, Remaining: 3 - k, ResetAfter: resetAfter(k, 0), Policy: p}
			switch {
			case k == 3 && p.Algorithm.Burstable():
				want.RetryAfter = 20 * time.Second
			case k == 3 && p.Algorithm == core.FixedWindow:
				want.RetryAfter = 50 * time.Second // the window's end
			case k == 3 && p.Algorithm == core.SlidingWindow:
				// 20 s into the next window, where the 3 weigh 2.
				want.RetryAfter = 70 * time.Second
			case k == 3:
				want.RetryAfter = time.Minute // the log's entries leave
			case p.Algorithm == core.LeakyBucket:
				want.Delay = resetAfter(k, 0) // the queue ahead of it
			}
			if d != want {
				t.Fatalf("Peek after %d allowed:\n got %+v\nwant %+v", k, d, want)
			}
			if k == 3 {
				break
			}
			a := allow(t, lim, "k", 1)
			if !peekPredicts(d, a, 1) {
				t.Fatalf("Peek %+v, then AllowN %+v", d, a)
			}
			if e := peek(t, lim, "k", 1); e.Remaining != a.Remaining || e.ResetAfter != a.ResetAfter {
				t.Fatalf("Peek after AllowN %+v: %+v, want its Remaining and ResetAfter", a, e)
			}
		}
		// 15 s on, nothing counted: time alone moves the state, and the
		// wait shrinks by as much.
		d := peek(t, lim, "k", 1)
		clock.Advance(15 * time.Second)
		e := peek(t, lim, "k", 1)
		if e.Allowed || e.Remaining != 0 || e.ResetAfter != resetAfter(3, 15*time.Second) || e.RetryAfter != d.RetryAfter-15*time.Second {
			t.Fatalf("Peek 15s after %+v: %+v, want ResetAfter %v", d, e, resetAfter(3, 15*time.Second))
		}
		// RetryAfter is exact: denied 1 µs before, allowed at it.
		clock.Advance(e.RetryAfter - us)
		if f := peek(t, lim, "k", 1); f.Allowed || f.RetryAfter != us {
			t.Fatalf("Peek 1µs before RetryAfter %v: %+v", e.RetryAfter, f)
		}
		clock.Advance(us)
		if f := peek(t, lim, "k", 1); !f.Allowed || f.RetryAfter != 0 || f.Remaining < 1 {
			t.Fatalf("Peek at RetryAfter %v: %+v", e.RetryAfter, f)
		}
	})
}

// The Peek cases of three other Go rate limiters, as facts of ratekit's
// API: each reports the state as it is, with nothing counted.
func (s suite) testPeekPeers(t *testing.T) {
	// ulule/limiter's store tests: 3 a minute, Peek before and after each
	// request, then Reset. Its Peek's Reached says the limit was passed;
	// Allowed says whether one more unit would pass, so at exactly the
	// limit Reached is false and Allowed false too.
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 3, Window: time.Minute}, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		for i := int64(1); i <= 6; i++ {
			if i <= 3 {
				if d := peek(t, lim, "foo", 1); d.Remaining != 3-(i-1) || !d.Allowed {
					t.Errorf("Peek before request %d: %+v, want %d left", i, d, 3-(i-1))
				}
			}
			d := allow(t, lim, "foo", 1)
			if d.Allowed != (i <= 3) || d.Remaining != max(3-i, 0) {
				t.Fatalf("request %d: %+v", i, d)
			}
			if i <= 3 {
				if d := peek(t, lim, "foo", 1); d.Remaining != 3-i || d.Allowed != (i < 3) {
					t.Errorf("Peek after request %d: %+v, want %d left", i, d, 3-i)
				}
			}
		}
		if d := peek(t, lim, "foo", 1); d.Remaining != 0 || d.Allowed {
			t.Errorf("Peek at the limit: %+v", d)
		}
		if err := lim.Reset(ctx, "foo"); err != nil {
			t.Fatal(err)
		}
		if d := peek(t, lim, "foo", 1); d.Remaining != 3 || !d.Allowed || d.ResetAfter != 0 {
			t.Errorf("Peek after Reset: %+v, want 3 left and nothing to reset", d)
		}
	})

	// sethvargo/go-limiter's memorystore test: 5 tokens per 3 s; after one
	// Take, Get reports 4 left.
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 5, Window: 3 * time.Second}, func(t *testing.T, p core.Policy) {
		lim, _ := s.build(t, p)
		if d := allow(t, lim, "key", 1); d.Remaining != 4 {
			t.Fatalf("Take: %+v, want 4 left", d)
		}
		if d := peek(t, lim, "key", 1); d.Remaining != 4 || !d.Allowed {
			t.Errorf("Get after one Take: %+v, want 4 left", d)
		}
	})

	// throttled's TestRateLimit: a GCRA of 1 per second with a burst of
	// 5 (its MaxBurst 4 plus the request itself), steps in order; its
	// quantity-0 request, step 12, is a Peek. Its costs above the burst,
	// denied there, are ErrCostTooHigh here (BadInput checks that).
	p := core.Policy{Limit: 1, Window: time.Second, Burst: 5}
	lim, clock := s.build(t, p)
	msec := func(n int) time.Duration { return time.Duration(n) * ms }
	steps := []struct {
		at           time.Duration
		n            int64
		peek         bool
		remaining    int64
		reset, retry time.Duration
		limited      bool
	}{
		1:  {at: 0, n: 1, remaining: 4, reset: time.Second},
		2:  {at: 0, n: 1, remaining: 3, reset: 2 * time.Second},
		3:  {at: 0, n: 1, remaining: 2, reset: 3 * time.Second},
		4:  {at: 0, n: 1, remaining: 1, reset: 4 * time.Second},
		5:  {at: 0, n: 1, remaining: 0, reset: 5 * time.Second},
		6:  {at: 0, n: 1, remaining: 0, reset: 5 * time.Second, retry: time.Second, limited: true},
		7:  {at: msec(3000), n: 1, remaining: 2, reset: msec(3000)},
		8:  {at: msec(3100), n: 1, remaining: 1, reset: msec(3900)},
		9:  {at: msec(4000), n: 1, remaining: 1, reset: msec(4000)},
		10: {at: msec(8000), n: 1, remaining: 4, reset: msec(1000)},
		11: {at: msec(9500), n: 1, remaining: 4, reset: msec(1000)},
		12: {at: msec(9500), n: 1, peek: true, remaining: 4, reset: time.Second},
		13: {at: msec(9500), n: 2, remaining: 2, reset: 3 * time.Second},
		14: {at: msec(9500), n: 5, remaining: 2, reset: 3 * time.Second, retry: 3 * time.Second, limited: true},
	}
	for i, st := range steps[1:] {
		clock.Set(limitercheck.StartTime().Add(st.at))
		var d core.Decision
		if st.peek {
			d = peek(t, lim, "foo", st.n)
		} else {
			d = allow(t, lim, "foo", st.n)
		}
		if d.Allowed == st.limited || d.Remaining != st.remaining || d.ResetAfter != st.reset || d.RetryAfter != st.retry {
			t.Errorf("throttled step %d (peek %v): %+v, want remaining %d reset %v retry %v limited %v",
				i+1, st.peek, d, st.remaining, st.reset, st.retry, st.limited)
		}
	}
}
