package core

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// A CoarseClock moves on by ticks, never backwards, stays within a few
// resolutions of the system clock, and after Stop reads the system clock.
func TestCoarseClock(t *testing.T) {
	c := NewCoarseClock(time.Millisecond)
	defer c.Stop()
	if got := c.Resolution(); got != time.Millisecond {
		t.Fatalf("Resolution() = %v", got)
	}
	prev := c.Now()
	moved := false
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !moved {
		now := c.Now()
		if now.Before(prev) {
			t.Fatalf("went backwards: %v then %v", prev, now)
		}
		moved = now.After(prev)
		prev = now
		runtime.Gosched()
	}
	if !moved {
		t.Fatal("the clock did not move in 2 s")
	}
	if lag := time.Since(c.Now()); lag < 0 || lag > time.Second {
		t.Fatalf("lags the system clock by %v", lag)
	}
	c.Stop()
	c.Stop()
	// Stopped, it reads the system clock: it moves between two reads of
	// the system clock a microsecond apart.
	a := c.Now()
	for start := time.Now(); time.Since(start) < time.Microsecond; {
	}
	if b := c.Now(); !b.After(a) {
		t.Fatalf("after Stop: %v then %v, want the system clock", a, b)
	}
}

// A limiter on a CoarseClock decides; its figures are ns/op in
// BenchmarkManyKeys and benchmarks/.
func TestMemoryOnCoarseClock(t *testing.T) {
	c := NewCoarseClock(time.Millisecond)
	defer c.Stop()
	m, err := New(Policy{Limit: 2, Window: time.Hour}, WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, want := range []bool{true, true, false} {
		if d, _ := m.Allow(ctx, "k"); d.Allowed != want {
			t.Fatalf("request %d: %+v, want allowed %v", i+1, d, want)
		}
	}
}
