package core

// Each constructor in core takes options of its own interface type (Option
// for New, FailoverOption for NewFailover), so that an option that means
// nothing to a constructor does not compile there. The clock means the same
// thing to both, so it is one value of a type that implements both
// interfaces, with one name: WithClock.

// A ClockOption sets the clock a limiter reads; make one with [WithClock].
// It is both an [Option] and a [FailoverOption].
type ClockOption struct{ c Clock }

// WithClock sets the clock the constructed limiter reads: [New]'s (and
// each plan's of [NewTiered]) once per decision; [NewFailover]'s for the
// breaker's cool-down and as the clock of the local limiter a
// [FallbackShare] error policy builds (not the remote limiter's, which has
// its own). A [CoarseClock] trades exactness (up to its resolution) for a
// cheaper read. The constructor fails if c is nil.
//
// Default: [SystemClock].
func WithClock(c Clock) ClockOption { return ClockOption{c} }

func (o ClockOption) applyMemory(m *options)    { m.clock = o.c }
func (o ClockOption) applyFailover(f *Failover) { f.clock = o.c }

// WithMaxKeys bounds the number of keys a [Memory] limiter holds at once
// (default [DefaultMaxKeys]; at least 1, or [New] fails). At the bound, a
// new key takes the place of a fresh one (a full bucket, an empty window)
// first, so that dropping it changes no decision.
func WithMaxKeys(n int) Option { return memoryOption(func(m *options) { m.maxKeys = n }) }

// The options of one constructor only.
type (
	memoryOption   func(*options)
	failoverOption func(*Failover)
)

func (f memoryOption) applyMemory(o *options)      { f(o) }
func (f failoverOption) applyFailover(o *Failover) { f(o) }
