package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

// lockout is the growing lock of [WithLockout], kept in two limiters so
// that it works on any store:
//
//   - level, a sliding log of Limit len(steps) over the memory period,
//     holds one entry per lockout: the lockouts so far are Limit less
//     Remaining, and the log forgets each one after the memory period;
//   - lock, a token bucket of full tokens of tick each (full·tick = max),
//     is drained to lock the account: the time until it is full again is
//     the time left locked, which a Peek of full tokens reports exactly as
//     its RetryAfter. A bucket never takes longer than max to refill, so
//     no lock outlasts max, whatever races happen.
type lockout struct {
	level core.Limiter
	lock  core.Limiter
	steps []time.Duration // lock time by level: base·2^k, the last one max
	tick  time.Duration   // one token's refill time; divides every step
	full  int64           // the bucket's capacity: max/tick
}

func newLockout(base, maxLock time.Duration, build func(what string, p, def core.Policy, name string) (core.Limiter, error)) (*lockout, error) {
	bad := func(reason string) error {
		return fmt.Errorf("guard: WithLockout(%v, %v): %s", base, maxLock, reason)
	}
	switch {
	case base <= 0:
		return nil, bad("base must be positive")
	case maxLock < base:
		return nil, bad("maxLock must be at least base")
	case maxLock > core.MaxWindow/2:
		return nil, bad(fmt.Sprintf("maxLock must be at most %v", core.MaxWindow/2))
	case base%time.Microsecond != 0 || maxLock%time.Microsecond != 0:
		return nil, bad("base and maxLock must be whole microseconds")
	}
	// The tick is the finest common divisor of base and maxLock down to a
	// millisecond, for locks exact to the microsecond even when one extends
	// another; a second, or their greatest common divisor, when the bucket
	// would otherwise pass core.MaxLimit tokens.
	b, m := uint64(base/time.Microsecond), uint64(maxLock/time.Microsecond)
	var tick uint64
	for _, t := range []uint64{uint64(time.Millisecond / time.Microsecond), uint64(time.Second / time.Microsecond), m} {
		if tick = gcd(gcd(b, m), t); m/tick <= core.MaxLimit {
			break
		}
	}
	if m/tick > core.MaxLimit {
		return nil, bad(fmt.Sprintf("base and maxLock need a common divisor of at least %v", maxLock/core.MaxLimit))
	}
	l := &lockout{tick: time.Duration(tick) * time.Microsecond, full: int64(m / tick)}
	for d := base; d < maxLock; d *= 2 {
		l.steps = append(l.steps, d)
		if d > maxLock/2 {
			break
		}
	}
	l.steps = append(l.steps, maxLock)
	memory := 2 * maxLock
	if memory < 24*time.Hour {
		memory = 24 * time.Hour
	}
	var err error
	levelPolicy := core.Policy{Name: levelName, Algorithm: core.SlidingLog, Limit: int64(len(l.steps)), Window: memory}
	if l.level, err = build("lockout level", levelPolicy, levelPolicy, levelName); err != nil {
		return nil, err
	}
	lockPolicy := core.Policy{Name: lockName, Algorithm: core.TokenBucket, Limit: l.full, Window: maxLock}
	if l.lock, err = build("lockout", lockPolicy, lockPolicy, lockName); err != nil {
		return nil, err
	}
	return l, nil
}

// start locks the account of key for the time its level calls for, and
// raises the level. A lock already running that is as long stays as it
// is; a shorter one is extended (exactly, up to one tick when it does not
// end on a tick).
func (l *lockout) start(ctx context.Context, key string) error {
	lv, err := l.level.AllowN(ctx, key, 1)
	if err != nil {
		return err
	}
	k := len(l.steps) - 1 // the log is full: the level is at max
	if lv.Allowed {
		k = min(max(int(lv.Limit-lv.Remaining-1), 0), k) // lockouts before this one
	}
	want := l.steps[k]
	cur, err := l.lock.Peek(ctx, key, l.full)
	if err != nil {
		return err
	}
	var left time.Duration
	if !cur.Allowed {
		left = cur.RetryAfter
	}
	if left >= want {
		return nil
	}
	n := int64((want - left + l.tick - 1) / l.tick)
	n = min(n, int64((time.Duration(l.full)*l.tick-left)/l.tick)) // what the bucket holds
	if n <= 0 {
		return nil
	}
	_, err = l.lock.AllowN(ctx, key, n)
	return err
}

// gcd returns the greatest common divisor of a and b (a when b is 0).
func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
