// Package inflight caps the requests in flight per key: at most Limit
// requests of one key run at once, whatever their rate. Each request
// takes a [Lease] before it runs and releases it when it ends; a request
// that finds Limit leases held is refused. It is the neighbour of a rate
// limit for expensive work (an export, an AI completion): a rate limit
// says how many requests start per window, a cap in flight how many run
// together.
//
// [Memory] holds the leases in the process; the Redis store's in-flight
// limiter (redisstore.NewInFlight) shares them among servers, each lease
// expiring after its TTL if its server dies before releasing it. Both
// implement [Limiter]. The HTTP middleware takes one with
// httplimit.WithInFlight, which releases every lease when the handler
// returns or panics, and decides it with the rate limit, all or nothing.
package inflight

import (
	"context"
	"errors"
	"time"
)

// Limiter caps the requests in flight per key. [Memory] and the Redis
// store's in-flight limiter implement it. Its methods are safe for
// concurrent use. A refusal is a [Decision] with Allowed false, never an
// error; errors report an empty key or a broken store.
type Limiter interface {
	// Acquire takes a lease for key if fewer than Limit are held, and
	// reports it in the Decision's Lease. It is all or nothing: a refused
	// request holds nothing.
	Acquire(ctx context.Context, key string) (Decision, error)

	// Release gives back lease, which Acquire returned. Releasing a
	// lease that has expired or was released already does nothing, so
	// a lease is never released twice over another request's.
	Release(ctx context.Context, lease Lease) error
}

// Lease is one request's slot, as [Limiter.Acquire] returned it. Pass it
// to [Limiter.Release] when the request ends.
type Lease struct {
	// Key is the key the lease counts for.
	Key string
	// ID tells the lease from the key's others; it is unique per limiter
	// and key.
	ID uint64
}

// Decision is the outcome of one [Limiter.Acquire].
type Decision struct {
	// Allowed reports whether the request took a lease and may run.
	Allowed bool

	// Limit is the most leases one key may hold at once.
	Limit int64

	// InFlight is how many leases the key holds: with this request's
	// when it is allowed, as it is when refused.
	InFlight int64

	// RetryAfter is zero when allowed. When refused, it is a guess:
	// a lease frees when a request ends, which nobody knows in advance.
	// It is [DefaultRetryAfter], or less when the key's soonest lease
	// expires sooner.
	RetryAfter time.Duration

	// Lease is the request's lease when Allowed, to release when it ends.
	Lease Lease
}

const (
	// DefaultLeaseTTL is how long a lease lasts unless released, when
	// WithLeaseTTL is not given.
	DefaultLeaseTTL = 30 * time.Second

	// DefaultRetryAfter is the RetryAfter of a refusal, unless the key's
	// soonest lease expires sooner.
	DefaultRetryAfter = time.Second

	// DefaultMaxKeys is how many keys a [Memory] limiter holds leases for
	// at once, when WithMaxKeys is not given.
	DefaultMaxKeys = 1 << 20
)

var (
	// ErrEmptyKey reports an empty key.
	ErrEmptyKey = errors.New("inflight: key is empty")

	// ErrInvalidLimit reports a Limit below 1.
	ErrInvalidLimit = errors.New("inflight: limit must be at least 1")
)
