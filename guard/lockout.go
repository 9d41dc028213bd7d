package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

// lockout is the growing lock of [WithLockout], kept in three limiters so
// that it works on any store:
//
//   - failures, a sliding log of the account's Limit over strikeWindow =
//     max(maxLock, the account's Window), counts the account's attempts
//     as Check does (given back by the same all-or-nothing rule, cleared
//     by Succeed). The attempt that fills it, or finds it full, is a
//     strike. An attacker who stays under the account's limit (Limit-1 per
//     Window, forever) still fills it, since strikeWindow is at least the
//     longest lock;
//   - lock, a token bucket of full tokens of tick each (full·tick = max),
//     is drained to lock the account: the time until it is full again is
//     the time left locked, which a Peek of full tokens reports exactly as
//     its RetryAfter. A strike takes the whole bucket, which only a full
//     one (no lock) allows, and gives back all but its lock's ticks: of
//     attempts in parallel one strikes and the others find the lock. A
//     bucket never takes longer than max to refill, so no lock outlasts
//     max, whatever happens in between;
//   - level, a token bucket of len(steps) units refilled one per
//     levelPeriod = 2·strikeWindow, gives a unit to each lock: the units
//     missing are the locks remembered, which set the next lock's time.
//     One that comes less than levelPeriod after the previous one
//     remembers at least as many (it refilled less than one unit), so the
//     lock never shortens while failures go on (they strike at least once
//     per strikeWindow), and each levelPeriod of quiet forgets at most
//     one. A ramp of locks may repeat a step instead of doubling when the
//     refill crosses a whole unit, at most once per levelPeriod.
//
// Locks on the default policies, 48 hours of guessing: 10 checked in the
// first hour, 5 an hour after; no strategy found more than 10 in an hour
// (guardtest's siege, TestLockoutAnyStrategy). The level was a sliding log
// of the lockouts in the last day: a full log took no more entries, so a
// day into an attack its entries left together and the lock fell back to
// minutes while the attack went on (285 checked in 48 hours, 20 in one
// hour a day in); and the lock started only at a failure that reached the
// account's limit, so 4 failures per Window were never locked.
type lockout struct {
	failures core.Refunder
	level    core.Limiter
	lock     core.Refunder
	steps    []time.Duration // lock time by level: base·2^k, the last one max
	tick     time.Duration   // one token's refill time; divides every step
	full     int64           // the bucket's capacity: max/tick
}

// newLockout builds the lockout of WithLockout(base, maxLock) for a Guard
// whose account policy is account, building its limiters with build.
func newLockout(base, maxLock time.Duration, account core.Policy, build builder) (*lockout, error) {
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
	// millisecond, so that every lock is a whole number of ticks, exact to
	// the microsecond; a second, or their greatest common divisor, when the bucket
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
	strikeWindow := max(maxLock, account.Window)
	levelWindow := min(2*strikeWindow*time.Duration(len(l.steps)), core.MaxWindow)
	levelWindow -= levelWindow % (time.Duration(len(l.steps)) * time.Microsecond) // levelPeriod in whole µs
	var err error
	failPolicy := core.Policy{Name: failuresName, Algorithm: core.SlidingLog, Limit: account.Limit, Window: strikeWindow}
	if l.failures, err = build.refunder("lockout failures", failPolicy, failPolicy, failuresName); err != nil {
		return nil, err
	}
	levelPolicy := core.Policy{Name: levelName, Algorithm: core.TokenBucket, Limit: int64(len(l.steps)), Window: levelWindow}
	if l.level, err = build.limiter("lockout level", levelPolicy, levelPolicy, levelName); err != nil {
		return nil, err
	}
	lockPolicy := core.Policy{Name: lockName, Algorithm: core.TokenBucket, Limit: l.full, Window: maxLock}
	if l.lock, err = build.refunder("lockout", lockPolicy, lockPolicy, lockName); err != nil {
		return nil, err
	}
	return l, nil
}

// admit counts an attempt on the account of key, which the Guard's
// limits allowed and no lock holds, in the failures log. An attempt that
// fills the log or finds it full is a strike: it takes the account's lock
// before its password is checked, and may proceed only if it got it, so
// that of attempts in parallel at most one is a strike and the others
// wait for its lock. It locks the account for the time the level calls
// for and raises the level.
//
// ok reports whether the attempt may proceed; when it may not, wait is
// the lock's time left. counted reports that the attempt holds a unit of
// the failures log, to give back if the attempt does not proceed.
func (l *lockout) admit(ctx context.Context, key string, clock core.Clock) (ok bool, wait time.Duration, counted bool, err error) {
	f, err := l.failures.AllowN(ctx, key, 1)
	if err != nil {
		return false, 0, false, err
	}
	if f.Allowed && f.Remaining > 0 {
		return true, 0, true, nil
	}
	// The whole bucket, taken only when it is full: one strike at a time.
	took := clock.Now()
	lk, err := l.lock.AllowN(ctx, key, l.full)
	if err != nil || !lk.Allowed {
		return false, lk.RetryAfter, f.Allowed, err
	}
	lv, err := l.level.AllowN(ctx, key, 1)
	if err != nil {
		l.lock.Refund(ctx, key, l.full, clock.Now().Sub(took)) // best effort: no lock without its level
		return false, 0, f.Allowed, err
	}
	k := len(l.steps) - 1 // the bucket is empty: the level is at max
	if lv.Allowed {
		k = min(max(int(lv.Limit-lv.Remaining-1), 0), k) // lockouts remembered before this one
	}
	// Give back all but the lock's time: n ticks left from now.
	if n := int64(l.steps[k] / l.tick); n < l.full {
		if err := l.lock.Refund(ctx, key, l.full-n, clock.Now().Sub(took)); err != nil {
			return true, 0, f.Allowed, err // locked for max: never longer
		}
	}
	return true, 0, f.Allowed, nil
}

// gcd returns the greatest common divisor of a and b (a when b is 0).
func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
