package core

import (
	"sync/atomic"
	"time"
)

// Clock tells the time. A limiter reads its Clock once per decision.
//
// Implementations must be safe for concurrent use. The default clock is the
// system clock; tests and simulations inject a [ManualClock] with [WithClock].
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// SystemClock is the wall clock of the machine. The memory limiter measures
// elapsed time on it monotonically (Go's monotonic clock reading), so a wall
// clock step made by NTP or an operator does not refill or drain any bucket.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to, for tests, examples and
// simulations. It is safe for concurrent use: any goroutine may read it while
// another advances it.
//
// The zero value is not usable; create one with [NewManualClock].
type ManualClock struct {
	ns  atomic.Int64 // Unix nanoseconds
	loc *time.Location
}

// NewManualClock returns a ManualClock that reads t until it is moved.
// Times are kept with nanosecond precision between 1678 and 2262 (the range of
// [time.Time.UnixNano]); the location of t is kept for the times it returns.
func NewManualClock(t time.Time) *ManualClock {
	c := &ManualClock{loc: t.Location()}
	c.ns.Store(t.UnixNano())
	return c
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time { return time.Unix(0, c.ns.Load()).In(c.loc) }

// unixNano returns Now().UnixNano() without building a time.Time; the memory
// limiter reads a ManualClock through it.
func (c *ManualClock) unixNano() int64 { return c.ns.Load() }

// nanoClock is a Clock that can report Unix nanoseconds directly.
type nanoClock interface {
	Clock
	unixNano() int64
}

// Advance moves the clock by d. A negative d moves it backwards, which
// limiters tolerate (no panic, no negative durations in a [Decision]).
func (c *ManualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Set moves the clock to t, forwards or backwards.
func (c *ManualClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }
