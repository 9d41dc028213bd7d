package hotkey

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Leased is a [core.Limiter] that takes units from a remote limiter (such as the
// Redis store) in batches per key and spends them locally, so that a hot key
// costs one remote call per batch instead of one per request. A lease
// expires after [WithLeaseTime] (default [DefaultLeaseTime]); units left
// then are dropped, not returned ([Leased.Stats] counts them).
//
// With N instances, a key is allowed in any span of time at most what the
// remote policy allows plus N×batch. A key's take size adapts between its
// cost and batch, so a key that is not hot leases only what it spends. Costs
// above batch, and leaky-bucket requests, go to the remote limiter as they
// are; denials are the remote limiter's Decisions.
//
// A Leased is not a [core.Refunder]. It is safe for concurrent use: requests for
// one key share one remote call while its lease is topped up. Create one
// with [NewLeased].
type Leased struct {
	// A key at 20,000 per minute costs about 20,000/batch remote calls a minute
	// per instance.
	//
	// Leases. Per key, a Leased keeps a lease: units taken from the remote
	// limiter (counted there, as allowed requests) that this process may spend
	// until the lease expires. A request whose cost the lease holds is allowed
	// from memory, with no remote call. Otherwise the lease is topped up: the
	// remote limiter is asked, with one AllowN, for the units that bring the
	// lease to the key's take size (never more than batch in all, and at least
	// the cost); if it denies them, it is asked once more for exactly the units
	// missing, so that a key near its limit is not starved by the batch size. If
	// that is denied too, the request is denied with the remote limiter's
	// Decision.
	//
	// The take size starts at the request's cost (the first request of a key
	// takes only what it spends), doubles, up to batch, each time a lease is
	// spent before it expires, and halves when a lease expires with units left
	// or the remote limiter denies a batch. A key at or over its limit is
	// therefore decided by the remote limiter about once per request; put a
	// DenialCache in front to answer its denials from memory.
	//
	// Over-admission: a lease holds at most batch units, so N instances hold at
	// most N×batch units of one key that the remote limiter counted earlier than
	// they are spent. Units left when a lease expires (or when the key is evicted
	// from memory, or Reset) were counted remotely and are lost for that window.
	// A short lease time keeps leased units from being hoarded across a quiet
	// spell and spent in a later burst.
	//
	// Decisions: an allowed Decision's Remaining is the units this instance's
	// lease still holds plus what the remote limiter reported left at the last
	// take: exact for a single instance, an overestimate by what other instances
	// took since. Limit, Policy and ResetAfter are those of the last remote
	// Decision for the key (ResetAfter counted down since). A denied Decision is
	// the remote limiter's, its Remaining plus the units still leased; its
	// RetryAfter is the remote limiter's for the units missing. A leaky bucket's
	// Delay is something a lease could not honour, hence the pass-through.
	// A request waiting for a top-up by another request for its key honours
	// its context.

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

// Leased has no Refund method. A request spends units that the remote
// limiter counted when the lease was taken, maybe long before, so a remote
// refund with the request's elapsed time would claim a later counting time
// than the true one: a fixed or sliding window could give back units
// counted in a window the take never touched, more room than the request
// ever used. Putting the units back in the local lease instead is sound only
// while that same lease lasts, and leases are topped up, merged and dropped
// without a record of which request spent from which take. Routes that
// count before running and give back need a limiter that counts each
// request itself.

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
// limiter when it holds fewer. See [Leased] for what the Decision means.
// Errors of the remote limiter are returned as they are.
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
// units missing. Its Remaining is the key's as it is, as for a Decision of
// AllowN (see [Leased]): the units leased plus what the remote limiter
// reports left.
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
