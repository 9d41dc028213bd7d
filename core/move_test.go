package core

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/memmove"
)

// A moved key decides in its new limiter exactly as a twin limiter given
// the same traffic and then SetPolicy(to's policy) does, at every step that
// follows, and its old limiter has forgotten it.
func TestMoveAsSetPolicy(t *testing.T) {
	algs := []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog}
	for _, alg := range algs {
		for _, to := range []struct {
			name   string
			limit  int64
			window time.Duration
		}{{"raised", 200, time.Minute}, {"lowered", 50, time.Minute}, {"longer", 100, 2 * time.Minute}, {"shorter", 100, 30 * time.Second}} {
			t.Run(alg.String()+"/"+to.name, func(t *testing.T) {
				clk := NewManualClock(setStart)
				base := Policy{Name: "base", Algorithm: alg, Limit: 100, Window: time.Minute}
				dstP := Policy{Name: "own", Algorithm: alg, Limit: to.limit, Window: to.window}
				from, twin := newSet(t, base, clk), newSet(t, base, clk)
				to := newSet(t, dstP, clk)
				// 80 units at three times, so the log has several entries
				// and the windows two counters.
				for _, step := range []struct {
					at time.Duration
					n  int64
				}{{0, 30}, {40 * time.Second, 20}, {30 * time.Second, 30}} {
					clk.Advance(step.at)
					for _, m := range []*Memory{from, twin} {
						if d, err := m.AllowN(context.Background(), "k", step.n); err != nil || !d.Allowed {
							t.Fatalf("AllowN(%d): %+v, %v", step.n, d, err)
						}
					}
				}
				if err := moveKey(from, to, "k"); err != nil {
					t.Fatal(err)
				}
				setPolicy(t, twin, dstP)
				if d := peek(t, from, "k"); d.Remaining != base.Limit {
					t.Errorf("the old limiter still holds the key: %d left", d.Remaining)
				}
				if st := from.Stats(); st.Keys != 0 {
					t.Errorf("the old limiter holds %d keys", st.Keys)
				}
				for i, at := range []time.Duration{0, time.Second, 15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute} {
					clk.Advance(at)
					for _, n := range []int64{1, 10} {
						got, err1 := to.Peek(context.Background(), "k", n)
						want, err2 := twin.Peek(context.Background(), "k", n)
						if err1 != nil || err2 != nil || got != want {
							t.Fatalf("step %d, Peek(%d): moved %+v, %v; SetPolicy %+v, %v", i, n, got, err1, want, err2)
						}
					}
					got, _ := to.AllowN(context.Background(), "k", 3)
					want, _ := twin.AllowN(context.Background(), "k", 3)
					if got != want {
						t.Fatalf("step %d, AllowN(3): moved %+v; SetPolicy %+v", i, got, want)
					}
				}
			})
		}
	}
}

// The worked example of SetPolicy, by a move: 80 of 100 used, given 200,
// has 120 left; and moved back, 20 of 100.
func TestMoveCarries(t *testing.T) {
	clk := NewManualClock(setStart)
	base := newSet(t, Policy{Name: "base", Algorithm: FixedWindow, Limit: 100, Window: time.Minute}, clk)
	own := newSet(t, Policy{Name: "own", Algorithm: FixedWindow, Limit: 200, Window: time.Minute}, clk)
	spend(t, base, "k", 80)
	move := memmove.Move.(func(from, to *Memory, key string) error)
	if err := move(base, own, "k"); err != nil {
		t.Fatal(err)
	}
	if d := peek(t, own, "k"); d.Remaining != 120 {
		t.Errorf("moved to 200: %d left, want 120", d.Remaining)
	}
	spend(t, own, "k", 100)
	if err := move(own, base, "k"); err != nil {
		t.Fatal(err)
	}
	if d := peek(t, base, "k"); d.Allowed || d.Remaining != 0 {
		t.Errorf("moved back to 100 after 180: %+v, want denied, 0 left", d)
	}
	// A key the source does not hold moves nothing, and leaves the
	// destination as it is.
	if err := move(own, base, "k"); err != nil {
		t.Fatal(err)
	}
	if d := peek(t, base, "k"); d.Allowed {
		t.Errorf("an empty move reset the destination: %+v", d)
	}
}

// When the destination already holds the key, it keeps the state that
// holds more units: a move never gives more room than either had.
func TestMoveKeepsMore(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := NewManualClock(setStart)
			p := Policy{Name: "p", Algorithm: alg, Limit: 100, Window: time.Minute}
			a, b := newSet(t, p, clk), newSet(t, p, clk)
			spend(t, a, "k", 30)
			spend(t, b, "k", 60)
			if err := moveKey(a, b, "k"); err != nil {
				t.Fatal(err)
			}
			if d := peek(t, b, "k"); d.Remaining != 40 {
				t.Errorf("kept %d left, want 40 (the destination's 60 used)", d.Remaining)
			}
			spend(t, a, "k", 90)
			if err := moveKey(a, b, "k"); err != nil {
				t.Fatal(err)
			}
			if d := peek(t, b, "k"); d.Remaining != 10 {
				t.Errorf("kept %d left, want 10 (the source's 90 used)", d.Remaining)
			}
			if st := a.Stats(); st.Keys != 0 {
				t.Errorf("the source holds %d keys", st.Keys)
			}
		})
	}
}

func TestMoveErrors(t *testing.T) {
	clk := NewManualClock(setStart)
	tb := newSet(t, Policy{Name: "tb", Limit: 10, Window: time.Minute}, clk)
	lb := newSet(t, Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 10, Window: time.Minute}, clk)
	spend(t, tb, "k", 5)
	for _, tc := range []struct {
		name     string
		from, to *Memory
		key      string
		want     error
	}{
		{"empty key", tb, lb, "", ErrEmptyKey},
		{"same limiter", tb, tb, "k", nil},
		{"nil", tb, nil, "k", nil},
		{"two algorithms", tb, lb, "k", nil},
	} {
		err := moveKey(tc.from, tc.to, tc.key)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want an error (%v)", tc.name, err, tc.want)
		}
	}
	if d := peek(t, tb, "k"); d.Remaining != 5 {
		t.Errorf("a failed move changed the source: %d left, want 5", d.Remaining)
	}
}

// Moves race with decisions on both limiters (lock-free ones included) and
// with each other: nothing deadlocks, and no admitted unit is lost beyond
// the key's two states, one of which each move keeps.
func TestMoveUnderTraffic(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, FixedWindow, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := NewManualClock(setStart)
			p := Policy{Name: "p", Algorithm: alg, Limit: 1000, Window: time.Hour}
			a, b := newSet(t, p, clk), newSet(t, p, clk)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, m := range []*Memory{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range 500 {
						if _, err := m.Allow(context.Background(), "k"); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range 200 {
					from, to := a, b
					if i%2 == 1 {
						from, to = b, a
					}
					if err := moveKey(from, to, "k"); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			close(start)
			wg.Wait()
			// The key was admitted 1000 times in all; what the two limiters
			// hold together is at most that (a move keeps one of two
			// states) and each one's at least what it was last given.
			da, db := peek(t, a, "k"), peek(t, b, "k")
			used := (1000 - da.Remaining) + (1000 - db.Remaining)
			if used > 1000 || used < 1 {
				t.Errorf("the limiters hold %d units together, want 1 to 1000", used)
			}
		})
	}
}
