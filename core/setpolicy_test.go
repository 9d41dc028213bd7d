package core

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// setStart is 12:00:00 UTC: a multiple of every window the tests use.
var setStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newSet(t *testing.T, p Policy, clk *ManualClock, opts ...Option) *Memory {
	t.Helper()
	m, err := New(p, append([]Option{WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func setPolicy(t *testing.T, m *Memory, p Policy) {
	t.Helper()
	if err := m.SetPolicy(p); err != nil {
		t.Fatalf("SetPolicy(%v): %v", p, err)
	}
	if got := m.Policy(); got != p {
		t.Fatalf("Policy() = %v after SetPolicy(%v)", got, p)
	}
}

func spend(t *testing.T, m *Memory, key string, n int) {
	t.Helper()
	for i := range n {
		if d, err := m.Allow(context.Background(), key); err != nil || !d.Allowed {
			t.Fatalf("request %d of %d: %+v, %v", i+1, n, d, err)
		}
	}
}

func peek(t *testing.T, m *Memory, key string) Decision {
	t.Helper()
	d, err := m.Peek(context.Background(), key, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// wantRetry checks that key is denied now with RetryAfter want, is still
// denied 1 µs before it, and is allowed then.
func wantRetry(t *testing.T, m *Memory, clk *ManualClock, key string, want time.Duration) {
	t.Helper()
	d := peek(t, m, key)
	if d.Allowed || d.RetryAfter != want {
		t.Fatalf("Peek: Allowed=%v RetryAfter=%v, want denied for %v (%+v)", d.Allowed, d.RetryAfter, want, d)
	}
	clk.Advance(want - time.Microsecond)
	if d := peek(t, m, key); d.Allowed {
		t.Fatalf("allowed 1µs before RetryAfter %v", want)
	}
	clk.Advance(time.Microsecond)
	if d := peek(t, m, key); !d.Allowed {
		t.Fatalf("denied at RetryAfter %v: %+v", want, d)
	}
}

// TestSetPolicyCarries: a key that has used 80 of 100 has 120 left when
// given 200, and lowered to 50 is denied until its usage has aged out to
// fit, with the exact RetryAfter, for every algorithm.
func TestSetPolicyCarries(t *testing.T) {
	tests := []struct {
		name  string
		p     Policy
		up    Policy // the capacity raised to 200
		down  Policy // the capacity lowered to 50
		retry time.Duration
	}{
		// 80 units of 600 ms: 48 s of backlog; at 50/1m, 96 s, and one
		// more unit fits at 60 s - 1.2 s: 37.2 s from now.
		{"token-limit", Policy{Limit: 100, Window: time.Minute},
			Policy{Limit: 200, Window: time.Minute}, Policy{Limit: 50, Window: time.Minute}, 37200 * time.Millisecond},
		// The burst alone: T stays 600 ms, 48 s of backlog against 30 s.
		{"token-burst", Policy{Limit: 100, Window: time.Minute, Burst: 100},
			Policy{Limit: 100, Window: time.Minute, Burst: 200}, Policy{Limit: 100, Window: time.Minute, Burst: 50}, 18600 * time.Millisecond},
		{"leaky", Policy{Algorithm: LeakyBucket, Limit: 100, Window: time.Minute},
			Policy{Algorithm: LeakyBucket, Limit: 200, Window: time.Minute}, Policy{Algorithm: LeakyBucket, Limit: 50, Window: time.Minute}, 37200 * time.Millisecond},
		// 3/s has q = 3, 7/s q = 7: the change of scale is exact.
		// From q = 1 to q = 7: 80 units of 100 ms (8 s) become 80 of
		// 1/7 s, 8e7 in 1/7 µs; one more fits against 5e7 once 3.1e7 of
		// them have passed, 4,428,571.4 µs, rounded up.
		{"token-scale", Policy{Limit: 100, Window: 10 * time.Second},
			Policy{Limit: 7, Window: time.Second, Burst: 200}, Policy{Limit: 7, Window: time.Second, Burst: 50},
			4428572 * time.Microsecond},
		// The window ends 50 s from now (the requests are at 12:00:10).
		{"fixed", Policy{Algorithm: FixedWindow, Limit: 100, Window: time.Minute},
			Policy{Algorithm: FixedWindow, Limit: 200, Window: time.Minute}, Policy{Algorithm: FixedWindow, Limit: 50, Window: time.Minute}, 50 * time.Second},
		// cur = 80 at 12:00:10; 1 more fits at 50·60 s >= 80·(60-e) + 1·60:
		// e = 23.25 s into the next window, 73.25 s from now.
		{"sliding-window", Policy{Algorithm: SlidingWindow, Limit: 100, Window: time.Minute},
			Policy{Algorithm: SlidingWindow, Limit: 200, Window: time.Minute}, Policy{Algorithm: SlidingWindow, Limit: 50, Window: time.Minute}, 73250 * time.Millisecond},
		// "down" has 80 entries 10 ms apart from 12:00:10.790 (after
		// "up"'s): 31 must leave, the 31st at 12:01:11.090, 59.51 s
		// after its last (12:00:11.580).
		{"sliding-log", Policy{Algorithm: SlidingLog, Limit: 100, Window: time.Minute},
			Policy{Algorithm: SlidingLog, Limit: 200, Window: time.Minute}, Policy{Algorithm: SlidingLog, Limit: 50, Window: time.Minute}, 59510 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := NewManualClock(setStart.Add(10 * time.Second))
			m := newSet(t, tt.p, clk)
			use := func(key string) {
				for range 80 {
					spend(t, m, key, 1)
					if tt.p.Algorithm == SlidingLog {
						clk.Advance(10 * time.Millisecond)
					}
				}
				if tt.p.Algorithm == SlidingLog {
					clk.Advance(-10 * time.Millisecond)
				}
			}
			use("up")
			use("down")
			setPolicy(t, m, tt.up)
			if d := peek(t, m, "up"); d.Remaining != 120 || d.Limit != tt.up.Limit || d.Policy != tt.up {
				t.Fatalf("raised: %+v, want 120 left", d)
			}
			spend(t, m, "up", 120)
			if d := peek(t, m, "up"); d.Allowed {
				t.Fatalf("raised: allowed past 200: %+v", d)
			}
			setPolicy(t, m, tt.down)
			if d := peek(t, m, "down"); d.Remaining != 0 {
				t.Fatalf("lowered: %+v, want 0 left", d)
			}
			wantRetry(t, m, clk, "down", tt.retry)
		})
	}
}

// TestSetPolicyWindows: a change of Window carries each window's usage
// as docs/algorithms.md defines it.
func TestSetPolicyWindows(t *testing.T) {
	t.Run("fixed", func(t *testing.T) {
		clk := NewManualClock(setStart.Add(70 * time.Second)) // 12:01:10
		m := newSet(t, Policy{Algorithm: FixedWindow, Limit: 100, Window: time.Minute}, clk)
		spend(t, m, "k", 80)
		// Into the hour that holds now, until 13:00.
		setPolicy(t, m, Policy{Algorithm: FixedWindow, Limit: 100, Window: time.Hour})
		d := peek(t, m, "k")
		if d.Remaining != 20 || d.ResetAfter != time.Hour-70*time.Second {
			t.Fatalf("1m to 1h: %+v", d)
		}
		spend(t, m, "k", 20)
		wantRetry(t, m, clk, "k", time.Hour-70*time.Second)
		// 13:00:00: 10 in the new hour, then 1 minute windows again: the
		// 10 count until 13:01.
		spend(t, m, "k", 10)
		setPolicy(t, m, Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Minute})
		wantRetry(t, m, clk, "k", time.Minute)
	})
	t.Run("sliding-window", func(t *testing.T) {
		clk := NewManualClock(setStart.Add(30 * time.Second))
		m := newSet(t, Policy{Algorithm: SlidingWindow, Limit: 100, Window: time.Minute}, clk)
		spend(t, m, "k", 60)
		clk.Advance(45 * time.Second) // 12:01:15: 60·45/60 = 45
		spend(t, m, "k", 10)          // 55
		// 12:00 is a multiple of 2 minutes: the new window is
		// [12:00, 12:02), its count 55, the previous one 0.
		setPolicy(t, m, Policy{Algorithm: SlidingWindow, Limit: 100, Window: 2 * time.Minute})
		d := peek(t, m, "k")
		if d.Remaining != 45 || d.ResetAfter != 4*time.Minute-75*time.Second {
			t.Fatalf("1m to 2m: %+v", d)
		}
		// Lowered to 55 as well: the next unit fits once 55·(120-e)/120
		// + 1 <= 55, e = 120/55 s into the next window.
		setPolicy(t, m, Policy{Algorithm: SlidingWindow, Limit: 55, Window: 2 * time.Minute})
		wantRetry(t, m, clk, "k", 45*time.Second+2181819*time.Microsecond)
	})
	t.Run("sliding-window-estimate", func(t *testing.T) {
		// A rounded estimate: 1 of the previous window, a third of the
		// way into the current one, weighs 2/3: it carries as 1.
		clk := NewManualClock(setStart.Add(59 * time.Second))
		m := newSet(t, Policy{Algorithm: SlidingWindow, Limit: 3, Window: 3 * time.Second}, clk)
		spend(t, m, "k", 1)
		clk.Advance(2 * time.Second) // 12:01:01, 1 s into [12:01:00, 12:01:03)
		setPolicy(t, m, Policy{Algorithm: SlidingWindow, Limit: 3, Window: time.Second})
		if d := peek(t, m, "k"); d.Remaining != 2 || d.ResetAfter != 2*time.Second {
			t.Fatalf("3s to 1s: %+v", d)
		}
	})
	t.Run("sliding-log", func(t *testing.T) {
		clk := NewManualClock(setStart)
		m := newSet(t, Policy{Algorithm: SlidingLog, Limit: 100, Window: time.Minute}, clk)
		spend(t, m, "old", 30) // 12:00:00; left the window at 12:01:00
		clk.Advance(50 * time.Second)
		spend(t, m, "k", 40) // 12:00:50
		clk.Advance(5 * time.Second)
		spend(t, m, "k", 40) // 12:00:55
		clk.Advance(35 * time.Second)
		// 12:01:30. Shorter, 38 s: the entries of 12:00:50 leave, those
		// of 12:00:55 count (now - 38 s < s) until 12:01:33.
		setPolicy(t, m, Policy{Algorithm: SlidingLog, Limit: 100, Window: 38 * time.Second})
		if d := peek(t, m, "k"); d.Remaining != 60 || d.ResetAfter != 3*time.Second {
			t.Fatalf("1m to 38s: %+v", d)
		}
		// Longer: entries that had left the window do not count again
		// in an hour's, though no request dropped them ("old" left the
		// 1 minute window, k's first 40 the 38 s one).
		setPolicy(t, m, Policy{Algorithm: SlidingLog, Limit: 100, Window: time.Hour})
		if d := peek(t, m, "old"); d.Remaining != 100 || d.ResetAfter != 0 {
			t.Fatalf("old entries count again: %+v", d)
		}
		if d := peek(t, m, "k"); d.Remaining != 60 || d.ResetAfter != time.Hour-35*time.Second {
			t.Fatalf("38s to 1h: %+v", d)
		}
	})
}

// TestSetPolicyLogRing: a sliding log lowered far below the entries it
// holds keeps them all, denies until enough have left, and then admits
// exactly the new limit; raised, its ring grows past the old bound.
func TestSetPolicyLogRing(t *testing.T) {
	clk := NewManualClock(setStart)
	m := newSet(t, Policy{Algorithm: SlidingLog, Limit: 100, Window: time.Minute}, clk)
	for range 100 {
		spend(t, m, "k", 1)
		clk.Advance(100 * time.Millisecond)
	}
	// 12:00:10; entries at 12:00:00.0 to 12:00:09.9.
	setPolicy(t, m, Policy{Algorithm: SlidingLog, Limit: 10, Window: time.Minute})
	// 91 entries must leave for one more: the 91st leaves at 12:01:09.
	wantRetry(t, m, clk, "k", 59*time.Second)
	spend(t, m, "k", 1)
	if d := peek(t, m, "k"); d.Allowed {
		t.Fatalf("past the lowered limit: %+v", d)
	}
	clk.Advance(time.Minute) // every entry has left
	spend(t, m, "k", 10)
	if d := peek(t, m, "k"); d.Allowed {
		t.Fatalf("past 10: %+v", d)
	}
	setPolicy(t, m, Policy{Algorithm: SlidingLog, Limit: 1000, Window: time.Minute})
	for range 990 {
		spend(t, m, "k", 1)
		clk.Advance(time.Microsecond)
	}
	if d := peek(t, m, "k"); d.Allowed || d.Remaining != 0 {
		t.Fatalf("past 1000: %+v", d)
	}
	// The 10 of 12:02:09 share an entry with the first of the 990.
	if n := logOf(t, m, "k").n(); n != 990 {
		t.Fatalf("%d entries, want 990", n)
	}
}

// TestSetPolicyFresh: a fresh key stays fresh, and keys that become fresh
// sooner under the new policy are within their shard's bound (calm).
func TestSetPolicyFresh(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			clk := NewManualClock(setStart)
			m := newSet(t, Policy{Algorithm: a, Limit: 100, Window: time.Hour}, clk, WithMaxKeys(256))
			keys := ipKeys(200)
			for i, k := range keys {
				if i%2 == 0 {
					spend(t, m, k, 1+i%50)
				}
			}
			clk.Advance(2*time.Hour + time.Second) // every key fresh
			spend(t, m, keys[1], 1)
			setPolicy(t, m, Policy{Algorithm: a, Limit: 50, Window: time.Minute})
			for i, k := range keys {
				if i == 1 {
					continue
				}
				if d := peek(t, m, k); d.Remaining != 50 || d.ResetAfter != 0 {
					t.Fatalf("%s: not fresh: %+v", k, d)
				}
			}
			// A shorter window: keys used now are fresh within a second
			// or two, about an hour sooner than the shards' bounds said.
			setPolicy(t, m, Policy{Algorithm: a, Limit: 50, Window: time.Hour})
			for _, k := range keys[:100] {
				spend(t, m, k, 1)
			}
			setPolicy(t, m, Policy{Algorithm: a, Limit: 50, Window: time.Second})
			for step := range 3 {
				checkCalm(t, m.eng, m.now(), step)
				clk.Advance(time.Second)
			}
		})
	}
}

// TestSetPolicySame: SetPolicy to the policy in force (or another name for
// it) changes no key's Peek.
func TestSetPolicySame(t *testing.T) {
	for _, p := range []Policy{
		{Limit: 100, Window: time.Minute},
		{Limit: 97, Window: time.Minute, Burst: 20}, // q capped: rounded T
		{Algorithm: LeakyBucket, Limit: 3, Window: time.Second},
		{Algorithm: FixedWindow, Limit: 100, Window: time.Minute},
		{Algorithm: SlidingWindow, Limit: 100, Window: time.Minute},
		{Algorithm: SlidingLog, Limit: 100, Window: time.Minute},
	} {
		t.Run(p.String(), func(t *testing.T) {
			clk := NewManualClock(setStart)
			m := newSet(t, p, clk)
			keys := ipKeys(300)
			for i, k := range keys {
				for range i % (int(p.Capacity()) + 3) {
					m.Allow(context.Background(), k)
					clk.Advance(time.Duration(i%7) * time.Millisecond)
				}
			}
			before := make([]Decision, len(keys))
			for i, k := range keys {
				before[i] = peek(t, m, k)
			}
			setPolicy(t, m, p)
			named := p
			named.Name = "renamed"
			setPolicy(t, m, named)
			for i, k := range keys {
				d := peek(t, m, k)
				if d.Policy.Name != "renamed" {
					t.Fatalf("%s: %+v", k, d)
				}
				d.Policy.Name = p.Name
				if d != before[i] {
					t.Fatalf("%s: %+v, was %+v", k, d, before[i])
				}
			}
		})
	}
}

// TestSetPolicyErrors: another algorithm or an invalid policy is refused,
// and nothing changes.
func TestSetPolicyErrors(t *testing.T) {
	clk := NewManualClock(setStart)
	p := Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Minute}
	m := newSet(t, p, clk)
	spend(t, m, "k", 4)
	err := m.SetPolicy(Policy{Algorithm: SlidingLog, Limit: 10, Window: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "fixed-window") || !strings.Contains(err.Error(), "sliding-log") ||
		!strings.Contains(err.Error(), "build a new limiter") {
		t.Fatalf("another algorithm: %v", err)
	}
	err = m.SetPolicy(Policy{Algorithm: FixedWindow, Limit: 0, Window: time.Minute})
	var pe *PolicyError
	if !errors.Is(err, ErrInvalidPolicy) || !errors.As(err, &pe) || pe.Field != "Limit" {
		t.Fatalf("invalid policy: %v", err)
	}
	if m.Policy() != p {
		t.Fatalf("policy changed: %v", m.Policy())
	}
	if d := peek(t, m, "k"); d.Remaining != 6 {
		t.Fatalf("state changed: %+v", d)
	}
}

// TestSetPolicyCost: a capacity lowered below a cost makes it
// ErrCostTooHigh, and raised, allowed; Refund and Layered follow.
func TestSetPolicyCost(t *testing.T) {
	ctx := context.Background()
	for _, a := range Algorithms() {
		clk := NewManualClock(setStart)
		m := newSet(t, Policy{Algorithm: a, Limit: 10, Window: time.Minute}, clk)
		l, err := NewLayered(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.AllowN(ctx, "k", 8); err != nil {
			t.Fatal(err)
		}
		setPolicy(t, m, Policy{Algorithm: a, Limit: 5, Window: time.Minute})
		if d, err := m.AllowN(ctx, "k", 6); !errors.Is(err, ErrCostTooHigh) || d.Limit != 5 {
			t.Fatalf("%v: cost 6 of 5: %+v, %v", a, d, err)
		}
		if _, err := l.AllowN(ctx, "k", 6); !errors.Is(err, ErrCostTooHigh) {
			t.Fatalf("%v: layered cost 6 of 5: %v", a, err)
		}
		if err := m.Refund(ctx, "k", 6, 0); !errors.Is(err, ErrCostTooHigh) {
			t.Fatalf("%v: refund 6 of 5: %v", a, err)
		}
		if ps := l.Policies(); ps[0].Limit != 5 {
			t.Fatalf("%v: layered policies %v", a, ps)
		}
		tr, err := NewTiered(map[string]Policy{"free": {Algorithm: a, Limit: 10, Window: time.Minute}},
			func(context.Context, string) (string, error) { return "free", nil }, WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		setPolicy(t, tr.plans["free"], Policy{Name: "free", Algorithm: a, Limit: 7, Window: time.Minute})
		if d, err := tr.AllowN(ctx, "k", 1); err != nil || d.Limit != 7 || tr.Plans()["free"].Limit != 7 {
			t.Fatalf("%v: tiered: %+v, %v, %v", a, d, err, tr.Plans())
		}
		setPolicy(t, m, Policy{Algorithm: a, Limit: 20, Window: time.Minute})
		if d, err := m.AllowN(ctx, "k", 12); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%v: 12 of 20 after 8: %+v, %v", a, d, err)
		}
	}
}

// TestSetPolicyUnderTraffic changes a limit 100 times, alternating 100
// and 200 in one window of an hour on a manual clock that does not move,
// while goroutines decide on 4 hot keys and 600 others, and a Layered
// limiter decides on the same Memory. Nothing refills or leaves the
// window, so every unit admitted stays counted: a key may never be
// admitted more than 200 times, the largest limit in force. Decisions in
// flight at a change add nothing to that bound here: the windows decide
// under the shard's lock, and a bucket's in-flight decision under the old
// policy can only land on a state its conversion left unchanged, a fresh
// one with the same scale, where it counts half a unit of 200 against the
// 100's, or two of 100 against the 200's (and a change of scale never
// leaves a state's bits unchanged: token-bucket-scale, q = 1 and 64 with
// T rounded up, where carrying rounds up too). So the test checks
// admitted <= 200 for every key, no error, and that each key's final
// Remaining is what its admitted count leaves (exact carry), give or take
// one unit for the buckets.
func TestSetPolicyUnderTraffic(t *testing.T) {
	ctx := context.Background()
	const changes = 100
	type pair struct {
		name      string
		low, high Policy
	}
	var pairs []pair
	for _, a := range Algorithms() {
		pairs = append(pairs, pair{a.String(), Policy{Algorithm: a, Limit: 100, Window: time.Hour}, Policy{Algorithm: a, Limit: 200, Window: time.Hour}})
	}
	// A change of scale on every change: q = 1 and q = 64 (200 per hour
	// and a µs has no exact T: rounded up).
	pairs = append(pairs, pair{"token-bucket-scale", Policy{Limit: 100, Window: time.Hour},
		Policy{Limit: 200, Window: time.Hour + time.Microsecond}})
	for _, pp := range pairs {
		a, low, high := pp.low.Algorithm, pp.low, pp.high
		t.Run(pp.name, func(t *testing.T) {
			clk := NewManualClock(setStart)
			m := newSet(t, low, clk, WithMaxKeys(4096))
			other := newSet(t, low, clk)
			l, err := NewLayered(other, m)
			if err != nil {
				t.Fatal(err)
			}
			hot := []string{"hot-0", "hot-1", "hot-2", "hot-3"}
			many := ipKeys(600)
			keys := append(append([]string{}, hot...), many...)
			admitted := make([]atomic.Int64, len(keys))
			var decisions, errs atomic.Int64
			var done atomic.Bool
			var wg sync.WaitGroup
			decide := func(g int, idx []int) {
				defer wg.Done()
				for i := g; !done.Load(); i++ {
					k := idx[i%len(idx)]
					var d Decision
					var err error
					if (i+i/len(idx))%5 == 0 {
						d, err = l.AllowN(ctx, keys[k], 1) // counts in m only if other allows too
					} else {
						d, err = m.AllowN(ctx, keys[k], 1)
					}
					decisions.Add(1)
					if err != nil {
						errs.Add(1)
						continue
					}
					if d.Allowed {
						admitted[k].Add(1)
					}
				}
			}
			hotIdx := []int{0, 1, 2, 3}
			manyIdx := make([]int, len(many))
			for i := range manyIdx {
				manyIdx[i] = len(hot) + i
			}
			for g := range 3 {
				wg.Add(2)
				go decide(g, hotIdx)
				go decide(g*197, manyIdx)
			}
			for c := range changes {
				p := high
				if c%2 == 1 {
					p = low
				}
				if err := m.SetPolicy(p); err != nil {
					t.Error(err)
				}
				for start := decisions.Load(); decisions.Load() < start+300; {
					runtime.Gosched()
				}
			}
			done.Store(true)
			wg.Wait()
			if n := errs.Load(); n != 0 {
				t.Fatalf("%d errors", n)
			}
			// The last change set low (changes is even): limit 100.
			var total int64
			for k, key := range keys {
				got := admitted[k].Load()
				total += got
				if got > high.Limit {
					t.Errorf("%s: %d admitted, more than %d", key, got, high.Limit)
				}
				rem := peek(t, m, key).Remaining
				want := max(low.Limit-got, 0)
				if rem != want && !(a.Burstable() && rem >= want-1 && rem <= want+1) {
					t.Errorf("%s: %d admitted, Remaining %d, want %d", key, got, rem, want)
				}
			}
			t.Logf("%s: %d decisions, %d changes, %d admitted over %d keys, most per key %d (bound %d), %d errors",
				pp.name, decisions.Load(), changes, total, len(keys), maxAdmitted(admitted), high.Limit, errs.Load())
		})
	}
}

func maxAdmitted(a []atomic.Int64) int64 {
	var most int64
	for i := range a {
		most = max(most, a[i].Load())
	}
	return most
}

// TestSetPolicyLayeredNoDeadlock: SetPolicy on Memory limiters that
// Layered limiters share, in both orders, while they decide.
func TestSetPolicyLayeredNoDeadlock(t *testing.T) {
	ctx := context.Background()
	clk := NewManualClock(setStart)
	p := func(limit int64) Policy { return Policy{Limit: limit, Window: time.Minute} }
	a, b := newSet(t, p(100), clk), newSet(t, p(100), clk)
	ab, _ := NewLayered(a, b)
	ba, _ := NewLayered(b, a)
	var done atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load(); i++ {
				l := ab
				if (g+i)%2 == 0 {
					l = ba
				}
				if _, err := l.AllowN(ctx, "k-"+strconv.Itoa(i%64), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range 200 {
		m := a
		if i%2 == 0 {
			m = b
		}
		if err := m.SetPolicy(p(int64(100 + i))); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	if ps := ab.Policies(); ps[0].Limit != 299 || ps[1].Limit != 298 {
		t.Fatalf("policies %v", ps)
	}
}
