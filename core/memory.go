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
// for a window, with no background goroutine, so memory follows the keys in
// use. A new key in a full shard takes a fresh entry's place, which changes
// no decision, or else evicts the entry holding the fewest units, so keys
// minted one request each go before a key at its limit; [Memory.Stats] counts
// those evictions, the only way a Memory forgets usage.
//
// A key's check-and-update is atomic; requests for different keys rarely
// wait for each other. A Memory is safe for concurrent use. Its methods
// ignore ctx.
type Memory struct {
	// The table that holds the keys, and its figures: store.go and
	// docs/algorithms.md.

	policy Policy
	clock  Clock
	base   time.Time // clock reading at construction
	baseNs int64     // base as Unix nanoseconds
	system bool      // clock is SystemClock: read only its monotonic clock
	nanos  nanoClock // clock as a nanoClock, or nil
	cost   int64     // largest cost ever allowed
	id     uint64    // unique per Memory: the order in which a Layered locks
	eng    engine
}

// memoryIDs numbers Memory limiters, so that every [Layered] limiter locks
// the shards of several Memory limiters in the same global order.
var memoryIDs atomic.Uint64

var _ Limiter = (*Memory)(nil)

// engine is a store for one algorithm, with its state type erased.
type engine interface {
	decide(key string, now, n int64, commit bool) verdict
	ref(key string) keyRef
	decideLocked(r keyRef, now, n int64, commit bool) verdict
	reset(key string)
	stats() Stats
	// refund gives back n units of key counted at since or later (Unix
	// µs), at now, under the key's shard lock. See refund.go.
	refund(key string, now, since, n int64)
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
	m := &Memory{policy: p, clock: o.clock, cost: p.Capacity(), id: memoryIDs.Add(1)}
	m.base = o.clock.Now()
	m.baseNs = m.base.UnixNano()
	_, m.system = o.clock.(SystemClock)
	m.nanos, _ = o.clock.(nanoClock)
	limit, window := p.Limit, int64(p.Window/time.Microsecond)
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		// A bucket is swept once it has been full for the time it takes
		// to fill (B·W/L, at most W): its state tells no more than that.
		idle := int64(min(uint64(window), mulDivFloor(uint64(window), uint64(p.Capacity()), uint64(limit))))
		m.eng = newStore[uint64](newGCRA(p), o.maxKeys, idle)
	case FixedWindow:
		m.eng = newStore[fwState](&fixedWindow{limit: limit, window: window}, o.maxKeys, window)
	case SlidingWindow:
		m.eng = newStore[swState](&slidingWindow{limit: limit, window: window}, o.maxKeys, window)
	case SlidingLog:
		m.eng = newStore[logRef](&slidingLog{limit: limit, window: window, logs: newLogArena(o.maxKeys)}, o.maxKeys, window)
	}
	return m, nil
}

// now reads the clock once and returns Unix microseconds, rounded down.
func (m *Memory) now() int64 { return micros(m.nowNs()) }

// nowNs reads the clock once and returns Unix nanoseconds. Elapsed time is
// measured from the reading taken at construction, monotonically when the
// clock provides a monotonic reading (the system clock does).
func (m *Memory) nowNs() int64 {
	switch {
	case m.system:
		// time.Since reads only the monotonic clock: half the cost of
		// time.Now, which reads the wall clock too.
		return m.baseNs + int64(time.Since(m.base))
	case m.nanos != nil:
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

// Policy returns the policy the limiter enforces.
func (m *Memory) Policy() Policy { return m.policy }

// Allow is shorthand for AllowN(ctx, key, 1).
func (m *Memory) Allow(ctx context.Context, key string) (Decision, error) {
	return m.AllowN(ctx, key, 1)
}

// AllowN reports whether n units may be spent for key now and, if so, counts
// them; a denied request counts nothing. See [Limiter].
func (m *Memory) AllowN(_ context.Context, key string, n int64) (d Decision, err error) {
	err = m.decideInto(&d, key, n, true, m.now())
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
	err = m.decideInto(&d, key, n, false, m.now())
	return d, err
}

// decideInto fills d with the decision for n units of key at now (Unix
// microseconds), counting them if commit is set and they are allowed. It
// fills the caller's result in place: returning a Decision through a
// function that returns another one's costs a copy of its 13 words.
func (m *Memory) decideInto(d *Decision, key string, n int64, commit bool, now int64) error {
	d.Limit, d.Policy = m.policy.Limit, m.policy
	if key == "" || n <= 0 || n > m.cost {
		return checkRequest(key, n, m.cost)
	}
	setVerdict(d, m.eng.decide(key, now, n, commit))
	return nil
}

// decision returns the Decision of verdict v under the limiter's policy.
func (m *Memory) decision(v verdict) Decision {
	d := Decision{Limit: m.policy.Limit, Policy: m.policy}
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
