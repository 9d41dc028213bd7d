package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The tests run Wait in a synctest bubble: time.Now, Wait's timers and the
// limiters on the default SystemClock all read the bubble's fake clock,
// which moves only when every goroutine in it is blocked, so the times at
// which each Wait returns are exact and nothing sleeps.

// fixJitter makes Wait's jitter f for the rest of the test, recording the
// bounds Wait asks for.
func fixJitter(t *testing.T, f func(n int64) int64) *[]time.Duration {
	t.Helper()
	var mu sync.Mutex
	var bounds []time.Duration
	old := waitJitter
	waitJitter = func(n int64) int64 {
		mu.Lock()
		bounds = append(bounds, time.Duration(n))
		mu.Unlock()
		return f(n)
	}
	t.Cleanup(func() { waitJitter = old })
	return &bounds
}

func noJitter(int64) int64 { return 0 }

func newWaitLimiter(t *testing.T, p Policy) *Memory {
	t.Helper()
	l, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// One caller waiting again and again: each Wait returns at the exact time
// its algorithm first allows the units, as on a manual clock.
func TestWaitTimes(t *testing.T) {
	tests := []struct {
		p    Policy
		n    int64
		want []time.Duration // when each Wait returns, from the first call
	}{
		{Policy{Algorithm: TokenBucket, Limit: 2, Window: time.Second}, 1, []time.Duration{0, 0, ms(500), ms(1000), ms(1500), ms(2000)}},
		{Policy{Algorithm: TokenBucket, Limit: 2, Window: time.Second}, 2, []time.Duration{0, ms(1000), ms(2000)}},
		{Policy{Algorithm: TokenBucket, Limit: 2, Window: time.Second, Burst: 4}, 3, []time.Duration{0, ms(1000), ms(2500)}},
		{Policy{Algorithm: FixedWindow, Limit: 2, Window: time.Second}, 1, []time.Duration{0, 0, ms(1000), ms(1000), ms(2000), ms(2000)}},
		{Policy{Algorithm: SlidingLog, Limit: 2, Window: time.Second}, 1, []time.Duration{0, 0, ms(1000), ms(1000), ms(2000), ms(2000)}},
		{Policy{Algorithm: SlidingLog, Limit: 3, Window: time.Second}, 2, []time.Duration{0, ms(1000), ms(2000)}},
		// prev·(W-e)/W + cur + 1 <= 2: the third fits halfway through the
		// second window, the fourth at the third window's start.
		{Policy{Algorithm: SlidingWindow, Limit: 2, Window: time.Second}, 1, []time.Duration{0, 0, ms(1500), ms(2000), ms(3000), ms(4000)}},
		// The leaky bucket allows at once and Wait sleeps each Delay.
		{Policy{Algorithm: LeakyBucket, Limit: 2, Window: time.Second}, 1, []time.Duration{0, ms(500), ms(1000), ms(1500), ms(2000)}},
		{Policy{Algorithm: LeakyBucket, Limit: 2, Window: time.Second, Burst: 1}, 1, []time.Duration{0, ms(500), ms(1000)}},
	}
	for _, tt := range tests {
		t.Run(tt.p.String(), func(t *testing.T) {
			fixJitter(t, noJitter)
			synctest.Test(t, func(t *testing.T) {
				l := newWaitLimiter(t, tt.p)
				start := time.Now()
				for i, want := range tt.want {
					d, err := Wait(context.Background(), l, "k", tt.n)
					if got := time.Since(start); err != nil || got != want || !d.Allowed {
						t.Fatalf("Wait %d: returned at %v (%+v, %v), want %v, allowed", i+1, got, d, err, want)
					}
				}
			})
		})
	}
}

// Every algorithm is covered by TestWaitTimes.
func TestWaitTimesCoverAlgorithms(t *testing.T) {
	if n := len(Algorithms()); n != 5 {
		t.Errorf("%d algorithms; TestWaitTimes covers 5", n)
	}
}

// The jitter Wait draws: uniform in [0, J), J = min(RetryAfter, n·W/L, 1s)
// divided by the denials so far (at most 8), and added to RetryAfter.
func TestWaitJitterBound(t *testing.T) {
	tests := []struct {
		p          Policy
		n          int64
		wantBounds []time.Duration
		wantAt     time.Duration
	}{
		// RetryAfter 500ms, 1 unit frees in 500ms.
		{Policy{Limit: 2, Window: time.Second}, 1, []time.Duration{ms(500)}, ms(1000) - 1},
		// RetryAfter 1m, capped at 1s.
		{Policy{Limit: 1, Window: time.Minute}, 1, []time.Duration{time.Second}, time.Minute + time.Second - 1},
		// Fixed window: RetryAfter 1s (the next window), 1 unit in 1/10s.
		{Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Second}, 1, []time.Duration{ms(100)}, ms(1100) - 1},
	}
	for _, tt := range tests {
		t.Run(tt.p.String(), func(t *testing.T) {
			bounds := fixJitter(t, func(n int64) int64 { return n - 1 }) // the latest Wait may come back
			synctest.Test(t, func(t *testing.T) {
				l := newWaitLimiter(t, tt.p)
				start := time.Now()
				for range tt.p.Capacity() {
					if _, err := l.AllowN(context.Background(), "k", 1); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := Wait(context.Background(), l, "k", tt.n); err != nil {
					t.Fatal(err)
				}
				if got := time.Since(start); got != tt.wantAt {
					t.Errorf("returned at %v, want %v", got, tt.wantAt)
				}
				if !slices.Equal(*bounds, tt.wantBounds) {
					t.Errorf("jitter bounds %v, want %v", *bounds, tt.wantBounds)
				}
			})
		})
	}

	// Denied again and again, by a limiter that always says 80ms: the
	// bound shrinks with the denials, down to an eighth.
	bounds := fixJitter(t, noJitter)
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*ms(80)+1)
		defer cancel()
		_, err := Wait(ctx, denyAll{ms(80)}, "k", 1)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the deadline", err)
		}
	})
	want := []time.Duration{ms(80), ms(40), ms(80) / 3, ms(20), ms(16), ms(80) / 6, ms(80) / 7, ms(10), ms(10), 1}
	if !slices.Equal(*bounds, want) {
		t.Errorf("jitter bounds %v, want %v", *bounds, want)
	}
}

// denyAll denies everything with RetryAfter after, under no known policy.
type denyAll struct{ after time.Duration }

func (d denyAll) AllowN(context.Context, string, int64) (Decision, error) {
	return Decision{RetryAfter: d.after}, nil
}
func (d denyAll) Peek(ctx context.Context, key string, n int64) (Decision, error) {
	return d.AllowN(ctx, key, n)
}
func (denyAll) Reset(context.Context, string) error { return nil }

// With the real jitter, each Wait of a token bucket returns within its
// bound after the time the bucket frees a token, never before.
func TestWaitRealJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A burst of 5, so that a late Wait loses nothing: the bucket is
		// never full again.
		l := newWaitLimiter(t, Policy{Limit: 10, Window: time.Second, Burst: 5})
		start := time.Now()
		var lates []time.Duration
		for k := range 204 {
			if _, err := Wait(context.Background(), l, "k", 1); err != nil {
				t.Fatal(err)
			}
			at := time.Since(start)
			free := time.Duration(max(k-4, 0)) * ms(100) // when the token this Wait took was free
			late := at - free
			if late < 0 || late >= ms(100) {
				t.Fatalf("Wait %d returned at %v, want in [%v, %v)", k+1, at, free, free+ms(100))
			}
			lates = append(lates, late)
		}
		// A Wait starts when the last returned, late by l, and is denied
		// with RetryAfter = 100ms - l, so its lateness is uniform in
		// [0, 100ms - l): a mean of 100ms/3 (standard error about 2ms).
		var sum time.Duration
		for _, l := range lates[5:] {
			sum += l
		}
		if mean := sum / time.Duration(len(lates)-5); mean < ms(25) || mean > ms(42) {
			t.Errorf("mean lateness %v, want about 33ms", mean)
		}
	})
}

func TestWaitDeadline(t *testing.T) {
	fixJitter(t, func(n int64) int64 { return n - 1 })
	p := Policy{Limit: 1, Window: time.Second}
	for _, tt := range []struct {
		name     string
		deadline time.Duration
		wantErr  bool
		wantAt   time.Duration
	}{
		{"before RetryAfter", ms(400), true, 0},
		{"at RetryAfter", ms(1000), true, 0},
		// The jitter stays before the deadline.
		{"just after RetryAfter", ms(1000) + 2, false, ms(1000) + 1},
		{"after RetryAfter and jitter", ms(5000), false, ms(2000) - 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newWaitLimiter(t, p)
				l.Allow(context.Background(), "k")
				ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
				defer cancel()
				start := time.Now()
				_, err := Wait(ctx, l, "k", 1)
				if got := time.Since(start); got != tt.wantAt {
					t.Errorf("returned at %v, want %v", got, tt.wantAt)
				}
				if !tt.wantErr {
					if err != nil {
						t.Errorf("err = %v", err)
					}
					return
				}
				if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
					t.Errorf("err = %v (ctx %v), want a deadline error before the deadline", err, ctx.Err())
				}
				// Nothing was counted: the token is still due in 1s.
				if d, _ := l.Peek(context.Background(), "k", 1); d.RetryAfter != time.Second {
					t.Errorf("after the refusal: %+v", d)
				}
			})
		})
	}

	// The leaky bucket's Delay past the deadline: refused at once, and
	// the slot given back.
	synctest.Test(t, func(t *testing.T) {
		l := newWaitLimiter(t, Policy{Algorithm: LeakyBucket, Limit: 1, Window: time.Second, Burst: 3})
		l.Allow(context.Background(), "k")
		before, _ := l.Peek(context.Background(), "k", 1)
		ctx, cancel := context.WithTimeout(context.Background(), ms(999))
		defer cancel()
		d, err := Wait(ctx, l, "k", 1)
		if !errors.Is(err, context.DeadlineExceeded) || d.Delay != time.Second {
			t.Errorf("Wait: %+v, %v; want a Delay of 1s refused", d, err)
		}
		if after, _ := l.Peek(context.Background(), "k", 1); after != before {
			t.Errorf("slot not given back: before %+v, after %+v", before, after)
		}
	})
}

func TestWaitCanceled(t *testing.T) {
	fixJitter(t, noJitter)
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newWaitLimiter(t, Policy{Algorithm: a, Limit: 1, Window: time.Second, Burst: map[bool]int64{true: 2}[a == LeakyBucket]})
				l.Allow(context.Background(), "k")
				before, _ := l.Peek(context.Background(), "k", 1)
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(ms(300), cancel)
				start := time.Now()
				_, err := Wait(ctx, l, "k", 1)
				if got := time.Since(start); got != ms(300) || !errors.Is(err, context.Canceled) {
					t.Errorf("returned at %v with %v, want at 300ms with context.Canceled", got, err)
				}
				// Nothing stays counted (the leaky bucket's slot is given back).
				if after, _ := l.Peek(context.Background(), "k", 1); after.Remaining != before.Remaining {
					t.Errorf("before %+v, after %+v", before, after)
				}
			})
		})
	}
	// A context ended before the call: not even asked.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := newWaitLimiter(t, Policy{Limit: 1, Window: time.Second})
	if _, err := Wait(ctx, l, "k", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("ended ctx: %v", err)
	}
	if d, _ := l.Peek(context.Background(), "k", 1); !d.Allowed || d.Remaining != 1 {
		t.Errorf("ended ctx counted: %+v", d)
	}
}

func TestWaitErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newWaitLimiter(t, Policy{Limit: 2, Window: time.Second})
		start := time.Now()
		for _, tt := range []struct {
			l    Limiter
			key  string
			n    int64
			want error
		}{
			{l, "k", 3, ErrCostTooHigh},
			{wrapper{l}, "k", 3, ErrCostTooHigh}, // policy unknown: the limiter's error
			{l, "k", 0, ErrInvalidCost},
			{l, "", 1, ErrEmptyKey},
		} {
			if _, err := Wait(context.Background(), tt.l, tt.key, tt.n); !errors.Is(err, tt.want) {
				t.Errorf("Wait(%T, %q, %d): %v, want %v", tt.l, tt.key, tt.n, err, tt.want)
			}
		}
		if time.Since(start) != 0 {
			t.Errorf("errors took %v, want none", time.Since(start))
		}
		if d, _ := l.Peek(context.Background(), "k", 2); !d.Allowed {
			t.Errorf("errors counted units: %+v", d)
		}
	})
}

// wrapper hides the limiter's policy.
type wrapper struct{ Limiter }

// Many callers waiting once each on one key, for every algorithm: the
// k-th to return never returns before the policy allows a k-th unit (the
// times one caller gets, TestWaitTimes), all of them return, and the last
// returns within one window of the time the policy allows the last unit:
// nobody starves.
func TestWaitManyWaiters(t *testing.T) {
	const waiters = 24
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			p := Policy{Algorithm: a, Limit: 4, Window: time.Second}
			if a == LeakyBucket {
				p.Burst = 2 // a short queue, so that most are denied and retry
			}
			// The earliest time of each unit: one caller, no jitter.
			earliest := make([]time.Duration, waiters)
			old := waitJitter
			waitJitter = noJitter
			synctest.Test(t, func(t *testing.T) {
				l := newWaitLimiter(t, p)
				start := time.Now()
				for i := range earliest {
					Wait(context.Background(), l, "k", 1)
					earliest[i] = time.Since(start)
				}
			})
			waitJitter = old
			synctest.Test(t, func(t *testing.T) {
				l := newWaitLimiter(t, p)
				start := time.Now()
				var mu sync.Mutex
				var got []time.Duration
				var wg sync.WaitGroup
				for range waiters {
					wg.Go(func() {
						_, err := Wait(context.Background(), l, "k", 1)
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							t.Error(err)
						}
						got = append(got, time.Since(start))
					})
				}
				wg.Wait()
				slices.Sort(got)
				for i := range got {
					if got[i] < earliest[i] {
						t.Fatalf("unit %d taken at %v, before the policy allows it (%v)", i+1, got[i], earliest[i])
					}
				}
				if last, bound := got[waiters-1], earliest[waiters-1]+p.Window; last > bound {
					t.Errorf("last waiter returned at %v, want by %v", last, bound)
				}
				t.Logf("returns %v (one caller alone: %v)", got, earliest)
			})
		})
	}
}

// Workers in a loop on one token bucket for 10s: together they get exactly
// what the policy allows in the span (the burst, then one unit every
// 100ms: the token due at 10s is taken before 10.1s, when the next is
// due), and each gets its share: the jitter shrinking with the denials
// makes them take turns.
func TestWaitWorkersShare(t *testing.T) {
	const (
		workers = 5
		span    = 10 * time.Second
	)
	synctest.Test(t, func(t *testing.T) {
		l := newWaitLimiter(t, Policy{Limit: 10, Window: time.Second, Burst: 5})
		start := time.Now()
		var mu sync.Mutex
		var times []time.Duration
		per := make([]int, workers)
		var maxWait time.Duration
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for {
					t0 := time.Now()
					if _, err := Wait(context.Background(), l, "k", 1); err != nil {
						t.Error(err)
						return
					}
					at := time.Since(start)
					if at >= span+ms(100) {
						return
					}
					mu.Lock()
					times = append(times, at)
					per[w]++
					maxWait = max(maxWait, time.Since(t0))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// 5 at 0, then tokens at 100ms, 200ms, ..., 10s.
		if want := 5 + 100; len(times) != want {
			t.Errorf("%d units taken in %v, want %d", len(times), span, want)
		}
		for w, n := range per {
			if n < len(times)/workers/3 {
				t.Errorf("worker %d took %d units of %d", w, n, len(times))
			}
		}
		// 5 workers, one unit every 100ms: a fair turn is 500ms. In 1,500
		// runs the longest wait was 3.3s (6.3s when the jitter does not
		// shrink with the denials), the median run's 1.5s (2.3s).
		if maxWait > 5*time.Second {
			t.Errorf("longest wait %v", maxWait)
		}
		t.Logf("per worker %v, longest wait %v", per, maxWait)
	})
}

// A worker that takes one unit before each call to an API allowed 3 calls
// a minute: the first three go at once; the fourth would have to wait
// 20s, longer than the call's deadline allows, so Wait says so at once
// instead of sleeping until the deadline.
func ExampleWait() {
	limiter, err := New(Policy{Limit: 3, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 4 {
		d, err := Wait(ctx, limiter, "api.example.com", 1)
		if err != nil {
			fmt.Printf("call %d: deadline: %v\n", i+1, errors.Is(err, context.DeadlineExceeded))
			break
		}
		fmt.Printf("call %d: %d left\n", i+1, d.Remaining)
	}
	// Output:
	// call 1: 2 left
	// call 2: 1 left
	// call 3: 0 left
	// call 4: deadline: true
}
