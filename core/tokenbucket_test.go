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
		g := newBucket(tt.p)
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

// TestGCRAStaleState checks how a state is read: one far in the past (or
// wrapped around) as a full bucket, one ahead of now by more than the
// capacity (the clock stepped back) as its true backlog, capped at 2^52.
func TestGCRAStaleState(t *testing.T) {
	g := newBucket(Policy{Limit: 3, Window: time.Second})
	now := int64(1_800_000_000_000_000)
	for _, tt := range []struct {
		tat  uint64
		want int64
	}{
		{g.scaled(now - int64(time.Hour)), 0},
		{g.scaled(now), 0},
		{^uint64(0), 0},
		{0, 0},
		{g.scaled(now) + uint64(g.unit), g.unit},
		{g.scaled(now) + uint64(3*g.cap), 3 * g.cap}, // the clock stepped back
		{g.scaled(now) + gcraMaxBacklog, gcraMaxBacklog},
		{g.scaled(now) + gcraMaxBacklog + 1, gcraMaxBacklog},
		{g.scaled(now) + 1<<62, gcraMaxBacklog},
	} {
		if d := g.backlog(tt.tat, now); d != tt.want {
			t.Errorf("backlog(now + %d) = %d, want %d", int64(tt.tat-g.scaled(now)), d, tt.want)
		}
	}
}

// TestGCRAClockBack: 10 a minute, burst 10; 20 requests at once (10
// allowed), then the clock is set 5 minutes back and a request comes every
// second for 40 s. Reading the unexplained future state as a full bucket
// allowed 16 of them; the key must wait until the clock catches up, as
// golang.org/x/time/rate does, and never allow more than it.
func TestGCRAClockBack(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			p := Policy{Algorithm: alg, Limit: 10, Window: time.Minute, Burst: 10}
			t0 := time.Unix(1_800_000_000, 0)
			clock := NewManualClock(t0)
			m, err := New(p, WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			xr := rate.NewLimiter(rate.Every(6*time.Second), 10)
			ctx := context.Background()
			var got, want int
			step := func(now time.Time) {
				clock.Set(now)
				d, err := m.AllowN(ctx, "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				x := xr.AllowN(now, 1)
				if d.Allowed {
					got++
				}
				if x {
					want++
				}
				if d.Allowed && !x {
					t.Errorf("at %v: allowed, x/time/rate denies", now.Sub(t0))
				}
			}
			for range 20 {
				step(t0)
			}
			if got != 10 || want != 10 {
				t.Fatalf("at t0: %d allowed (x/time/rate %d), want 10", got, want)
			}
			got, want = 0, 0
			back := t0.Add(-5 * time.Minute)
			for i := range 40 {
				step(back.Add(time.Duration(i) * time.Second))
			}
			if got != 0 || got > want {
				t.Fatalf("40 s after the clock stepped back 5 min: %d allowed (x/time/rate %d), want 0", got, want)
			}
			// And exactly when the clock has caught up: t0 + 6 s.
			clock.Set(back.Add(40 * time.Second))
			d, _ := m.Peek(ctx, "k", 1)
			if want := t0.Add(6 * time.Second).Sub(back.Add(40 * time.Second)); d.Allowed || d.RetryAfter != want {
				t.Fatalf("Peek after the 40 s: %+v, want denied with RetryAfter %v", d, want)
			}
		})
	}
}

// TestGCRAClockBackPartlySpent: a clock that steps back 10 minutes and
// forth again, under traffic that keeps the bucket partly spent. A bucket
// waits for the clock to catch up; x/time/rate keeps its tokens and
// refills from the earlier time. At no point in the trace has ratekit
// allowed more than x/time/rate.
func TestGCRAClockBackPartlySpent(t *testing.T) {
	p := Policy{Limit: 10, Window: time.Minute, Burst: 10}
	t0 := time.Unix(1_800_000_000, 0)
	clock := NewManualClock(t0)
	m, err := New(p, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	xr := rate.NewLimiter(rate.Every(6*time.Second), 10)
	ctx := context.Background()
	var got, want int
	for i := range 200 {
		now := t0.Add(time.Duration(i) * time.Second)
		if i >= 100 {
			now = now.Add(-10 * time.Minute) // stepped back at request 100
		}
		if i%7 == 0 {
			now = t0.Add(time.Duration(i) * time.Second) // and forth again
		}
		clock.Set(now)
		d, err := m.AllowN(ctx, "k", 1+int64(i%3))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			got++
		}
		if xr.AllowN(now, 1+i%3) {
			want++
		}
		if got > want {
			t.Fatalf("request %d at %v: ratekit allowed %d, x/time/rate %d", i, now.Sub(t0), got, want)
		}
	}
}

func ExamplePolicy_String() {
	p := Policy{Name: "login", Algorithm: SlidingLog, Limit: 5, Window: 15 * time.Minute}
	fmt.Println(p)
	// Output: 5/15m algorithm=sliding-log name=login
}
