package core

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// CoarseClock is a [Clock] that reads the system clock once per resolution
// instead of once per decision. Its readings lag the system clock by up to
// the resolution, and never go backwards: like [SystemClock] it counts
// elapsed time on the monotonic clock.
//
// A limiter on it decides as if every request arrived at the last tick:
// never more than the policy allows, at most one resolution's worth of
// refill stricter. Choose a resolution well below the time one unit takes to
// refill (a millisecond for 100 per minute).
//
// One CoarseClock serves any number of limiters ([WithClock]) with one
// ticker goroutine. [CoarseClock.Stop] ends it, and so does the garbage
// collector once the clock is unreachable. A CoarseClock is safe for
// concurrent use; create one with [NewCoarseClock].
type CoarseClock struct {
	// This is the cached time nginx and fiber decide on. Readings also lag by
	// however long the Go scheduler delays the ticker. Under it a bucket refills
	// and a window ends up to one resolution late. The default clock stays
	// SystemClock, which is exact.

	c *coarse
}

// coarse is the part of a CoarseClock its ticker reads, so that the
// CoarseClock itself can become unreachable while the ticker runs.
type coarse struct {
	ns      atomic.Int64 // Unix nanoseconds at the last tick
	stopped atomic.Bool
	base    time.Time // system clock reading at creation, monotonic
	baseNs  int64     // base as Unix nanoseconds
	res     time.Duration
	stop    chan struct{}
	once    sync.Once
}

var _ nanoClock = (*CoarseClock)(nil)

// NewCoarseClock returns a clock that reads the system clock every
// resolution (at least a microsecond) and reports the last reading until
// the next. It starts one ticker goroutine, which [CoarseClock.Stop] ends.
func NewCoarseClock(resolution time.Duration) *CoarseClock {
	resolution = max(resolution, time.Microsecond)
	c := &coarse{base: time.Now(), res: resolution, stop: make(chan struct{})}
	c.baseNs = c.base.UnixNano()
	c.ns.Store(c.baseNs)
	go c.tick()
	cc := &CoarseClock{c}
	runtime.AddCleanup(cc, func(c *coarse) { c.halt() }, c)
	return cc
}

func (c *coarse) tick() {
	t := time.NewTicker(c.res)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.ns.Store(c.baseNs + int64(time.Since(c.base)))
		case <-c.stop:
			return
		}
	}
}

func (c *coarse) halt() {
	c.once.Do(func() {
		c.stopped.Store(true)
		close(c.stop)
	})
}

// Now returns the time of the last tick (after Stop, the system clock's
// time), with a monotonic reading.
func (c *CoarseClock) Now() time.Time {
	return c.c.base.Add(time.Duration(c.unixNano() - c.c.baseNs))
}

// unixNano returns Now().UnixNano() without building a time.Time; the memory
// limiter reads a CoarseClock through it.
func (c *CoarseClock) unixNano() int64 {
	k := c.c
	if k.stopped.Load() {
		return k.baseNs + int64(time.Since(k.base))
	}
	return k.ns.Load()
}

// Resolution returns how often the clock reads the system clock.
func (c *CoarseClock) Resolution() time.Duration { return c.c.res }

// Stop ends the clock's ticker. The clock then reads the system clock on
// every call, exactly, so limiters that still use it keep working. Stop may
// be called more than once.
func (c *CoarseClock) Stop() { c.c.halt() }
