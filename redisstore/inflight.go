package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/inflight"
)

//go:embed inflight.lua
var inFlightLua string

// InFlight is an [inflight.Limiter] whose leases live in Redis, shared by
// every server that builds one with the same prefix: at most Limit
// requests per key in flight across them all. Each key is a sorted set of
// lease IDs scored by their expiry, under the key's hash tag
// (prefix:inflight:{key}), so one key is one Cluster slot; Acquire drops
// the expired leases, counts the others and adds its own in one atomic
// script, and Release removes its lease. A lease expires after
// [WithLeaseTTL] unless released, and the key with its last lease: a
// server that dies holding leases holds them no longer than that.
//
// Time is the server's TIME, or the client's clock with [WithClock] (the
// tests' manual clock). A refusal's RetryAfter is
// [inflight.DefaultRetryAfter], or less when the key's soonest lease
// expires sooner. Release a lease with the InFlight that acquired it:
// its IDs are its own.
//
// An InFlight is safe for concurrent use. Create one with [NewInFlight].
type InFlight struct {
	l      *Limiter // runs the script, builds keys and reads the clock
	limit  int64
	ttl    any // the lease TTL in µs, and the margin in ms, boxed once
	margin any
	limArg any
	sha    any
	id     string // this InFlight's part of its lease IDs
	next   atomic.Uint64
}

var _ inflight.Limiter = (*InFlight)(nil)

// WithLeaseTTL sets how long a lease of [NewInFlight] lasts unless
// released: how long the leases of a server that died hold their slots.
// Set it above the longest a request may run (the server's
// WriteTimeout): a lease that expires while its request runs lets one
// more in. It must be positive; other constructors refuse it.
//
// Default: [inflight.DefaultLeaseTTL].
func WithLeaseTTL(d time.Duration) Option {
	return func(o *options) { o.leaseTTL, o.leaseTTLSet = d, true }
}

// NewInFlight returns an [inflight.Limiter] on Redis through client that
// lets at most limit requests per key be in flight at once. Options:
// [WithLeaseTTL], [WithPrefix], [WithClock], [WithTimeout] and
// [WithExpiryMargin] (added to a key's expiry). It fails if limit is below
// 1 or an option is invalid.
func NewInFlight(client redis.UniversalClient, limit int64, opts ...Option) (*InFlight, error) {
	if client == nil {
		return nil, errors.New("redisstore: NewInFlight: a client is required")
	}
	if limit < 1 {
		return nil, fmt.Errorf("redisstore: NewInFlight(%d): %w", limit, inflight.ErrInvalidLimit)
	}
	o, err := applyOptions("NewInFlight", opts)
	if err != nil {
		return nil, err
	}
	ttl := o.leaseTTL
	if !o.leaseTTLSet {
		ttl = inflight.DefaultLeaseTTL
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("redisstore: NewInFlight: WithLeaseTTL(%v): must be positive", ttl)
	}
	var b [8]byte
	rand.Read(b[:])
	s := scriptFor(inFlightLua)
	f := &InFlight{
		l:      &Limiter{client: client, prefix: o.prefix + ":inflight:{", clock: o.clock, timeout: o.timeout},
		limit:  limit,
		ttl:    int64((ttl + time.Microsecond - 1) / time.Microsecond),
		margin: int64((o.margin + time.Millisecond - 1) / time.Millisecond),
		limArg: limit,
		sha:    s.Hash(),
		id:     hex.EncodeToString(b[:]) + ":",
	}
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout(o.timeout))
	defer cancel()
	_ = s.Load(ctx, client).Err() // the first call loads it otherwise
	return f, nil
}

// loadTimeout is how long a constructor waits to load its script.
func loadTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return time.Second
	}
	return d
}

// Limit returns the most leases one key may hold at once.
func (f *InFlight) Limit() int64 { return f.limit }

// Acquire takes a lease for key if it holds fewer than Limit live ones, in
// one round trip; see [inflight.Limiter].
func (f *InFlight) Acquire(ctx context.Context, key string) (inflight.Decision, error) {
	d := inflight.Decision{Limit: f.limit}
	if key == "" {
		return d, inflight.ErrEmptyKey
	}
	now, err := f.l.now()
	if err != nil {
		return d, err
	}
	id := f.next.Add(1)
	ctx, cancel := f.l.withTimeout(ctx)
	defer cancel()
	cmd := redis.NewCmd(ctx, "evalsha", f.sha, "1", f.l.key(key), "a", f.member(id), f.limArg, f.ttl, f.margin, now)
	c, err := f.l.run(ctx, cmd)
	if err != nil {
		return d, fmt.Errorf("redisstore: eval: %w", err)
	}
	r, err := c.(*redis.Cmd).Int64Slice()
	if err != nil || len(r) != 3 {
		return d, fmt.Errorf("redisstore: eval: in-flight script returned %v, want 3 integers", c.(*redis.Cmd).Val())
	}
	d.InFlight = r[1]
	if r[0] != 1 {
		d.RetryAfter = max(time.Millisecond, min(time.Duration(r[2])*time.Microsecond, inflight.DefaultRetryAfter))
		return d, nil
	}
	d.Allowed = true
	d.Lease = inflight.Lease{Key: key, ID: id}
	return d, nil
}

// Release gives back lease, in one round trip; see [inflight.Limiter].
func (f *InFlight) Release(ctx context.Context, lease inflight.Lease) error {
	if lease.Key == "" {
		return inflight.ErrEmptyKey
	}
	ctx, cancel := f.l.withTimeout(ctx)
	defer cancel()
	cmd := redis.NewCmd(ctx, "evalsha", f.sha, "1", f.l.key(lease.Key), "r", f.member(lease.ID))
	if _, err := f.l.run(ctx, cmd); err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	return nil
}

// member returns the sorted set member of lease id.
func (f *InFlight) member(id uint64) string {
	return f.id + strconv.FormatUint(id, 10)
}
