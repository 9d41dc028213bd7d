package core

// Each constructor in core takes options of its own interface type
// (Option for New, FailoverOption, LeaseOption, DenialOption), so that an option that means nothing to a constructor
// does not compile there. An option that means the same thing to several
// constructors (the clock, the bound on keys) is one value of a type that
// implements each of their interfaces, so that it has one name: WithClock,
// WithMaxKeys.

// A ClockOption sets the clock a limiter reads; make one with [WithClock].
// It is an option of every constructor in core that reads a clock: it is
// an [Option], a [FailoverOption], a [LeaseOption] and a [DenialOption].
type ClockOption struct{ c Clock }

// WithClock sets the clock the constructed limiter reads: [New]'s once per
// decision, [NewFailover]'s for the breaker's cool-down, [NewLeased]'s for
// leases to expire by, [NewDenialCache]'s for denials to expire by (it
// should be the clock the remote limiter decides by; the Redis server's
// TIME is close to the system clock). A
// [CoarseClock] trades exactness (up to its resolution) for a cheaper read.
// The constructor fails if c is nil.
//
// Default: [SystemClock].
func WithClock(c Clock) ClockOption { return ClockOption{c} }

func (o ClockOption) applyMemory(m *options)       { m.clock = o.c }
func (o ClockOption) applyFailover(f *Failover)    { f.clock = o.c }
func (o ClockOption) applyLease(l *leaseOptions)   { l.clock = o.c }
func (o ClockOption) applyDenial(d *denialOptions) { d.clock = o.c }

// A MaxKeysOption bounds the number of keys a limiter holds; make one with
// [WithMaxKeys]. It is an [Option], a [LeaseOption] and a [DenialOption].
type MaxKeysOption struct{ n int }

// WithMaxKeys bounds the number of keys the constructed limiter holds at
// once (at least 1; the constructor fails otherwise): the keys of a
// [Memory] limiter (default [DefaultMaxKeys]), the keys holding a lease in
// a [Leased] limiter, whose least recently used lease is dropped to make
// room (default [DefaultLeaseMaxKeys]), and the denials a [DenialCache]
// remembers (default [DefaultLeaseMaxKeys]).
func WithMaxKeys(n int) MaxKeysOption { return MaxKeysOption{n} }

func (o MaxKeysOption) applyMemory(m *options)       { m.maxKeys = o.n }
func (o MaxKeysOption) applyLease(l *leaseOptions)   { l.maxKeys = o.n }
func (o MaxKeysOption) applyDenial(d *denialOptions) { d.maxKeys = o.n }

// The options of one constructor only.
type (
	failoverOption func(*Failover)
	leaseOption    func(*leaseOptions)
)

func (f failoverOption) applyFailover(o *Failover) { f(o) }
func (f leaseOption) applyLease(o *leaseOptions)   { f(o) }
