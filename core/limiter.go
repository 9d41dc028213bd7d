package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limiter decides whether a key may spend units now. Every store implements
// it: the in-memory [Memory] and the Redis store make the same decisions for
// the same [Policy], traffic and clock.
//
// All methods are safe for concurrent use. A denial is a [Decision] with
// Allowed false, never an error; errors report bad input (an empty key, a
// cost that is not positive, [ErrCostTooHigh]) or a broken store.
type Limiter interface {
	// AllowN reports whether n units may be spent for key now and, if so,
	// counts them. It is all or nothing: a denied request counts nothing, so
	// a client that keeps retrying is let in exactly when room frees up.
	AllowN(ctx context.Context, key string, n int64) (Decision, error)

	// Peek reports the key's state as it is, counting nothing and leaving
	// it as it is. Allowed says whether AllowN(ctx, key, n) would allow n
	// units now; Remaining and ResetAfter are the key's before anything is
	// counted (when AllowN would allow, it would leave n units fewer). When
	// n would be denied, the Decision is the one AllowN would return, with
	// the exact RetryAfter. A leaky bucket's Delay is the one n units would
	// get. A key that holds nothing reports every unit left and a zero
	// ResetAfter.
	Peek(ctx context.Context, key string, n int64) (Decision, error)

	// Reset forgets key: its next request is treated as its first.
	Reset(ctx context.Context, key string) error
}

// Refunder is a [Limiter] that can give back units it counted. HTTP
// middleware with a count condition and a login's failure count use it to
// count an attempt before it runs and give it back when its outcome is not
// counted: checking first and counting afterwards cannot hold under
// parallel requests, since every attempt in flight passes the check.
//
// The memory store ([Memory], [Layered], [Tiered]) and the Redis store
// implement it. The wrappers that pass requests to one limiter
// (hotkey.DenialCache, [Failover], observe.Limiter, observe.Shadow) have a
// Refund method whatever they wrap, which returns [ErrNoRefund] when that
// limiter cannot give units back; [As] tells, once, whether a limiter can.
type Refunder interface {
	Limiter

	// Refund gives back n units that AllowN(ctx, key, n) counted for key at
	// most elapsed ago: measure elapsed from before the AllowN call, on the
	// clock the limiter decides by (the monotonic clock, for the system
	// clock); it is rounded up to whole microseconds. It gives back only
	// what still counts for those units, never more than n and never past
	// a fresh state, and never leaves the key more room than if the
	// request had never been made (the requests allowed since being the
	// same): units that a refill or the end of a window has already
	// forgotten, or may have, are not given back. A layered limiter gives
	// them back in every layer. Refunding a key that holds nothing does
	// nothing and creates no state. Refund makes no [Decision] and counts
	// nothing.
	//
	// Errors are those of AllowN for bad arguments, [ErrInvalidElapsed]
	// for a negative elapsed, and a broken store's. It is safe for
	// concurrent use.
	Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error
}

// Decision is the outcome of one request against one [Policy].
//
// When AllowN allowed the request, the fields describe the state after it
// was counted; when it was denied, and for every Decision of Peek, they
// describe the state as it is, with nothing counted.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool

	// Limit is the policy's Limit: the units allowed per Window.
	Limit int64

	// Remaining is how many more units the key could spend right now: after
	// this request if AllowN allowed it, else (denied, or a Peek) with
	// nothing counted. It is never negative. For the token and leaky buckets
	// it can exceed Limit when Burst does.
	Remaining int64

	// RetryAfter is zero when allowed. When denied, it is the exact earliest
	// wait after which the same request would be allowed if nothing else
	// arrived in between.
	RetryAfter time.Duration

	// ResetAfter is the wait until the key is as if new: a full bucket, an
	// empty window or log. Zero when the key holds no state.
	ResetAfter time.Duration

	// Delay is set by the leaky bucket only: how long the caller must wait
	// before serving an allowed request (its place in the queue). For a
	// Peek that would be allowed, it is the Delay those units would get.
	Delay time.Duration

	// Policy is the policy that decided.
	Policy Policy
}

var (
	// ErrCostTooHigh reports a cost that the policy can never allow, however
	// long the caller waits: more than Limit units (fixed window, sliding log,
	// sliding window) or more than Burst (token and leaky buckets). See
	// [Policy.Capacity]. It is an error rather than a denial because no
	// RetryAfter would be true.
	ErrCostTooHigh = errors.New("cost exceeds what the policy can ever allow")

	// ErrInvalidCost reports a cost n <= 0, or a negative actual cost
	// given to [Settler.Settle].
	ErrInvalidCost = errors.New("cost must be positive")

	// ErrEmptyKey reports an empty key. A key function that cannot identify
	// the caller should say so with an error of its own rather than share one
	// empty key among every unidentified caller.
	ErrEmptyKey = errors.New("key is empty")

	// ErrInvalidPolicy is wrapped by every error that rejects a [Policy].
	ErrInvalidPolicy = errors.New("invalid policy")
)

// checkRequest validates the arguments shared by AllowN and Peek.
func checkRequest(key string, n, maxCost int64) error {
	if key == "" {
		return fmt.Errorf("core: %w", ErrEmptyKey)
	}
	if n <= 0 {
		return fmt.Errorf("core: cost %d: %w", n, ErrInvalidCost)
	}
	if n > maxCost {
		return costTooHigh(n, maxCost)
	}
	return nil
}

// costTooHigh returns the error of a cost n above maxCost.
func costTooHigh(n, maxCost int64) error {
	return fmt.Errorf("core: cost %d, at most %d: %w", n, maxCost, ErrCostTooHigh)
}

// CallerError reports whether err, returned by a limiter asked with ctx,
// is the caller's doing rather than a store's: an empty key, a cost that
// is not positive or can never fit ([ErrEmptyKey], [ErrInvalidCost],
// [ErrCostTooHigh]), a negative elapsed time or a limiter that cannot
// refund ([ErrInvalidElapsed], [ErrNoRefund]), or ctx itself cancelled or
// past its deadline. A deadline of the store's own, such as a
// [WithTimeout] running out while ctx goes on, is the store's. ctx may
// be nil when there is none: then only the errors named count.
//
// It is the one definition every ratekit package uses: caller errors never
// reach an [ErrorPolicy] nor trip a circuit breaker, the HTTP middleware
// refuses them (400, or 429 for a cost too high), and observers log them
// quieter than store errors.
func CallerError(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, ErrEmptyKey) || errors.Is(err, ErrInvalidCost) || errors.Is(err, ErrCostTooHigh) ||
		errors.Is(err, ErrInvalidElapsed) || errors.Is(err, ErrNoRefund) ||
		(ctx != nil && ctx.Err() != nil)
}
