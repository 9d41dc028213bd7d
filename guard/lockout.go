package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

// lockout is the growing lock of [WithLockout]: a failures log that finds
// the strikes, and a [core.Lockout] that locks for them, all kept in
// limiters so that it works on any store:
//
//   - failures, a sliding log of the account's Limit over strikeWindow =
//     max(maxLock, the account's Window), counts the account's attempts
//     as Check does (given back by the same all-or-nothing rule, cleared
//     by Succeed). The attempt that fills it, or finds it full, is a
//     strike. An attacker who stays under the account's limit (Limit-1 per
//     Window, forever) still fills it, since strikeWindow is at least the
//     longest lock;
//   - the lock, a core.Lockout from base to maxLock that forgets one lock
//     per levelPeriod = 2·strikeWindow (its doc says how the lock and the
//     level are kept). A strike locks the account before its password is
//     checked, and of strikes in parallel one locks and the others find
//     the lock. Failures strike at least once per strikeWindow, so the
//     lock never shortens while they go on.
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
	lock     *core.Lockout
}

// newLockout builds the lockout of WithLockout(base, maxLock) for a Guard
// whose account policy is account, building its limiters with build.
func newLockout(base, maxLock time.Duration, account core.Policy, build builder, clock core.Clock) (*lockout, error) {
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
	strikeWindow := max(maxLock, account.Window)
	var err error
	l := &lockout{}
	failPolicy := core.Policy{Name: failuresName, Algorithm: core.SlidingLog, Limit: account.Limit, Window: strikeWindow}
	if l.failures, err = build.refunder("lockout failures", failPolicy, failPolicy, failuresName); err != nil {
		return nil, err
	}
	l.lock, err = core.NewLockout(core.Block{Name: lockName, For: base, Max: maxLock, Forget: 2 * strikeWindow}, clock, func(p core.Policy) (core.Limiter, error) {
		return build.limiter("lockout", p, p, p.Name)
	})
	if err != nil {
		return nil, fmt.Errorf("guard: WithLockout(%v, %v): %w", base, maxLock, err)
	}
	return l, nil
}

// admit counts an attempt on the account of key, which the Guard's
// limits allowed and no lock holds, in the failures log. An attempt that
// fills the log or finds it full is a strike: it takes the account's lock
// before its password is checked, and may proceed only if it got it, so
// that of attempts in parallel at most one is a strike and the others
// wait for its lock.
//
// ok reports whether the attempt may proceed; when it may not, wait is
// the lock's time left. counted reports that the attempt holds a unit of
// the failures log, to give back if the attempt does not proceed.
func (l *lockout) admit(ctx context.Context, key string) (ok bool, wait time.Duration, counted bool, err error) {
	f, err := l.failures.AllowN(ctx, key, 1)
	if err != nil {
		return false, 0, false, err
	}
	if f.Allowed && f.Remaining > 0 {
		return true, 0, true, nil
	}
	wait, locked, err := l.lock.Lock(ctx, key)
	if err != nil || !locked {
		return locked && err != nil, wait, f.Allowed, err
	}
	return true, 0, f.Allowed, nil
}
