package core

import "context"

// Partial grants ([PartialLimiter]).

// PartialLimiter is a [Limiter] that can grant part of a request: as many
// of the units asked for as fit now, as go-redis/redis_rate's AllowAtMost
// does. A job that works through a queue takes what it may and leaves the
// rest for later, rather than waiting until the whole batch fits.
//
// The memory store ([Memory], [Layered], [Tiered]) implements it, and so
// do the Redis store's Limiter and Layered (redisstore).
type PartialLimiter interface {
	Limiter

	// AllowAtMost counts as many units of n as fit for key now, at most
	// n and at most the policy's capacity ([Policy.Capacity]), and
	// returns how many it counted: the largest cost that AllowN would
	// allow now, capped at n, counted in the same atomic step. When it
	// counts some, the Decision is the one AllowN would return for that
	// many (Allowed, Remaining after them, a leaky bucket's Delay for
	// them). When not even one unit fits, it counts nothing, returns 0 and
	// the Decision that denies one unit, with the RetryAfter one unit
	// needs.
	//
	// An n above the capacity is not an error, since part of it can be
	// granted; an empty key or an n that is not positive is, as for
	// AllowN.
	AllowAtMost(ctx context.Context, key string, n int64) (Decision, int64, error)
}

var (
	_ PartialLimiter = (*Memory)(nil)
	_ PartialLimiter = (*Layered)(nil)
)

// AllowAtMost counts as many of n units as fit for key now and returns how
// many; see [PartialLimiter].
func (m *Memory) AllowAtMost(_ context.Context, key string, n int64) (d Decision, granted int64, err error) {
	set := m.set.Load()
	if key == "" || n <= 0 {
		d.Limit, d.Policy = set.policy.Limit, set.policy
		return d, 0, checkRequest(key, n, set.cost)
	}
	v, granted, set := m.eng.decideAtMost(key, m.now(), n)
	d.Limit, d.Policy = set.policy.Limit, set.policy
	setVerdict(&d, v)
	return d, granted, nil
}

// AllowAtMost counts, in every layer, as many of n units as fit in all of
// them for key now, and returns how many; see [PartialLimiter]. The
// Decision is chosen as [Layered.AllowN] chooses: the most restrictive
// layer's for the units counted, or, when not even one unit fits, the
// denial of one unit.
func (l *Layered) AllowAtMost(_ context.Context, key string, n int64) (Decision, int64, error) {
	var buf [4]Decision
	d, granted, err := l.decideAtMost([]string{key}, []int64{n}, true, true, buf[:0])
	return d.Decision, granted, err
}
