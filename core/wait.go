package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ratekit/ratekit/internal/ctxsleep"
)

// Wait blocks until n units of key have been taken from l, and returns the
// [Decision] that allowed them: the call a worker or an API client makes
// before each request, on any Limiter (with the Redis store, a fleet of
// processes waits on one quota).
//
// When denied, Wait sleeps the Decision's RetryAfter plus a random jitter
// (below RetryAfter, the time the policy takes to free n units, and 1s) and
// asks again; it never asks before RetryAfter. The jitter spreads waiters
// denied together, on one Redis key say, and shrinks for a waiter denied
// again, so that waiters in a loop take turns. When allowed with a Delay
// (the leaky bucket's place in the queue), it sleeps the Delay before
// returning. It returns at once, having waited for nothing:
//   - with an error wrapping [context.DeadlineExceeded] when ctx has a
//     deadline that comes before the earliest time the units could be
//     taken (as x/time/rate's WaitN does);
//   - with [ErrCostTooHigh] when n can never fit, and l's errors.
//
// It returns ctx's error, wrapped, when ctx ends while it sleeps. When it
// fails after units were counted (during a Delay), it gives them back if l
// is a [Refunder].
//
// Wait sleeps on the system's timers: l must decide by the system clock (or
// Redis's), not a [ManualClock], which does not move while Wait sleeps. It
// is safe for concurrent use, as l is.
func Wait(ctx context.Context, l Limiter, key string, n int64) (Decision, error) {
	if p, ok := policyOf(l); ok && n > p.Capacity() {
		return Decision{Limit: p.Limit, Policy: p}, fmt.Errorf("core: wait: cost %d, at most %d: %w", n, p.Capacity(), ErrCostTooHigh)
	}
	for denials := int64(1); ; denials = min(denials+1, 8) {
		if err := ctx.Err(); err != nil {
			return Decision{}, fmt.Errorf("core: wait: %w", err)
		}
		start := time.Now()
		d, err := l.AllowN(ctx, key, n)
		if err != nil {
			return d, fmt.Errorf("core: wait: %w", err)
		}
		now := time.Now()
		if d.Allowed {
			return waitDelay(ctx, l, key, n, d, start, now)
		}
		wait, err := retryWait(ctx, d, n, denials, now)
		if err != nil {
			return d, err
		}
		if err := ctxsleep.Sleep(ctx, wait); err != nil {
			return d, fmt.Errorf("core: wait: %w", err)
		}
	}
}

// waitDelay returns d, which allowed n units of key at start, once its
// Delay (the leaky bucket's place in the queue) has passed at now. The
// slot is taken: when ctx ends first, or its deadline comes before the
// slot, the units are given back.
func waitDelay(ctx context.Context, l Limiter, key string, n int64, d Decision, start, now time.Time) (Decision, error) {
	if d.Delay <= 0 {
		return d, nil
	}
	if deadline, ok := ctx.Deadline(); ok && !now.Add(d.Delay).Before(deadline) {
		giveBack(ctx, l, key, n, start)
		return d, fmt.Errorf("core: wait(n=%d): served in %v, after the context's deadline in %v: %w",
			n, d.Delay, deadline.Sub(now), context.DeadlineExceeded)
	}
	if err := ctxsleep.Sleep(ctx, d.Delay); err != nil {
		giveBack(ctx, l, key, n, start)
		return d, fmt.Errorf("core: wait: %w", err)
	}
	return d, nil
}

// retryWait returns how long a waiter denied d at now, its denials-th
// denial in a row (at most 8), sleeps before asking again for n units:
// RetryAfter and a jitter. It fails when ctx's deadline comes before
// RetryAfter.
func retryWait(ctx context.Context, d Decision, n, denials int64, now time.Time) (time.Duration, error) {
	// Jitter: a denied waiter sleeps RetryAfter + u, u uniform in [0, J),
	// J = min(RetryAfter, the time the policy takes to free n units
	// (n·Window/Limit), 1s), kept before ctx's deadline. Never less than
	// RetryAfter: an earlier retry could only be denied again. Waiters
	// denied together on one key (a fleet on one Redis key) then come back
	// spread over J instead of in the same millisecond; the first to come
	// back after the units free up takes them, and the others, denied
	// again, wait for the next units. J at most RetryAfter keeps a short
	// wait short (at most doubled); at most the time n units take to free
	// up, because by then the next ones are free and a longer spread only
	// leaves them unspent; at most 1s, so an hour's wait is not made
	// longer by minutes. J is divided by 1 + the denials this call has
	// had (at most 8): a waiter that lost more rounds comes back earlier
	// on average, so waiters that keep coming back (workers in a loop)
	// take turns instead of one losing round after round.
	wait := d.RetryAfter
	if wait <= 0 {
		wait = time.Microsecond // a Limiter that denies without a RetryAfter
	}
	spread := min(wait, time.Second)
	if p := d.Policy; p.Limit > 0 && p.Window > 0 {
		spread = min(spread, time.Duration(mulDivCeil(uint64(p.Window), uint64(n), uint64(p.Limit))))
	}
	spread /= time.Duration(denials)
	if deadline, ok := ctx.Deadline(); ok {
		slack := deadline.Sub(now.Add(wait))
		if slack <= 0 {
			return 0, fmt.Errorf("core: wait(n=%d): allowed in %v at the earliest, after the context's deadline in %v: %w",
				n, wait, deadline.Sub(now), context.DeadlineExceeded)
		}
		spread = min(spread, slack)
	}
	if spread > 0 {
		wait += time.Duration(waitJitter(int64(spread)))
	}
	return wait, nil
}

// waitJitter returns a uniform random int64 in [0, n), n > 0. Tests in
// this package replace it to make Wait's times exact.
var waitJitter = rand.Int64N

// giveBack refunds n units of key that an AllowN started at start counted,
// if l can refund. Errors are ignored: Wait reports the reason it stopped.
func giveBack(ctx context.Context, l Limiter, key string, n int64, start time.Time) {
	if r, ok := As[Refunder](l); ok {
		_ = r.Refund(context.WithoutCancel(ctx), key, n, time.Since(start))
	}
}
