package inflight

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Memory is a [Limiter] that holds its leases in the process: per key, the
// IDs of its leases and when each expires, in a table of at most
// [WithMaxKeys] keys sharded by a seeded hash of the key (the caller's
// string is not kept). A key's entry exists while it holds a lease: the
// last release removes it.
//
// A lease expires after [WithLeaseTTL] unless released. A crash takes the
// leases with the process, so expiry is not for crashes here: it bounds
// what a lease lost by a bug (acquired and never released) costs its key,
// a slot for one TTL rather than for ever. The HTTP middleware releases
// every lease it takes, when the handler returns or panics.
//
// When the table is full, leases that have expired are swept; if every
// key still holds a live lease, a new key is refused (Allowed false) rather
// than any key's leases forgotten, so no key ever holds more than Limit.
//
// A Memory is safe for concurrent use. Create one with [New].
type Memory struct {
	limit  int64
	ttl    time.Duration
	clock  core.Clock
	base   time.Time // the clock's reading at New: times count from it
	perMax int       // keys per shard
	seed   maphash.Seed
	seed2  maphash.Seed
	shards [shardCount]shard
}

var _ Limiter = (*Memory)(nil)

const shardCount = 64

type shard struct {
	mu      sync.Mutex
	keys    map[[2]uint64]*entry
	free    []*entry // removed entries, their slices kept for the next keys
	next    uint64   // the last lease ID given
	sweepAt int64    // no sweep of a full table before this time
	_       [64]byte // keep shards' locks apart
}

// entry is one key's leases, in no order.
type entry struct{ leases []held }

type held struct {
	id      uint64
	expires int64 // ns since base
}

// Option configures a [Memory] limiter.
type Option func(*options)

type options struct {
	ttl     time.Duration
	clock   core.Clock
	maxKeys int
}

// WithLeaseTTL sets how long a lease lasts unless released; it must be
// positive. Set it above the longest a request may run (the server's
// WriteTimeout): a lease that expires while its request runs lets one
// more in.
//
// Default: [DefaultLeaseTTL].
func WithLeaseTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithClock sets the clock that leases expire by, read once per Acquire.
// [New] fails if c is nil.
//
// Default: [core.SystemClock].
func WithClock(c core.Clock) Option { return func(o *options) { o.clock = c } }

// WithMaxKeys bounds the number of keys holding leases at once; it must
// be at least 1. The bound is kept per shard of the table, so a key may
// be refused a little before the whole table holds n keys.
//
// Default: [DefaultMaxKeys].
func WithMaxKeys(n int) Option { return func(o *options) { o.maxKeys = n } }

// New returns a [Memory] limiter that lets at most limit requests per key
// be in flight at once. It fails if limit is below 1 or an option is
// invalid.
func New(limit int64, opts ...Option) (*Memory, error) {
	o := options{ttl: DefaultLeaseTTL, clock: core.SystemClock{}, maxKeys: DefaultMaxKeys}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("inflight: New: option %d is nil", i+1)
		}
		opt(&o)
	}
	switch {
	case limit < 1:
		return nil, fmt.Errorf("inflight: New(%d): %w", limit, ErrInvalidLimit)
	case o.ttl <= 0:
		return nil, fmt.Errorf("inflight: New: WithLeaseTTL(%v): must be positive", o.ttl)
	case o.clock == nil:
		return nil, errors.New("inflight: New: WithClock(nil): a clock is required")
	case o.maxKeys < 1:
		return nil, fmt.Errorf("inflight: New: WithMaxKeys(%d): must be at least 1", o.maxKeys)
	}
	m := &Memory{
		limit:  limit,
		ttl:    o.ttl,
		clock:  o.clock,
		base:   o.clock.Now(),
		perMax: max(1, (o.maxKeys+shardCount-1)/shardCount),
		seed:   maphash.MakeSeed(),
		seed2:  maphash.MakeSeed(),
	}
	for i := range m.shards {
		m.shards[i].keys = make(map[[2]uint64]*entry)
	}
	return m, nil
}

// Limit returns the most leases one key may hold at once.
func (m *Memory) Limit() int64 { return m.limit }

func (m *Memory) hash(key string) ([2]uint64, *shard) {
	h := [2]uint64{maphash.String(m.seed, key), maphash.String(m.seed2, key)}
	return h, &m.shards[h[0]%shardCount]
}

func (m *Memory) now() int64 { return int64(m.clock.Now().Sub(m.base)) }

// Acquire takes a lease for key if it holds fewer than Limit live ones; see
// [Limiter]. ctx is not used.
func (m *Memory) Acquire(_ context.Context, key string) (Decision, error) {
	d := Decision{Limit: m.limit}
	if key == "" {
		return d, ErrEmptyKey
	}
	h, s := m.hash(key)
	now := m.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[h]
	if e != nil {
		soonest := e.expire(now)
		if n := int64(len(e.leases)); n >= m.limit {
			d.InFlight = n
			d.RetryAfter = retryAfter(soonest - now)
			return d, nil
		}
	} else {
		if len(s.keys) >= m.perMax && !s.sweep(now, m.perMax) {
			d.RetryAfter = retryAfter(s.sweepAt - now)
			return d, nil
		}
		e = s.newEntry()
		s.keys[h] = e
	}
	s.next++
	e.leases = append(e.leases, held{id: s.next, expires: now + int64(m.ttl)})
	d.Allowed, d.InFlight = true, int64(len(e.leases))
	d.Lease = Lease{Key: key, ID: s.next}
	return d, nil
}

// Release gives back lease; see [Limiter]. ctx is not used.
func (m *Memory) Release(_ context.Context, lease Lease) error {
	if lease.Key == "" {
		return ErrEmptyKey
	}
	h, s := m.hash(lease.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[h]
	if e == nil {
		return nil
	}
	for i, l := range e.leases {
		if l.id == lease.ID {
			last := len(e.leases) - 1
			e.leases[i] = e.leases[last]
			e.leases = e.leases[:last]
			break
		}
	}
	if len(e.leases) == 0 {
		s.remove(h, e)
	}
	return nil
}

// InFlight returns how many live leases key holds.
func (m *Memory) InFlight(key string) int64 {
	h, s := m.hash(key)
	now := m.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[h]
	if e == nil {
		return 0
	}
	e.expire(now)
	n := int64(len(e.leases))
	if n == 0 {
		s.remove(h, e)
	}
	return n
}

// expire drops e's leases that have expired at now and returns when its
// soonest live lease expires (math.MaxInt64 when none is left).
func (e *entry) expire(now int64) int64 {
	soonest := int64(1<<63 - 1)
	kept := e.leases[:0]
	for _, l := range e.leases {
		if l.expires > now {
			kept = append(kept, l)
			soonest = min(soonest, l.expires)
		}
	}
	clear(e.leases[len(kept):])
	e.leases = kept
	return soonest
}

// sweep drops the expired leases of every key of a full shard, and the
// keys left without one, unless a sweep found nothing to drop since the
// soonest lease it saw expires. It reports whether the shard holds fewer
// than perMax keys after.
func (s *shard) sweep(now int64, perMax int) bool {
	if now < s.sweepAt {
		return false
	}
	soonest := int64(1<<63 - 1)
	for h, e := range s.keys {
		soonest = min(soonest, e.expire(now))
		if len(e.leases) == 0 {
			s.remove(h, e)
		}
	}
	s.sweepAt = soonest
	return len(s.keys) < perMax
}

func (s *shard) newEntry() *entry {
	if n := len(s.free); n > 0 {
		e := s.free[n-1]
		s.free = s.free[:n-1]
		return e
	}
	return new(entry)
}

// maxFree bounds the entries a shard keeps for reuse.
const maxFree = 64

func (s *shard) remove(h [2]uint64, e *entry) {
	delete(s.keys, h)
	e.leases = e.leases[:0]
	if len(s.free) < maxFree {
		s.free = append(s.free, e)
	}
}

// retryAfter returns the RetryAfter of a refusal whose soonest lease
// expires in ns: [DefaultRetryAfter], or less when the lease expires
// sooner, and at least a millisecond.
func retryAfter(ns int64) time.Duration {
	return max(time.Millisecond, min(time.Duration(ns), DefaultRetryAfter))
}
