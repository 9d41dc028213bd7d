package hotkey

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
)

// DenialCache is a [core.Limiter] that remembers the denials of a remote limiter
// (such as the Redis store) and answers repeated requests of a denied key
// from memory, with no remote call, until the denial's RetryAfter has
// passed. A client hammering a key past its limit then costs one remote call
// per RetryAfter, not one per request.
//
// Only a request of the same cost as the remembered denial is answered from
// memory, and its Decision is always the one the remote limiter would give;
// other requests go to the remote limiter. An allowed request,
// [DenialCache.Reset] and [DenialCache.Refund] forget the key's denial; a
// Reset or Refund made elsewhere is not seen, so the key stays denied here
// until the denial's RetryAfter at the latest. Memory is bounded by
// [WithMaxKeys] (default [DefaultMaxKeys]).
//
// A DenialCache is safe for concurrent use. Create one with
// [NewDenialCache].
type DenialCache struct {
	// The rule. When the remote limiter denies n units of a key at time t with
	// RetryAfter r, the cache remembers "n units denied until t+r". Until then, a
	// request for the key (AllowN or Peek) of the same cost n is denied from
	// memory: other traffic can only push t+r later, so t+r-now is still the
	// exact RetryAfter if nothing else arrives. Its Decision has that RetryAfter;
	// its Remaining, Limit and Policy are those of the remote denial, and its
	// ResetAfter the remote one counted down. A request of another cost goes to
	// the remote limiter: a smaller one might pass before t+r, and a larger one,
	// though sure to be denied, has a later RetryAfter that only the remote
	// limiter knows. One denial is remembered per key: the one of the smallest
	// cost while it lasts, else the latest. Requests of one cost, the common case
	// (cost 1), are therefore answered from memory. A denial with a zero
	// RetryAfter is not remembered.
	//
	// An allowed AllowN forgets the key's denial because the key's state changed,
	// so t+r may no longer be exact. A denial the remote limiter decided while a
	// Reset or Refund ran is not remembered. A clock that moves back before t
	// forgets the denial too. When memory is full, the least recently used denial
	// is forgotten to make room, which costs one remote call later and changes no
	// decision.

	remote  core.Limiter
	ref     core.Refunder // remote, when it can refund
	clock   core.Clock
	denials table[denial]

	// forgets counts, per slot of keys (by their hash), the denials
	// forgotten because a Refund or a Reset gave their key room. A remote
	// denial is remembered only if its slot's count did not move while the
	// remote limiter decided it: otherwise it may predate the change and,
	// remembered after the change was forgotten, would deny a key that has
	// room until its RetryAfter. (An allowed AllowN only takes room, so a
	// denial decided before it stays true; it forgets the key's denial
	// without counting.) Slots rather than keys: no record outlives a
	// denial; a refund of another key in the same slot costs at worst one
	// denial not remembered, that is one more remote call.
	forgets [denialSlots]atomic.Uint64

	hits atomic.Uint64
}

var (
	_ core.Limiter  = (*DenialCache)(nil)
	_ core.Refunder = (*DenialCache)(nil)
)

// denial is a remembered remote denial: n units, from at to until (Unix ns).
type denial struct {
	n         int64
	at, until int64
	resetAt   int64
	remaining int64
	limit     int64
	policy    core.Policy
}

// NewDenialCache returns a limiter that decides by remote and answers
// requests of a key it denied from memory until the denial's RetryAfter has
// passed. It fails if remote is nil or an option is invalid.
func NewDenialCache(remote core.Limiter, opts ...Option) (*DenialCache, error) {
	if remote == nil {
		return nil, errors.New("hotkey: NewDenialCache: a remote limiter is required")
	}
	o := options{clock: core.SystemClock{}, maxKeys: DefaultMaxKeys}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("hotkey: NewDenialCache: option %d is nil", i+1)
		}
		opt.apply(&o)
	}
	switch {
	case o.clock == nil:
		return nil, errors.New("hotkey: NewDenialCache: WithClock(nil): a clock is required")
	case o.maxKeys < 1:
		return nil, fmt.Errorf("hotkey: NewDenialCache: WithMaxKeys(%d): must be at least 1", o.maxKeys)
	}
	return &DenialCache{remote: remote, ref: refunderOf(remote), clock: o.clock, denials: newTable[denial](o.maxKeys, nil)}, nil
}

// Policy returns the remote limiter's policy, if it has a Policy method
// (both stores do) that returns a valid Policy, or else the zero Policy:
// the policy is unknown.
func (c *DenialCache) Policy() core.Policy {
	p, _ := policyOf(c.remote)
	return p
}

// Hits returns the number of requests answered from memory so far.
func (c *DenialCache) Hits() uint64 { return c.hits.Load() }

// Allow is shorthand for AllowN(ctx, key, 1).
func (c *DenialCache) Allow(ctx context.Context, key string) (core.Decision, error) {
	return c.AllowN(ctx, key, 1)
}

// AllowN denies the request from memory if a denial of the same cost is
// remembered (see [DenialCache]), and otherwise asks the remote limiter, remembering a
// denial. Errors of the remote limiter are returned as they are.
func (c *DenialCache) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	return c.decide(ctx, key, n, core.Limiter.AllowN, true)
}

// Peek is AllowN counting nothing: a remembered denial answers it, and a
// denial of the remote Peek is remembered as one of AllowN would be.
func (c *DenialCache) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	return c.decide(ctx, key, n, core.Limiter.Peek, false)
}

// Reset forgets key's denial and resets key in the remote limiter.
func (c *DenialCache) Reset(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("hotkey: %w", core.ErrEmptyKey)
	}
	err := c.remote.Reset(ctx, key)
	c.forget(key)
	return err
}

// Refund gives back n units in the remote limiter (see [core.Refunder]) and,
// when it succeeds, forgets key's denial: the key has more room than when
// it was denied. It returns the remote error as it is, or an error wrapping
// [core.ErrNoRefund] when the remote limiter cannot refund (see [core.AsRefunder]).
func (c *DenialCache) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	if c.ref == nil {
		return noRefund("denial cache", c.remote)
	}
	if err := c.ref.Refund(ctx, key, n, elapsed); err != nil {
		return err
	}
	c.forget(key)
	return nil
}

// forget forgets key's denial after a change that gave it room, and makes
// sure that no denial decided before the change is remembered after it.
func (c *DenialCache) forget(key string) {
	c.forgetsOf(key).Add(1)
	c.denials.remove(key)
}

// denialSlots is the number of slots of DenialCache.forgets.
const denialSlots = 1024

// forgetsOf returns the count of forgotten denials of key's slot.
func (c *DenialCache) forgetsOf(key string) *atomic.Uint64 {
	_, h, _ := c.denials.locate(key)
	return &c.forgets[h%denialSlots]
}

// Unwrap returns the remote limiter, the one DenialCache passes the
// requests it does not deny itself to (see [core.AsRefunder]).
func (c *DenialCache) Unwrap() core.Limiter { return c.remote }

func (c *DenialCache) decide(ctx context.Context, key string, n int64, op decideFunc, commit bool) (core.Decision, error) {
	if key == "" || n <= 0 {
		p := c.Policy()
		return core.Decision{Limit: p.Limit, Policy: p}, checkRequest(key, n, core.MaxLimit)
	}
	now := c.clock.Now().UnixNano()
	if d, ok := c.cached(key, n, now); ok {
		c.hits.Add(1)
		return d, nil
	}
	forgets := c.forgetsOf(key)
	seen := forgets.Load()
	d, err := op(c.remote, ctx, key, n)
	if err != nil {
		return d, err
	}
	switch {
	case !d.Allowed && d.RetryAfter > 0:
		e := denial{n: n, at: now, until: now + int64(d.RetryAfter), resetAt: now + int64(d.ResetAfter),
			remaining: d.Remaining, limit: d.Limit, policy: d.Policy}
		c.denials.update(key, func(old denial, ok bool) (denial, bool) {
			if forgets.Load() != seen {
				return old, ok // a state changed meanwhile: the denial may be stale
			}
			if ok && old.at <= now && now < old.until && old.n < n {
				return old, true // a smaller cost denied meanwhile: keep it
			}
			return e, true
		})
	case d.Allowed && commit:
		c.denials.remove(key)
	}
	return d, nil
}

// cached returns the remembered denial of n units of key at now,
// forgetting one that has run out.
func (c *DenialCache) cached(key string, n, now int64) (core.Decision, bool) {
	var d core.Decision
	var hit bool
	c.denials.update(key, func(e denial, ok bool) (denial, bool) {
		if !ok {
			return e, false
		}
		if now < e.at || now >= e.until {
			return e, false
		}
		if n == e.n {
			hit = true
			d = core.Decision{
				Limit:      e.limit,
				Remaining:  e.remaining,
				RetryAfter: time.Duration(e.until - now),
				ResetAfter: time.Duration(max(e.resetAt-now, 0)),
				Policy:     e.policy,
			}
		}
		return e, true
	})
	return d, hit
}
