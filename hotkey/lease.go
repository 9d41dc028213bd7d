package hotkey

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Leased is a [core.Limiter] that takes units from a remote limiter (such as
// the Redis store) in batches per key and spends them in process, so that a
// hot key costs about one remote call per batch instead of one per request.
//
// A request its key's lease covers is allowed from memory; otherwise the
// lease is topped up with a remote AllowN, and a remote denial is the
// request's Decision. A key's take size grows from its cost to batch while
// its leases are spent in time, so a quiet key leases only what it spends.
// Costs above batch go to the remote limiter as they are.
//
// With N instances, a key is allowed in any span at most what the remote
// policy allows plus N×batch. Units left when a lease expires ([WithLeaseTime],
// default [DefaultLeaseTime]), or when its key is evicted ([WithMaxKeys]) or
// Reset, are dropped, not returned ([Leased.Stats] counts them). A key at its
// limit is decided remotely about once per request: put a [DenialCache] in
// front. Leased takes no leaky bucket (a lease cannot honour a Delay) and is
// not a [core.Refunder] (its units were counted when taken, not when spent).
//
// A Leased is safe for concurrent use: requests for one key share one top-up,
// and one waiting for it honours its context. Create one with [NewLeased].
type Leased struct {
	// How a lease is taken, grown and spent, and why: docs/scale.md.

	remote    core.Limiter
	batch     int64
	leaseTime int64 // ns
	clock     core.Clock
	leases    table[*lease]
	policy    atomic.Pointer[core.Policy] // the remote's, when known

	takes   atomic.Uint64
	dropped atomic.Uint64
}

var (
	_ core.PolicyReporter = (*Leased)(nil)
	_ core.Wrapper        = (*Leased)(nil)
)

// lease is one key's leased units. sem (capacity 1) locks the fields.
type lease struct {
	sem       chan struct{}
	left      int64 // units leased and not spent
	start     int64 // Unix ns the units were taken
	expiry    int64 // Unix ns the units are dropped
	size      int64 // units the next take brings the lease to
	storeLeft int64 // the remote's Remaining at the last take
	resetAt   int64 // Unix ns: the remote's ResetAfter at the last take
	limit     int64
	policy    core.Policy
}

// LeaseStats counts what a [Leased] limiter did.
type LeaseStats struct {
	// Keys is the number of keys with a lease held now, spent or not.
	Keys int
	// Takes counts the remote AllowN calls made to take units.
	Takes uint64
	// Dropped counts leased units that expired (or were evicted or Reset)
	// before they were spent: counted by the remote limiter, never allowed.
	Dropped uint64
}

// NewLeased returns a limiter that takes units from remote in batches of up
// to batch (at least 1) and spends them locally. It fails if remote is nil
// or an option is invalid; a remote whose Policy is a [core.LeakyBucket] is
// rejected, and batch is capped at the remote policy's capacity, when the
// remote limiter has a Policy method (both stores do) that returns a valid
// Policy; a zero Policy, as a wrapper such as [DenialCache] returns when
// it does not know the policy, is taken as unknown.
func NewLeased(remote core.Limiter, batch int64, opts ...LeaseOption) (*Leased, error) {
	if remote == nil {
		return nil, errors.New("hotkey: NewLeased: a remote limiter is required")
	}
	if batch < 1 {
		return nil, fmt.Errorf("hotkey: NewLeased: batch %d: must be at least 1", batch)
	}
	o := options{leaseTime: DefaultLeaseTime, clock: core.SystemClock{}, maxKeys: DefaultMaxKeys}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("hotkey: NewLeased: option %d is nil", i+1)
		}
		opt.applyLease(&o)
	}
	switch {
	case o.leaseTime <= 0:
		return nil, fmt.Errorf("hotkey: NewLeased: WithLeaseTime(%v): must be positive", o.leaseTime)
	case o.clock == nil:
		return nil, errors.New("hotkey: NewLeased: WithClock(nil): a clock is required")
	case o.maxKeys < 1:
		return nil, fmt.Errorf("hotkey: NewLeased: WithMaxKeys(%d): must be at least 1", o.maxKeys)
	}
	l := &Leased{remote: remote, batch: batch, leaseTime: int64(o.leaseTime), clock: o.clock}
	if p, ok := core.As[core.PolicyReporter](remote); ok {
		pol := p.Policy()
		if pol.Algorithm == core.LeakyBucket {
			return nil, errors.New("hotkey: NewLeased: a leaky bucket's Delay cannot be leased")
		}
		l.batch = min(batch, pol.Capacity())
		l.policy.Store(&pol)
	}
	l.leases = newTable(o.maxKeys, func(e *lease) {
		// Evicted or Reset: its units are lost. If a request holds e, it
		// finishes with it and its units go uncounted.
		select {
		case e.sem <- struct{}{}:
			l.dropped.Add(uint64(e.left))
			e.left = 0
			<-e.sem
		default:
		}
	})
	return l, nil
}

// Policy returns the remote limiter's policy: from its Policy method, or
// else from its last Decision (the zero Policy before any).
func (l *Leased) Policy() core.Policy {
	if p := l.policy.Load(); p != nil {
		return *p
	}
	return core.Policy{}
}

// Stats reports the keys held, the remote takes and the units dropped so
// far.
func (l *Leased) Stats() LeaseStats {
	return LeaseStats{Keys: l.leases.len(), Takes: l.takes.Load(), Dropped: l.dropped.Load()}
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Leased) Allow(ctx context.Context, key string) (core.Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN spends n units of key's lease, topping it up from the remote
// limiter when it holds fewer: one AllowN for the units that bring it to the
// key's take size and, if that is denied, one for exactly the units missing.
// An allowed Decision's Remaining is the units the lease still holds plus
// what the remote limiter reported left at the last take (exact for one
// instance, an overestimate by what other instances took since); its Limit,
// Policy and ResetAfter are the last remote Decision's. A denied Decision is
// the remote limiter's, its Remaining plus the units still leased. Errors of
// the remote limiter are returned as they are.
func (l *Leased) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	if key == "" || n <= 0 {
		return l.invalid(key, n)
	}
	if l.passThrough(n) {
		return l.remote.AllowN(ctx, key, n)
	}
	e := l.leases.getOrAdd(key, func() *lease { return &lease{sem: make(chan struct{}, 1), size: n} })
	if err := e.lock(ctx); err != nil {
		return core.Decision{Limit: l.Policy().Limit, Policy: l.Policy()}, err
	}
	defer e.unlock()
	now := l.now()
	valid := l.expire(e, now)
	if e.left >= n {
		e.left -= n
		return e.decision(now), nil
	}
	batch := l.maxTake()
	if valid {
		e.size = min(2*e.size, batch) // spent within its time: the key is hot
	}
	need := n - e.left
	take := max(min(e.size, batch), n) - e.left
	d, err := l.take(ctx, key, take)
	if take > need && (err == nil && !d.Allowed || errors.Is(err, core.ErrCostTooHigh)) {
		e.size = max(e.size/2, 1)
		take = need
		d, err = l.take(ctx, key, take)
	}
	if err != nil {
		return d, err
	}
	if !d.Allowed {
		d.Remaining += e.left
		return d, nil
	}
	e.start, e.expiry = now, now+l.leaseTime
	e.left += take - n
	e.storeLeft = d.Remaining
	e.resetAt = now + int64(d.ResetAfter)
	e.limit, e.policy = d.Limit, d.Policy
	return e.decision(now), nil
}

// Peek reports what AllowN would decide now, counting nothing: from the
// lease when it holds n units, else by asking the remote limiter about the
// units missing. Its Remaining is the units leased plus what the remote
// limiter reports left.
func (l *Leased) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	if key == "" || n <= 0 {
		return l.invalid(key, n)
	}
	if l.passThrough(n) {
		return l.remote.Peek(ctx, key, n)
	}
	e, ok := l.leases.peek(key)
	if !ok {
		return l.remote.Peek(ctx, key, n)
	}
	if err := e.lock(ctx); err != nil {
		return core.Decision{Limit: l.Policy().Limit, Policy: l.Policy()}, err
	}
	defer e.unlock()
	now := l.now()
	l.expire(e, now)
	if e.left >= n {
		return e.decision(now), nil
	}
	d, err := l.remote.Peek(ctx, key, n-e.left)
	if err == nil {
		d.Remaining += e.left
	}
	return d, err
}

// Reset drops key's lease, with the units it holds, and resets key in the
// remote limiter.
func (l *Leased) Reset(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("hotkey: %w", core.ErrEmptyKey)
	}
	l.leases.remove(key)
	return l.remote.Reset(ctx, key)
}

// Unwrap returns the remote limiter, the one Leased takes leases from.
func (l *Leased) Unwrap() core.Limiter { return l.remote }

func (l *Leased) invalid(key string, n int64) (core.Decision, error) {
	p := l.Policy()
	return core.Decision{Limit: p.Limit, Policy: p}, checkRequest(key, n, core.MaxLimit)
}

// maxTake returns batch, capped at the remote policy's capacity once known.
func (l *Leased) maxTake() int64 {
	if p := l.policy.Load(); p != nil {
		return min(l.batch, p.Capacity())
	}
	return l.batch
}

// passThrough reports whether a request of cost n goes to the remote
// limiter as it is: a cost above batch, or a leaky bucket.
func (l *Leased) passThrough(n int64) bool {
	if n > l.maxTake() {
		return true
	}
	p := l.policy.Load()
	return p != nil && p.Algorithm == core.LeakyBucket
}

// take asks the remote limiter for n units and learns its policy.
func (l *Leased) take(ctx context.Context, key string, n int64) (core.Decision, error) {
	l.takes.Add(1)
	d, err := l.remote.AllowN(ctx, key, n)
	if err == nil && l.policy.Load() == nil && d.Policy.Limit != 0 {
		p := d.Policy
		l.policy.CompareAndSwap(nil, &p)
	}
	return d, err
}

func (l *Leased) now() int64 { return l.clock.Now().UnixNano() }

// expire drops e's units if its lease has expired (or the clock went back
// before it began) and reports whether the lease is still valid. A lease
// that expires with units left halves the key's take size.
func (l *Leased) expire(e *lease, now int64) bool {
	if e.left > 0 && e.start <= now && now < e.expiry {
		return true
	}
	if e.left > 0 {
		l.dropped.Add(uint64(e.left))
		e.left = 0
		e.size = max(e.size/2, 1)
	}
	return e.start <= now && now < e.expiry
}

func (e *lease) lock(ctx context.Context) error {
	select {
	case e.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case e.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("hotkey: lease: %w", ctx.Err())
	}
}

func (e *lease) unlock() { <-e.sem }

// decision is the allowed Decision for a request just spent from e.
func (e *lease) decision(now int64) core.Decision {
	rem := e.left + e.storeLeft
	if c := e.policy.Capacity(); c > 0 {
		rem = min(rem, c)
	}
	return core.Decision{
		Allowed:    true,
		Limit:      e.limit,
		Remaining:  rem,
		ResetAfter: time.Duration(max(e.resetAt-now, 0)),
		Policy:     e.policy,
	}
}
