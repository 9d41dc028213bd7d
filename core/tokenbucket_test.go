package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestTokenBucketAgreesWithXTimeRate sends the same random traffic to the
// token bucket and to golang.org/x/time/rate's Limiter (float64 tokens) and
// requires the same answer for every request, except within a microsecond
// of a boundary, where float64 rounding may decide either way. Those
// requests are not sent to either limiter, so both keep the same state.
func TestTokenBucketAgreesWithXTimeRate(t *testing.T) {
	policies := []Policy{
		{Limit: 3, Window: time.Second},
		{Limit: 10, Window: time.Second, Burst: 20},
		{Limit: 100, Window: time.Minute},
		{Limit: 7, Window: time.Second, Burst: 11},
		{Limit: 1000, Window: time.Hour, Burst: 50},
		{Limit: 97, Window: time.Minute, Burst: 1},
	}
	ctx := context.Background()
	for _, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_000, 0))
			m, err := New(p, WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			xr := rate.NewLimiter(rate.Limit(float64(p.Limit)/p.Window.Seconds()), int(p.Capacity()))
			rng := rand.New(rand.NewPCG(1, uint64(p.Limit)))
			unit := int64(p.Window) / p.Limit
			var compared, skipped, allowed int
			var last Decision
			for range 20000 {
				step := 2*time.Microsecond + time.Duration(rng.Int64N(2*unit))
				if !last.Allowed && last.RetryAfter > 0 && rng.IntN(2) == 0 {
					// Just outside the microsecond either side of the
					// moment room frees up.
					step = last.RetryAfter + time.Duration(rng.IntN(3)-1)*(time.Microsecond+1)
				}
				clock.Advance(step)
				clock.Set(clock.Now().Truncate(time.Microsecond)) // the stores' resolution
				n := 1 + rng.Int64N(min(p.Capacity(), 3))
				now := clock.Now()
				clock.Set(now.Add(-time.Microsecond))
				early, _ := m.Peek(ctx, "k", n)
				clock.Set(now.Add(time.Microsecond))
				late, _ := m.Peek(ctx, "k", n)
				clock.Set(now)
				if early.Allowed != late.Allowed {
					skipped++
					continue
				}
				d, err := m.AllowN(ctx, "k", n)
				if err != nil {
					t.Fatal(err)
				}
				last = d
				if want := xr.AllowN(now, int(n)); d.Allowed != want {
					t.Fatalf("request %d at %v (n=%d): allowed=%v, x/time/rate says %v", compared, now, n, d.Allowed, want)
				}
				compared++
				if d.Allowed {
					allowed++
				}
			}
			t.Logf("%d requests agree (%d allowed), %d within 1µs of a boundary skipped", compared, allowed, skipped)
			if skipped > compared/5 || allowed < compared/10 || allowed > compared*9/10 {
				t.Fatalf("the traffic does not test much: %d compared, %d allowed, %d skipped", compared, allowed, skipped)
			}
		})
	}
}

// TestGCRAScale checks the time scale chosen for each policy: exact (T a
// whole number of 1/q ns) whenever q is within the cap, rounded up beyond.
func TestGCRAScale(t *testing.T) {
	tests := []struct {
		p     Policy
		q     uint64
		unit  int64
		exact bool
	}{
		{Policy{Limit: 100, Window: time.Minute}, 1, 600_000, true},
		{Policy{Limit: 3, Window: time.Second}, 3, 1_000_000, true},
		{Policy{Limit: 7, Window: time.Second, Burst: 11}, 7, 1_000_000, true},
		{Policy{Limit: 97, Window: time.Minute}, 64, 39_587_629, false},
		{Policy{Limit: MaxLimit, Window: 30 * 24 * time.Hour}, 1, 2592, true},
		{Policy{Limit: 999_999_937, Window: 30 * 24 * time.Hour}, 64, 165_889, false},
	}
	for _, tt := range tests {
		g := newGCRA(tt.p)
		if g.q != tt.q || g.unit != tt.unit || g.cap != g.unit*tt.p.Capacity() {
			t.Errorf("%v: q=%d unit=%d cap=%d, want q=%d unit=%d", tt.p, g.q, g.unit, g.cap, tt.q, tt.unit)
		}
		// T·L = W·q exactly when exact; otherwise T·L exceeds it by less than L.
		diff := uint64(g.unit)*uint64(tt.p.Limit) - uint64(tt.p.Window/time.Microsecond)*g.q
		if exact := diff == 0; exact != tt.exact || diff >= uint64(tt.p.Limit) {
			t.Errorf("%v: T·L - W·q = %d, exact=%v", tt.p, diff, tt.exact)
		}
		if g.cap > gcraMaxCap {
			t.Errorf("%v: cap %d above %d", tt.p, g.cap, int64(gcraMaxCap))
		}
	}
}

// TestGCRAStaleState checks that a state far in the past, or one that has
// wrapped around, reads as a full bucket.
func TestGCRAStaleState(t *testing.T) {
	g := newGCRA(Policy{Limit: 3, Window: time.Second})
	now := int64(1_800_000_000_000_000)
	for _, tat := range []uint64{
		g.scaled(now - int64(time.Hour)),
		g.scaled(now) + uint64(3*g.cap), // beyond any live state
		0, ^uint64(0),
	} {
		if d := g.backlog(tat, now); d != 0 {
			t.Errorf("backlog(%d) = %d, want 0 (full bucket)", tat, d)
		}
	}
	if d := g.backlog(g.scaled(now)+uint64(g.unit), now); d != g.unit {
		t.Errorf("backlog of one unit = %d, want %d", d, g.unit)
	}
}

func ExamplePolicy_String() {
	p := Policy{Name: "login", Algorithm: SlidingLog, Limit: 5, Window: 15 * time.Minute}
	fmt.Println(p)
	// Output: 5/15m algorithm=sliding-log name=login
}
