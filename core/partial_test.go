package core

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var partialAlgorithms = []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog}

// AllowAtMost grants exactly the largest cost AllowN would allow, capped
// at n and the capacity: each step is checked against a twin limiter that
// peeks, checks that one unit more would be denied, and then counts the
// same units with AllowN; the two must decide alike throughout.
func TestAllowAtMostIsTheLargestAllowN(t *testing.T) {
	ctx := context.Background()
	for _, a := range partialAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			p := Policy{Algorithm: a, Limit: 20, Window: time.Minute, Burst: 30}
			if a != TokenBucket && a != LeakyBucket {
				p.Burst = 0
			}
			clock := NewManualClock(time.Unix(1_800_000_000, 0))
			m, err := New(p, WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			twin, _ := New(p, WithClock(clock))
			capacity := p.Capacity()
			rng := rand.New(rand.NewPCG(1, uint64(a)))
			var granted, partial, none int
			for step := range 3000 {
				key := []string{"a", "b"}[rng.IntN(2)]
				n := 1 + rng.Int64N(2*capacity)
				peek, err := twin.Peek(ctx, key, 1)
				if err != nil {
					t.Fatal(err)
				}
				want := int64(0)
				if peek.Allowed {
					want = min(n, peek.Remaining, capacity)
				}
				if want < min(n, capacity) && want > 0 {
					if more, _ := twin.Peek(ctx, key, want+1); more.Allowed {
						t.Fatalf("step %d: Remaining %d, yet %d units would be allowed", step, want, want+1)
					}
				}
				d, g, err := m.AllowAtMost(ctx, key, n)
				if err != nil {
					t.Fatal(err)
				}
				if g != want {
					t.Fatalf("step %d: AllowAtMost(%d) granted %d, want %d (%+v)", step, n, g, want, d)
				}
				var wd Decision
				if want > 0 {
					wd, _ = twin.AllowN(ctx, key, want)
				} else {
					wd, _ = twin.AllowN(ctx, key, 1)
				}
				if d != wd {
					t.Fatalf("step %d: AllowAtMost(%d) = %+v, AllowN(%d) = %+v", step, n, d, max(want, 1), wd)
				}
				switch {
				case g == 0:
					none++
				case g < n:
					partial++
				default:
					granted++
				}
				clock.Advance(time.Duration(rng.Int64N(int64(4 * time.Second))))
			}
			if granted == 0 || partial == 0 || none == 0 {
				t.Errorf("the walk never met a case: %d whole, %d partial, %d refused", granted, partial, none)
			}
		})
	}
}

func TestAllowAtMostErrors(t *testing.T) {
	ctx := context.Background()
	m, _ := New(Policy{Limit: 5, Window: time.Minute})
	if _, _, err := m.AllowAtMost(ctx, "", 1); !CallerError(ctx, err) {
		t.Errorf("an empty key: %v", err)
	}
	if _, _, err := m.AllowAtMost(ctx, "k", 0); !CallerError(ctx, err) {
		t.Errorf("a cost of 0: %v", err)
	}
	d, g, err := m.AllowAtMost(ctx, "k", 1000)
	if err != nil || g != 5 || !d.Allowed || d.Remaining != 0 {
		t.Errorf("1000 units of a limit of 5: %+v, %d, %v; want 5 granted", d, g, err)
	}
	d, g, err = m.AllowAtMost(ctx, "k", 1)
	if err != nil || g != 0 || d.Allowed || d.RetryAfter <= 0 {
		t.Errorf("an empty window: %+v, %d, %v; want a denial with a RetryAfter", d, g, err)
	}
}

// Goroutines taking at most a few units each, beside others taking whole
// requests with AllowN (lock-free for the buckets), on one key with the
// clock standing still: together they are granted the capacity, exactly.
func TestAllowAtMostConcurrent(t *testing.T) {
	ctx := context.Background()
	for _, a := range partialAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			p := Policy{Algorithm: a, Limit: 10_000, Window: time.Hour}
			clock := NewManualClock(time.Unix(1_800_000_000, 0))
			m, _ := New(p, WithClock(clock))
			var total atomic.Int64
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					for i := 0; ; i++ {
						n := int64(1 + (i+w)%7)
						var g int64
						if w%2 == 0 {
							_, g, _ = m.AllowAtMost(ctx, "hot", n)
						} else if d, _ := m.AllowN(ctx, "hot", n); d.Allowed {
							g = n
						}
						total.Add(g)
						if g == 0 && n == 1 {
							return
						}
						if g == 0 {
							if d, _ := m.Peek(ctx, "hot", 1); !d.Allowed {
								return
							}
						}
					}
				})
			}
			wg.Wait()
			if got := total.Load(); got != p.Limit {
				t.Errorf("granted %d in all, want the limit, %d", got, p.Limit)
			}
		})
	}
}

// A Layered limiter grants what every layer has room for, and counts it in
// each.
func TestLayeredAllowAtMost(t *testing.T) {
	ctx := context.Background()
	clock := NewManualClock(time.Unix(1_800_000_000, 0))
	perMinute, _ := New(Policy{Algorithm: TokenBucket, Limit: 10, Window: time.Minute}, WithClock(clock))
	perHour, _ := New(Policy{Algorithm: SlidingLog, Limit: 25, Window: time.Hour}, WithClock(clock))
	l, err := NewLayered(perMinute, perHour)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		advance time.Duration
		n, want int64
		layer   int64 // Remaining of the most restrictive layer after
	}{
		{0, 4, 4, 6},
		{0, 100, 6, 0},            // the minute's bucket has 6
		{0, 3, 0, 0},              // nothing fits
		{time.Minute, 100, 10, 0}, // a full bucket: 10 of the hour's 15
		{time.Minute, 100, 5, 0},  // the hour has 5 left
	} {
		clock.Advance(c.advance)
		d, g, err := l.AllowAtMost(ctx, "k", c.n)
		if err != nil {
			t.Fatal(err)
		}
		if g != c.want || d.Allowed != (g > 0) || d.Remaining != c.layer {
			t.Errorf("step %d: AllowAtMost(%d) = %+v, %d; want %d granted, Remaining %d", i, c.n, d, g, c.want, c.layer)
		}
	}
	if d, _ := perHour.Peek(ctx, "k", 1); d.Remaining != 0 {
		t.Errorf("the hour holds %d more, want 0: 25 counted", d.Remaining)
	}
}
