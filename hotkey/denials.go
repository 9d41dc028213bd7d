package hotkey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
)

// DenialCache is a [core.Limiter] that remembers the denials of a remote
// limiter (such as the Redis store) and answers repeated requests of a
// denied key from memory until the denial's RetryAfter has passed, so that a
// client hammering a key past its limit costs one remote call per
// RetryAfter, not one per request.
//
// A remote denial of n units at t with RetryAfter r is remembered until t+r.
// Until then, requests for the key of the same cost n are denied from memory
// with the Decision the remote limiter would give: traffic can only push t+r
// later, so t+r-now is the exact RetryAfter; Remaining, Limit and Policy are
// the remote denial's. Requests of other costs go to the remote limiter. One
// denial is remembered per key, the smallest cost's while it lasts.
//
// An allowed request, [DenialCache.Reset] and [DenialCache.Refund] forget the
// key's denial; a Reset or Refund made elsewhere is not seen, so the key
// stays denied here until t+r at the latest. Memory is bounded by
// [WithMaxKeys] (default [DefaultMaxKeys]); a denial forgotten to make room
// costs a remote call, never a wrong decision. Over a [core.LayeredLimiter]
// it reports every layer's Decision ([DenialCache.AllowLayers]).
//
// A DenialCache is safe for concurrent use. Create one with
// [NewDenialCache].
type DenialCache struct {
	// Which denials are remembered, and why each rule holds: docs/scale.md.

	remote  core.Limiter
	ref     core.Refunder       // remote, when it can refund
	lay     core.LayeredLimiter // remote, when it is layered
	clock   core.Clock
	denials table[denial]

	// forgets counts, per slot of keys (by hash), the denials forgotten
	// because a Refund or Reset gave their key room. A remote denial is
	// remembered only if its slot's count did not move while it was decided:
	// otherwise it may predate the change. Slots rather than keys, so that
	// no record outlives a denial.
	forgets [denialSlots]atomic.Uint64

	hits atomic.Uint64
}

var (
	_ core.LayeredLimiter = (*DenialCache)(nil)
	_ core.Refunder       = (*DenialCache)(nil)
	_ core.PolicyReporter = (*DenialCache)(nil)
	_ core.Wrapper        = (*DenialCache)(nil)
)

// denial is a remembered remote denial: n units, from at to until (Unix ns),
// with every layer's Decision when a layered remote limiter decided it.
type denial struct {
	n         int64
	at, until int64
	resetAt   int64
	remaining int64
	limit     int64
	policy    core.Policy
	layer     int
	layers    []core.Decision // nil when decided by AllowN or Peek
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
	c := &DenialCache{remote: remote, clock: o.clock, denials: newTable[denial](o.maxKeys, nil)}
	c.ref, _ = core.As[core.Refunder](remote)
	c.lay, _ = core.As[core.LayeredLimiter](remote)
	return c, nil
}

// Policy returns the remote limiter's policy, or the zero Policy when it
// has none (see [core.PolicyReporter]).
func (c *DenialCache) Policy() core.Policy {
	p, _ := core.As[core.PolicyReporter](c.remote)
	if p == nil {
		return core.Policy{}
	}
	return p.Policy()
}

// Hits returns the number of requests answered from memory so far.
func (c *DenialCache) Hits() uint64 { return c.hits.Load() }

// Allow is shorthand for AllowN(ctx, key, 1).
func (c *DenialCache) Allow(ctx context.Context, key string) (core.Decision, error) {
	return c.AllowN(ctx, key, 1)
}

// AllowN denies n units of key from memory while a remote denial of the
// same cost is remembered, with that denial's Decision and its RetryAfter
// counted down. Otherwise it asks the remote limiter and remembers a denial,
// or forgets the key's denial when allowed. Errors of the remote limiter
// are returned as they are.
func (c *DenialCache) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	ld, err := c.decide(ctx, key, n, true, false)
	return ld.Decision, err
}

// Peek is AllowN counting nothing: a remembered denial answers it, and a
// denial of the remote Peek is remembered as one of AllowN would be.
func (c *DenialCache) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	ld, err := c.decide(ctx, key, n, false, false)
	return ld.Decision, err
}

// AllowLayers is AllowN that also returns every layer's Decision, when the
// remote limiter is a [core.LayeredLimiter]: a remembered denial answers
// with its layers, each counted down as its Decision is. A remote limiter
// that is not layered counts as one layer.
func (c *DenialCache) AllowLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	return c.decide(ctx, key, n, true, true)
}

// PeekLayers reports what AllowLayers would decide now, counting nothing.
func (c *DenialCache) PeekLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	return c.decide(ctx, key, n, false, true)
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
// [core.ErrNoRefund] when the remote limiter cannot refund (see [core.As]).
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
// requests it does not deny itself to (see [core.Wrapper]).
func (c *DenialCache) Unwrap() core.Limiter { return c.remote }

// decide asks the remote limiter, by AllowN (allow) or Peek, unless a
// remembered denial answers; with layers, it asks by AllowLayers or
// PeekLayers when the remote limiter is layered, and a denial remembered
// without layers does not answer.
func (c *DenialCache) decide(ctx context.Context, key string, n int64, allow, layers bool) (core.LayeredDecision, error) {
	if key == "" || n <= 0 {
		p := c.Policy()
		return core.LayeredDecision{Decision: core.Decision{Limit: p.Limit, Policy: p}}, checkRequest(key, n, core.MaxLimit)
	}
	lay := c.lay
	if !layers {
		lay = nil
	}
	ld, err := c.answer(ctx, key, n, allow, lay)
	if err == nil && layers && lay == nil {
		ld = core.MostRestrictive([]core.Decision{ld.Decision})
	}
	return ld, err
}

// answer decides n units of key by a remembered denial or, when none
// answers, by the remote limiter (by its layers when lay is not nil),
// remembering the denial it returns or forgetting the one an allowed
// request ends.
func (c *DenialCache) answer(ctx context.Context, key string, n int64, allow bool, lay core.LayeredLimiter) (core.LayeredDecision, error) {
	now := c.clock.Now().UnixNano()
	if ld, ok := c.cached(key, n, now, lay != nil); ok {
		c.hits.Add(1)
		return ld, nil
	}
	forgets := c.forgetsOf(key)
	seen := forgets.Load()
	ld, err := ask(ctx, c.remote, lay, key, n, allow)
	if err != nil {
		return ld, err
	}
	switch d := ld.Decision; {
	case !d.Allowed && d.RetryAfter > 0:
		c.remember(key, n, now, ld, lay != nil, forgets, seen)
	case d.Allowed && allow:
		c.denials.remove(key)
	}
	return ld, nil
}

// remember keeps the denial ld of n units of key, decided at now (with its
// layers when layers is set), unless a state of key's slot changed since
// its forgets count was seen, or a smaller cost was denied meanwhile.
func (c *DenialCache) remember(key string, n, now int64, ld core.LayeredDecision, layers bool, forgets *atomic.Uint64, seen uint64) {
	d := ld.Decision
	e := denial{n: n, at: now, until: now + int64(d.RetryAfter), resetAt: now + int64(d.ResetAfter),
		remaining: d.Remaining, limit: d.Limit, policy: d.Policy}
	if layers {
		e.layer, e.layers = ld.Layer, slices.Clone(ld.Layers)
	}
	c.denials.update(key, func(old denial, ok bool) (denial, bool) {
		if forgets.Load() != seen {
			return old, ok // a state changed meanwhile: the denial may be stale
		}
		if ok && old.at <= now && now < old.until && old.n < n {
			return old, true // a smaller cost denied meanwhile: keep it
		}
		return e, true
	})
}

// ask asks l by AllowLayers or PeekLayers when lay (then l) is not nil,
// else by AllowN or Peek, a Decision alone.
func ask(ctx context.Context, l core.Limiter, lay core.LayeredLimiter, key string, n int64, allow bool) (core.LayeredDecision, error) {
	switch {
	case lay != nil && allow:
		return lay.AllowLayers(ctx, key, n)
	case lay != nil:
		return lay.PeekLayers(ctx, key, n)
	}
	var d core.Decision
	var err error
	if allow {
		d, err = l.AllowN(ctx, key, n)
	} else {
		d, err = l.Peek(ctx, key, n)
	}
	return core.LayeredDecision{Decision: d}, err
}

// cached returns the remembered denial of n units of key at now,
// forgetting one that has run out. With layers, only a denial remembered
// with its layers answers, and its layers are counted down too.
func (c *DenialCache) cached(key string, n, now int64, layers bool) (core.LayeredDecision, bool) {
	var ld core.LayeredDecision
	var hit bool
	c.denials.update(key, func(e denial, ok bool) (denial, bool) {
		if !ok {
			return e, false
		}
		if now < e.at || now >= e.until {
			return e, false
		}
		if n == e.n && (!layers || e.layers != nil) {
			hit = true
			ld.Decision = core.Decision{
				Limit:      e.limit,
				Remaining:  e.remaining,
				RetryAfter: time.Duration(e.until - now),
				ResetAfter: time.Duration(max(e.resetAt-now, 0)),
				Policy:     e.policy,
			}
			if layers {
				ld.Layer, ld.Layers = e.layer, countDown(e.layers, time.Duration(now-e.at))
			}
		}
		return e, true
	})
	return ld, hit
}

// countDown returns a copy of layers with every RetryAfter and ResetAfter
// less elapsed, at least 0.
func countDown(layers []core.Decision, elapsed time.Duration) []core.Decision {
	out := slices.Clone(layers)
	for i := range out {
		out[i].RetryAfter = max(out[i].RetryAfter-elapsed, 0)
		out[i].ResetAfter = max(out[i].ResetAfter-elapsed, 0)
	}
	return out
}
