package hotkey

import (
	"time"

	"github.com/ratekit/ratekit/core"
)

// DefaultMaxKeys is the number of keys a [Leased] or [DenialCache] limiter
// remembers unless [WithMaxKeys] says otherwise.
const DefaultMaxKeys = 1 << 16

// DefaultLeaseTime is how long leased units may be spent unless
// [WithLeaseTime] says otherwise.
const DefaultLeaseTime = time.Second

// An Option configures a [DenialCache] or a [Leased] limiter: [WithClock]
// or [WithMaxKeys]. Every Option is also a [LeaseOption].
type Option interface {
	LeaseOption
	apply(*options)
}

// A LeaseOption configures a [Leased] limiter: an [Option], or
// [WithLeaseTime].
type LeaseOption interface{ applyLease(*options) }

type options struct {
	clock     core.Clock
	maxKeys   int
	leaseTime time.Duration // Leased only
}

type option func(*options)

func (f option) apply(o *options)      { f(o) }
func (f option) applyLease(o *options) { f(o) }

type leaseOption func(*options)

func (f leaseOption) applyLease(o *options) { f(o) }

// WithClock sets the clock the limiter reads: for leases to expire by, or
// for denials to expire by. It should be the clock the remote limiter
// decides by (the Redis server's TIME is close to the system clock). The
// constructor fails if c is nil. Default: [core.SystemClock].
func WithClock(c core.Clock) Option { return option(func(o *options) { o.clock = c }) }

// WithMaxKeys bounds the keys the limiter remembers at once (at least 1;
// the constructor fails otherwise): the keys holding a lease, or the
// denials remembered. The least recently used is dropped to make room.
// Default: [DefaultMaxKeys].
func WithMaxKeys(n int) Option { return option(func(o *options) { o.maxKeys = n }) }

// WithLeaseTime sets how long units taken from the remote limiter may be
// spent (positive); units left after it are dropped. Keep it short: the
// longer it is, the longer an instance can sit on units other instances
// could have used. Default: [DefaultLeaseTime].
func WithLeaseTime(d time.Duration) LeaseOption {
	return leaseOption(func(o *options) { o.leaseTime = d })
}
