package core

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/internal/memtime"
)

// DefaultMaxKeys is the number of keys a [Memory] limiter holds unless
// [WithMaxKeys] says otherwise: at most about 50 MB for the token bucket
// (50 bytes per key at a million keys, 67 for the windows).
const DefaultMaxKeys = 1 << 20

// Memory is the in-process [Limiter]: one [Policy] enforced over any number
// of keys held in memory, with the decisions the Redis store makes. Create
// one with [New]; the zero value is not usable.
//
// Per key it keeps the algorithm's state: one int64 for the token and leaky
// buckets, two for the fixed window, an int64 and two counters for the
// sliding window, and for the sliding log one entry per distinct request
// time in the last window. Keys are held as seeded 128-bit hashes, never as
// the caller's strings: at a million keys, about 50 bytes a key for the
// buckets and 67 for the windows.
//
// The number of keys never exceeds [WithMaxKeys] (default [DefaultMaxKeys]).
// New keys sweep keys that have been fresh (a full bucket, an empty window)
// for a window and at least a second, with no background goroutine, so memory follows the keys in
// use. A new key in a full shard takes a fresh entry's place, which changes
// no decision, or else evicts the entry holding the fewest units, so keys
// minted one request each go before a key at its limit; [Memory.Stats] counts
// those evictions, the only way a Memory forgets usage.
//
// [Memory.SetPolicy] changes the policy while it runs, keeping every key's
// usage as its algorithm defines it.
//
// A key's check-and-update is atomic; requests for different keys rarely
// wait for each other. A Memory is safe for concurrent use. Its methods
// ignore ctx.
type Memory struct {
	// The table that holds the keys, and its figures: store.go and
	// docs/algorithms.md.

	set    atomic.Pointer[settings] // the policy in force: see SetPolicy
	clock  Clock
	base   time.Time // clock reading at construction
	baseNs int64     // base as Unix nanoseconds
	system bool      // clock is SystemClock: read only its monotonic clock
	nanos  nanoClock // clock as a nanoClock, or nil
	id     uint64    // unique per Memory: the order in which a Layered locks
	eng    engine
	// eng, for the token and leaky buckets, whose decisions take a path
	// of their own (bucketpath.go); nil for the other algorithms.
	buckets *bucketStore
}

// memoryIDs numbers Memory limiters, so that every [Layered] limiter locks
// the shards of several Memory limiters in the same global order.
var memoryIDs atomic.Uint64

var _ Limiter = (*Memory)(nil)

// settings are what a [Memory] makes of its policy, published as a whole
// and never changed: [Memory.SetPolicy] publishes new ones.
type settings struct {
	policy Policy
	cost   int64     // the largest cost allowed: the policy's capacity
	window int64     // the policy's Window in µs
	idle   int64     // µs an entry must have been fresh before a new key sweeps it
	bucket bucket    // the token and leaky buckets' arithmetic; zero for the others
	cal    *calendar // the fixed window's calendar periods; nil for epoch windows
}

// newSettings returns the settings of a valid policy.
func newSettings(p Policy) *settings {
	s := &settings{policy: p, cost: p.Capacity(), window: int64(p.Window / time.Microsecond), cal: newCalendar(p)}
	s.idle = s.window
	if p.Algorithm == TokenBucket || p.Algorithm == LeakyBucket {
		// A bucket is swept once it has been full for the time it takes
		// to fill (B·W/L, at most W): its state tells no more than that.
		s.idle = int64(min(uint64(s.window), mulDivFloor(uint64(s.window), uint64(s.cost), uint64(p.Limit))))
		s.bucket = newBucket(p)
	}
	// And never before minIdle: a clock that steps back (a core.Clock of
	// the caller's, a ManualClock) by up to minIdle finds a key's state as
	// it left it, however short the window, as redisstore's keys outlive
	// their state by its expiry margin.
	s.idle = max(s.idle, minIdle)
	return s
}

// tooCostly returns the verdict of a cost n above the capacity, which
// decides nothing: retryAfter -1, n in remaining.
func tooCostly(n int64) verdict { return verdict{remaining: n, retryAfter: -1} }

// engine is a store for one algorithm, with its state type erased.
type engine interface {
	// decide decides for key and returns the settings it decided by;
	// for a cost above their capacity it decides nothing and returns
	// tooCostly(n).
	decide(key string, now, n int64, commit bool) (verdict, *settings)
	// decideAtMost counts as many of n units as fit, at most the
	// capacity, and returns how many.
	decideAtMost(key string, now, n int64) (verdict, int64, *settings)
	ref(key string) keyRef
	decideLocked(r keyRef, now, n int64, commit bool) verdict
	reset(key string)
	stats() Stats
	// refund gives back n units of key counted at since or later (Unix
	// µs), at now, under the key's shard lock. See refund.go.
	refund(key string, now, since, n int64)
	// charge counts n more units for key at now, unconditionally, under
	// the key's shard lock, adding the key if it is not held. See
	// settle.go.
	charge(key string, now, n int64)
	// retune carries every key's state to the settings to and makes them
	// the store's, under every shard's lock, at the time clock returns
	// once they are all held. See SetPolicy.
	retune(to *settings, clock func() int64)
	// moveLocked moves the state of the key at r to dst, a store of the
	// same algorithm, its key at dr, converted to dst's settings, at now;
	// the caller holds both keys' shard locks. See package memmove.
	moveLocked(r keyRef, dst engine, dr keyRef, now int64)
}

// Stats describes what a [Memory] limiter holds.
type Stats struct {
	// Keys is the number of keys held now, fresh ones not yet dropped
	// included.
	Keys int
	// FreshDrops counts keys dropped because they had become fresh: no
	// information was lost.
	FreshDrops uint64
	// LossyEvictions counts keys evicted while still holding usage, because
	// the limiter was full. Each one may let its key spend again early; a
	// steadily growing count means the maximum number of keys is too small
	// for the traffic.
	LossyEvictions uint64
}

// Option configures a [Memory] limiter: [WithClock] or [WithMaxKeys].
type Option interface{ applyMemory(*options) }

type options struct {
	clock   Clock
	maxKeys int
}

// New returns an in-memory limiter that enforces p. It fails if p is invalid
// (the error names the field, see [Policy.Validate]) or an option is.
func New(p Policy, opts ...Option) (*Memory, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	o := options{clock: SystemClock{}, maxKeys: DefaultMaxKeys}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("core: New: option %d is nil", i+1)
		}
		opt.applyMemory(&o)
	}
	if o.clock == nil {
		return nil, fmt.Errorf("core: WithClock(nil): a clock is required")
	}
	if o.maxKeys < 1 {
		return nil, fmt.Errorf("core: WithMaxKeys(%d): must be at least 1", o.maxKeys)
	}
	m := &Memory{clock: o.clock, id: memoryIDs.Add(1)}
	set := newSettings(p)
	m.set.Store(set)
	m.base = o.clock.Now()
	m.baseNs = m.base.UnixNano()
	_, m.system = o.clock.(SystemClock)
	m.nanos, _ = o.clock.(nanoClock)
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		m.buckets = newStore[uint64](&gcra{set: &m.set}, o.maxKeys, &m.set)
		m.eng = m.buckets
	case FixedWindow:
		m.eng = newStore[fwState](&fixedWindow{limit: p.Limit, window: set.window, cal: set.cal}, o.maxKeys, &m.set)
	case SlidingWindow:
		m.eng = newStore[swState](&slidingWindow{limit: p.Limit, window: set.window}, o.maxKeys, &m.set)
	case SlidingLog:
		m.eng = newStore[logRef](&slidingLog{limit: p.Limit, window: set.window, logs: newLogArena(o.maxKeys)}, o.maxKeys, &m.set)
	}
	return m, nil
}

// now reads the clock once and returns Unix microseconds, rounded down.
func (m *Memory) now() int64 { return micros(m.nowNs()) }

// nowNs reads the clock once and returns Unix nanoseconds. Elapsed time is
// measured from the reading taken at construction, monotonically when the
// clock provides a monotonic reading (the system clock does).
func (m *Memory) nowNs() int64 {
	if m.system {
		// time.Since reads only the monotonic clock: half the cost of
		// time.Now, which reads the wall clock too. Small enough to be
		// inlined, for the system clock's sake.
		return m.baseNs + int64(time.Since(m.base))
	}
	return m.clockNs()
}

// clockNs is nowNs for a clock other than the system clock.
func (m *Memory) clockNs() int64 {
	if m.nanos != nil {
		return m.nanos.unixNano()
	}
	return m.baseNs + int64(m.clock.Now().Sub(m.base))
}

// micros converts Unix nanoseconds to microseconds, rounding down (before
// 1970 on a manual clock too, not towards zero).
func micros(ns int64) int64 {
	us := ns / 1000
	if ns%1000 < 0 {
		us--
	}
	return us
}

// Policy returns the policy the limiter enforces: the last one given to
// [Memory.SetPolicy], or else to [New].
func (m *Memory) Policy() Policy { return m.set.Load().policy }

// SetPolicy makes the limiter enforce p from now on, keeping every key's
// usage: a key that has used 80 of 100 and is given 200 has 120 left;
// lowered to 50, it is over (denied) until its usage has aged out to fit.
// Each algorithm carries its state over by its own definition, in integer
// arithmetic, rounding towards less room (docs/algorithms.md, "Changing a
// policy"):
//
//   - token and leaky bucket: the backlog's units carry, d' = ceil(d·T'/T)
//     in the new policy's time, and drain at the new rate;
//   - fixed window: the current window's count carries, into the new
//     window that holds now when the windows change (Window, Calendar or
//     Zone: between epoch and calendar windows too);
//   - sliding window: the counters carry when only Limit changes; when
//     Window changes, the estimate at now (rounded up) becomes the count
//     of the new window that holds now, the previous one 0;
//   - sliding log: its entries carry, and leave the new window as always.
//
// p must use the limiter's algorithm (to change algorithms, build a new
// limiter) and be valid (the error names the field, see
// [Policy.Validate]); its Name may change. On error nothing changes.
//
// The change is atomic: SetPolicy holds every shard's lock while it
// converts the states, so every decision that starts after it returns is
// made by p. A decision in flight when it is called may finish under the
// old policy, counted and reported by it: at most the requests in flight
// at that moment. Keys that were fresh stay fresh. SetPolicy to the policy
// in force changes no decision. It costs a pass over every key held, with
// requests waiting for it meanwhile; call it on reload, not per request.
// It is safe for concurrent use, with [Layered] limiters over m too.
func (m *Memory) SetPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	// The algorithm never changes, so reading it unlocked is safe.
	if a := m.Policy().Algorithm; p.Algorithm != a {
		return fmt.Errorf("core: SetPolicy: the limiter runs %v and the policy %v: build a new limiter to change the algorithm", a, p.Algorithm)
	}
	m.eng.retune(newSettings(p), m.now)
	return nil
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (m *Memory) Allow(ctx context.Context, key string) (Decision, error) {
	return m.AllowN(ctx, key, 1)
}

// AllowN reports whether n units may be spent for key now and, if so, counts
// them; a denied request counts nothing. See [Limiter].
func (m *Memory) AllowN(_ context.Context, key string, n int64) (d Decision, err error) {
	// Small enough to be inlined: a caller's d is then filled in place.
	err = m.decideInto(&d, key, n, true, readClock)
	return d, err
}

func init() {
	memtime.Allow = func(m *Memory, key string, n int64) (d Decision, now int64, err error) {
		now = m.nowNs()
		err = m.decideInto(&d, key, n, true, micros(now))
		return d, now, err
	}
	memtime.Now = (*Memory).nowNs
	memtime.System = func(m *Memory) bool { return m.system }
}

// Peek reports key's state as it is, and whether AllowN would allow n units
// now, counting nothing; see [Limiter].
func (m *Memory) Peek(_ context.Context, key string, n int64) (d Decision, err error) {
	err = m.decideInto(&d, key, n, false, readClock)
	return d, err
}

// decideEngine is decideInto for every algorithm but the buckets, and for
// bad arguments: through the engine, at now, or at the time the clock
// tells if now is readClock.
func (m *Memory) decideEngine(d *Decision, key string, n int64, commit bool, now int64) error {
	if now == readClock {
		now = m.now()
	}
	if key == "" || n <= 0 {
		set := m.set.Load()
		d.Limit, d.Policy = set.policy.Limit, set.policy
		return checkRequest(key, n, set.cost)
	}
	// The settings are the ones the decision read. Neither key nor n is
	// used past the call (a cost above the capacity comes back in the
	// verdict), which keeps them out of the stack.
	v, set := m.eng.decide(key, now, n, commit)
	d.Limit, d.Policy = set.policy.Limit, set.policy
	if v.retryAfter < 0 {
		return costTooHigh(v.remaining, set.cost)
	}
	setVerdict(d, v)
	return nil
}

// decision returns the Decision of verdict v under the limiter's policy,
// for a caller that holds a shard's lock (the policy cannot change).
func (m *Memory) decision(v verdict) Decision {
	set := m.set.Load()
	d := Decision{Limit: set.policy.Limit, Policy: set.policy}
	setVerdict(&d, v)
	return d
}

// setVerdict sets the fields of d that v decides.
func setVerdict(d *Decision, v verdict) {
	d.Allowed = v.allowed()
	d.Remaining = v.remaining
	d.RetryAfter = time.Duration(v.retryAfter) * time.Microsecond
	d.ResetAfter = time.Duration(v.resetAfter) * time.Microsecond
	d.Delay = time.Duration(v.delay) * time.Microsecond
}

// Reset forgets key. It fails only for an empty key.
func (m *Memory) Reset(_ context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("core: %w", ErrEmptyKey)
	}
	m.eng.reset(key)
	return nil
}

// Stats reports the keys held and the evictions so far. It locks each shard
// in turn, so it is cheap enough for a metrics scrape, not for every request.
func (m *Memory) Stats() Stats { return m.eng.stats() }

// minIdle is the least time, in µs, an entry must have been fresh before
// a new key sweeps it away (see makeRoom): a second, redisstore's default
// expiry margin.
const minIdle = 1_000_000
