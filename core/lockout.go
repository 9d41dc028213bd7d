package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Blocking a key for a while after it breaks its limit ([Lockout],
// [Blocking]).

// Block describes the locks of a [Lockout]: the first lasts For; each one
// that comes while earlier ones are remembered lasts twice the one before,
// up to Max; each Forget of quiet forgets one lock. {For: time.Minute, Max:
// time.Hour} locks for 1, 2, 4, ... 32 minutes, then an hour, while the key
// keeps breaking its limit, and comes back down one step per two hours of
// quiet.
type Block struct {
	// Name names the lockout's limits, Name for the lock and Name+"-level"
	// for the locks remembered: on a shared store (Redis) two lockouts
	// need two names. It must be a valid [Policy] name; default "block".
	Name string
	// For is the first lock's time, at least a microsecond, in whole
	// microseconds.
	For time.Duration
	// Max is the longest lock, at least For and at most [MaxWindow]/2, in
	// whole microseconds; 0 means For: every lock lasts For.
	Max time.Duration
	// Forget is how long a key must keep quiet for one lock to be
	// forgotten; default 2·Max. Longer than [MaxWindow] over the number of
	// steps from For to Max is shortened to that.
	Forget time.Duration
}

// A Lockout locks keys for the times a [Block] gives. It keeps its state in
// two limiters that the constructor given to [NewLockout] builds, so that a
// lockout on the Redis store holds on every server:
//
//   - the lock, a token bucket of full ticks (full·tick = Max), is drained
//     to lock a key: the time until it is full again is the time left
//     locked, which a Peek of the whole bucket reports exactly as its
//     RetryAfter. A lock takes the whole bucket, which only a full one (no
//     lock) allows, and gives back all but its own ticks: of locks taken in
//     parallel one wins and the others find it. A bucket never takes longer
//     than Max to refill, so no lock outlasts Max, whatever happens in
//     between;
//   - the level, a token bucket of one unit per step refilled one unit per
//     Forget, gives a unit to each lock: the units missing are the locks
//     remembered, which set the next lock's time. A lock that comes less
//     than Forget after the one before remembers at least as many, so the
//     time never shortens while locks go on, and each Forget of quiet
//     forgets at most one. A ramp may repeat a step instead of doubling when
//     the refill crosses a whole unit, at most once per Forget.
//
// It is safe for concurrent use. The login guard's lockout is one
// (guard.WithLockout).
type Lockout struct {
	lock  Refunder
	level Limiter
	clock Clock
	steps []time.Duration // lock time by level: For·2^k, the last one Max
	tick  time.Duration   // one token's refill time; divides every step
	full  int64           // the lock bucket's capacity: Max/tick
}

// NewLockout returns the lockout of b, whose two limiters newLimiter
// builds: core.New for this process (with the same clock), redisstore.New
// for every server. The lock must be able to give units back ([As] finds a
// [Refunder]). clock is the clock those limiters decide by, which times
// the give-back of a lock's unused time; nil is [SystemClock].
//
// It fails if b is invalid (the error names the field), or if newLimiter
// fails, returns nil or a lock that cannot give units back.
func NewLockout(b Block, clock Clock, newLimiter func(Policy) (Limiter, error)) (*Lockout, error) {
	if clock == nil {
		clock = SystemClock{}
	}
	if newLimiter == nil {
		return nil, errors.New("core: NewLockout: a limiter constructor is required")
	}
	if b.Name == "" {
		b.Name = "block"
	}
	if b.Max == 0 {
		b.Max = b.For
	}
	bad := func(reason string) error {
		return fmt.Errorf("core: NewLockout: %s", reason)
	}
	switch {
	case b.For <= 0:
		return nil, bad(fmt.Sprintf("For %v: must be positive", b.For))
	case b.Max < b.For:
		return nil, bad(fmt.Sprintf("Max %v: must be at least For, %v", b.Max, b.For))
	case b.Max > MaxWindow/2:
		return nil, bad(fmt.Sprintf("Max %v: must be at most %v", b.Max, MaxWindow/2))
	case b.For%time.Microsecond != 0 || b.Max%time.Microsecond != 0:
		return nil, bad("For and Max must be whole microseconds")
	case b.Forget < 0:
		return nil, bad(fmt.Sprintf("Forget %v: must not be negative", b.Forget))
	}
	if b.Forget == 0 {
		b.Forget = 2 * b.Max
	}
	// The tick is the finest common divisor of For and Max down to a
	// millisecond, so that every lock is a whole number of ticks, exact to
	// the microsecond; a second, or their greatest common divisor, when
	// the bucket would otherwise pass MaxLimit tokens.
	f, m := uint64(b.For/time.Microsecond), uint64(b.Max/time.Microsecond)
	var tick uint64
	for _, t := range []uint64{uint64(time.Millisecond / time.Microsecond), uint64(time.Second / time.Microsecond), m} {
		if tick = gcd(gcd(f, m), t); m/tick <= MaxLimit {
			break
		}
	}
	if m/tick > MaxLimit {
		return nil, bad(fmt.Sprintf("For %v and Max %v: the lock times need a common divisor of at least %v", b.For, b.Max, b.Max/MaxLimit))
	}
	l := &Lockout{clock: clock, tick: time.Duration(tick) * time.Microsecond, full: int64(m / tick)}
	for d := b.For; d < b.Max; d *= 2 {
		l.steps = append(l.steps, d)
		if d > b.Max/2 {
			break
		}
	}
	l.steps = append(l.steps, b.Max)
	steps := time.Duration(len(l.steps))
	levelWindow := min(b.Forget, MaxWindow/steps) * steps
	levelWindow -= levelWindow % (steps * time.Microsecond) // Forget in whole µs
	build := func(p Policy) (Limiter, error) {
		lim, err := newLimiter(p)
		switch {
		case err != nil:
			return nil, fmt.Errorf("core: NewLockout: %s: %w", p.Name, err)
		case lim == nil:
			return nil, fmt.Errorf("core: NewLockout: %s: the constructor returned a nil limiter", p.Name)
		}
		return lim, nil
	}
	lockPolicy := Policy{Name: b.Name, Algorithm: TokenBucket, Limit: l.full, Window: b.Max}
	if err := lockPolicy.Validate(); err != nil {
		return nil, fmt.Errorf("core: NewLockout: %w", err)
	}
	var err error
	if l.level, err = build(Policy{Name: b.Name + "-level", Algorithm: TokenBucket, Limit: int64(len(l.steps)), Window: levelWindow}); err != nil {
		return nil, err
	}
	lock, err := build(lockPolicy)
	if err != nil {
		return nil, err
	}
	var ok bool
	if l.lock, ok = As[Refunder](lock); !ok {
		return nil, fmt.Errorf("core: NewLockout: %s: %T cannot give units back (Refunder)", b.Name, lock)
	}
	return l, nil
}

// Locked returns how long key stays locked: 0 when it is not.
func (l *Lockout) Locked(ctx context.Context, key string) (time.Duration, error) {
	d, err := l.lock.Peek(ctx, key, l.full)
	if err != nil {
		return 0, fmt.Errorf("core: lockout: %w", err)
	}
	return d.RetryAfter, nil
}

// Lock locks key, unless it is locked already, for the time its locks
// remembered call for, and remembers one more. It returns the time key
// stays locked and whether this call locked it: of calls in parallel one
// locks, and the others return the time left of its lock, false. On an
// error from the limiters after the lock is taken, key stays locked for
// at most Max.
func (l *Lockout) Lock(ctx context.Context, key string) (time.Duration, bool, error) {
	took := l.clock.Now()
	lk, err := l.lock.AllowN(ctx, key, l.full)
	if err != nil {
		return 0, false, fmt.Errorf("core: lockout: %w", err)
	}
	if !lk.Allowed {
		return lk.RetryAfter, false, nil
	}
	lv, err := l.level.AllowN(ctx, key, 1)
	if err != nil {
		// Best effort: no lock without its level.
		_ = l.lock.Refund(ctx, key, l.full, l.clock.Now().Sub(took))
		return 0, false, fmt.Errorf("core: lockout: level: %w", err)
	}
	k := len(l.steps) - 1 // the level's bucket is empty: at Max
	if lv.Allowed {
		k = min(max(int(lv.Limit-lv.Remaining-1), 0), k) // locks remembered before this one
	}
	// Give back all but the lock's time: n ticks left from now.
	if n := int64(l.steps[k] / l.tick); n < l.full {
		if err := l.lock.Refund(ctx, key, l.full-n, l.clock.Now().Sub(took)); err != nil {
			return l.steps[len(l.steps)-1], true, fmt.Errorf("core: lockout: %w", err) // locked for Max: never longer
		}
	}
	return l.steps[k], true, nil
}

// Unlock lifts key's lock, if any; the locks it remembers stay.
func (l *Lockout) Unlock(ctx context.Context, key string) error {
	if err := l.lock.Reset(ctx, key); err != nil {
		return fmt.Errorf("core: lockout: %w", err)
	}
	return nil
}

// Reset lifts key's lock and forgets its locks.
func (l *Lockout) Reset(ctx context.Context, key string) error {
	return errors.Join(l.Unlock(ctx, key), wrapLockout(l.level.Reset(ctx, key)))
}

func wrapLockout(err error) error {
	if err != nil {
		return fmt.Errorf("core: lockout: level: %w", err)
	}
	return nil
}

// Blocking is a [Limiter] that refuses a key for a while after its limiter
// denies it: each denial locks the key in a [Lockout] (for longer while
// denials repeat), and a locked key is refused without asking the limiter,
// counting nothing. A client that keeps knocking at its limit is turned
// away for minutes, as rate-limiter-flexible's blockDuration or a
// firewall's rules do, rather than let in at every refill. Create one with
// [NewBlocking].
//
// A refused request's Decision is the limiter's, with Allowed false,
// Remaining 0 and RetryAfter the longer of the limiter's and the lock's.
// A denial and the lock it takes are two steps: a request decided between
// them is decided by the limiter alone, as without a block.
//
// It is a [Wrapper] with the limiter's capabilities ([Refunder],
// [PolicyReporter], [LayeredLimiter]). It is safe for concurrent use.
type Blocking struct {
	inner   Limiter
	lockout *Lockout
	ref     Refunder
	pol     PolicyReporter
	lay     LayeredLimiter
}

var (
	_ Wrapper        = (*Blocking)(nil)
	_ Refunder       = (*Blocking)(nil)
	_ PolicyReporter = (*Blocking)(nil)
	_ LayeredLimiter = (*Blocking)(nil)
)

// NewBlocking returns l, refusing a key while lockout holds it and locking
// it at each denial. It fails if l or lockout is nil.
func NewBlocking(l Limiter, lockout *Lockout) (*Blocking, error) {
	if l == nil || lockout == nil {
		return nil, errors.New("core: NewBlocking: a limiter and a lockout are required")
	}
	b := &Blocking{inner: l, lockout: lockout}
	b.ref, _ = As[Refunder](l)
	b.pol, _ = As[PolicyReporter](l)
	b.lay, _ = As[LayeredLimiter](l)
	return b, nil
}

// AllowN refuses key while it is locked, counting nothing; otherwise it
// asks the limiter and, when the limiter denies, locks key.
func (b *Blocking) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	ld, err := b.decide(ctx, key, n, true, false)
	return ld.Decision, err
}

// Peek reports what AllowN would decide now, counting nothing and locking
// nothing.
func (b *Blocking) Peek(ctx context.Context, key string, n int64) (Decision, error) {
	ld, err := b.decide(ctx, key, n, false, false)
	return ld.Decision, err
}

// AllowLayers is AllowN with every layer's Decision (see
// [LayeredLimiter]); a limiter that is not layered counts as one layer.
func (b *Blocking) AllowLayers(ctx context.Context, key string, n int64) (LayeredDecision, error) {
	return b.decide(ctx, key, n, true, true)
}

// PeekLayers reports what AllowLayers would decide now, counting nothing.
func (b *Blocking) PeekLayers(ctx context.Context, key string, n int64) (LayeredDecision, error) {
	return b.decide(ctx, key, n, false, true)
}

// decide asks the lock, then the limiter (counting when count is set, its
// layers when layers is set and it has them), and locks key at a counted
// denial.
func (b *Blocking) decide(ctx context.Context, key string, n int64, count, layers bool) (LayeredDecision, error) {
	if key == "" {
		return LayeredDecision{Layer: -1}, checkRequest(key, n, n)
	}
	wait, err := b.lockout.Locked(ctx, key)
	if err != nil {
		return LayeredDecision{Layer: -1}, err
	}
	ld, err := b.ask(ctx, key, n, count && wait == 0, layers)
	if err != nil {
		return ld, err
	}
	if wait == 0 && count && !ld.Allowed {
		if wait, _, err = b.lockout.Lock(ctx, key); err != nil {
			return ld, err
		}
	}
	if wait > 0 {
		refuse(&ld.Decision, wait)
		if ld.Layer >= 0 && ld.Layer < len(ld.Layers) {
			refuse(&ld.Layers[ld.Layer], wait)
		}
	}
	return ld, nil
}

// refuse makes d a refusal for at least wait.
func refuse(d *Decision, wait time.Duration) {
	d.Allowed = false
	d.Remaining = 0
	d.Delay = 0
	d.RetryAfter = max(d.RetryAfter, wait)
}

// ask asks the limiter: AllowN when count is set, else Peek, through its
// layers when layers is set and it has them.
func (b *Blocking) ask(ctx context.Context, key string, n int64, count, layers bool) (LayeredDecision, error) {
	if layers && b.lay != nil {
		if count {
			return b.lay.AllowLayers(ctx, key, n)
		}
		return b.lay.PeekLayers(ctx, key, n)
	}
	var d Decision
	var err error
	if count {
		d, err = b.inner.AllowN(ctx, key, n)
	} else {
		d, err = b.inner.Peek(ctx, key, n)
	}
	if err != nil {
		return LayeredDecision{Decision: d, Layer: -1}, err
	}
	if !layers {
		return LayeredDecision{Decision: d}, nil
	}
	return MostRestrictive([]Decision{d}), nil
}

// Refund gives units back to the limiter (see [Refunder]); it returns
// [ErrNoRefund] when the limiter cannot. A lock stays.
func (b *Blocking) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	if b.ref == nil {
		return noRefund("blocking", b.inner)
	}
	return b.ref.Refund(ctx, key, n, elapsed)
}

// Reset forgets key in the limiter and in the lockout: its lock and the
// locks it remembers.
func (b *Blocking) Reset(ctx context.Context, key string) error {
	return errors.Join(b.inner.Reset(ctx, key), b.lockout.Reset(ctx, key))
}

// Unwrap returns the limiter.
func (b *Blocking) Unwrap() Limiter { return b.inner }

// Policy returns the limiter's policy, or the zero Policy when it has none
// (see [PolicyReporter]).
func (b *Blocking) Policy() Policy {
	if b.pol == nil {
		return Policy{}
	}
	return b.pol.Policy()
}
