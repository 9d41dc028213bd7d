package metricsview

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/observe"
)

// Counter is one counter series (one metric, one set of label values) of
// an exporter. Add adds one; it must not block, should not allocate and
// must be safe for concurrent use.
type Counter interface {
	Add(ctx context.Context)
}

// Histogram is one latency histogram series of an exporter. Record counts
// one duration; like Counter.Add, it must not block, should not allocate
// and must be safe for concurrent use.
type Histogram interface {
	Record(ctx context.Context, d time.Duration)
}

// Instruments makes an exporter's series. A [View] calls it once per
// metric, policy label and rule label (and outcome), the first time an
// event needs the series, under a lock; the series should exist, at zero,
// from then on.
type Instruments interface {
	// Counter returns the series of the counter m for the policy label,
	// the rule label, which is "" when m has none ([Info].Rule) or the
	// event is not of a rule set's limit, and the outcome label, which is
	// "" when m has none.
	Counter(m Metric, policy, rule, outcome string) Counter
	// Histogram returns the series of the histogram m for the policy
	// label and the rule label ("" as for Counter).
	Histogram(m Metric, policy, rule string) Histogram
}

// numCounted is the number of metrics a View resolves per event:
// Decisions to FallbackKeys. (NearLimit and StoreLatency are resolved with
// Decisions and Peeks.)
const numCounted = int(FallbackKeys) + 1

// View is an observe.PolicyObserver that counts events in an exporter's
// [Instruments]:
//
//   - an AllowN (OpAllow) in [Decisions] by outcome, its latency in
//     [StoreLatency], and, when it was allowed and [NearRule] says so, in
//     [NearLimit]; a shadow candidate's in [ShadowDecisions] only;
//   - a Peek (OpPeek) in [Peeks] by outcome and its latency in
//     [StoreLatency]; a shadow candidate's in [ShadowPeeks] only;
//   - an OpStoreError in [StoreErrors], an OpBreakerOpen in [BreakerOpens];
//   - an AllowN of a request keyed by its fallback key (Event.KeyFallback)
//     in [FallbackKeys] too, by outcome.
//
// Reset, Refund and breaker-close events count in nothing. An event of a
// rule set's limit (Event.Rule set) counts in the series of its rule and
// policy (the limit's name); a limit counts as one policy against
// [Config].MaxPolicies. The series of a policy are made at its first event
// of each metric (the NearLimit and StoreLatency series with the Decisions
// series) and kept in a map that is copied on write, so counting for a
// known policy is one atomic load, one map lookup and the instruments' own
// cost, with no lock and no allocation. A View is safe for concurrent use.
// Create one with [New].
type View struct {
	inst   Instruments
	near   NearRule
	caches [numCounted]cache
}

var _ observe.PolicyObserver = (*View)(nil)

// New returns a View that counts in the series inst makes, by c, which
// must be valid (see [Config.Validate]).
func New(c Config, inst Instruments) *View {
	v := &View{inst: inst, near: NewNearRule(c.NearLimit)}
	for m := range v.caches {
		v.caches[m].init(c.MaxPolicies, func(policy, rule string) *series { return v.newSeries(Metric(m), policy, rule) })
	}
	return v
}

// counted returns the metric an event of op counts in, if any.
func counted(op observe.Op, shadow bool) (Metric, bool) {
	switch op {
	case observe.OpAllow:
		if shadow {
			return ShadowDecisions, true
		}
		return Decisions, true
	case observe.OpPeek:
		if shadow {
			return ShadowPeeks, true
		}
		return Peeks, true
	case observe.OpStoreError:
		return StoreErrors, true
	case observe.OpBreakerOpen:
		return BreakerOpens, true
	}
	return 0, false
}

// Observe counts e. It never blocks and, once e.Policy has been seen,
// does not allocate.
func (v *View) Observe(ctx context.Context, e observe.Event) {
	m, ok := counted(e.Op, e.Shadow)
	if !ok {
		return
	}
	rule := e.Rule
	if !infos[m].Rule {
		rule = ""
	}
	v.caches[m].get(seriesKey{e.Policy, rule}).count(ctx, &e, v.near)
	if fallback(&e) {
		v.caches[FallbackKeys].get(seriesKey{e.Policy, e.Rule}).count(ctx, &e, v.near)
	}
}

// fallback reports whether e counts in FallbackKeys too.
func fallback(e *observe.Event) bool { return e.KeyFallback && e.Op == observe.OpAllow && !e.Shadow }

// ObserverFor returns an Observer that counts the events of policy like
// Observe, with the policy's series resolved once, at its first event of
// each metric, which saves a map lookup per event. Events of other
// policies are counted by Observe.
func (v *View) ObserverFor(policy string) observe.Observer {
	return &bound{v: v, policy: policy}
}

// bound is a View prepared for one policy.
type bound struct {
	v      *View
	policy string
	series [numCounted]atomic.Pointer[series]
}

// Observe counts e, which is about b.policy unless a caller erred.
func (b *bound) Observe(ctx context.Context, e observe.Event) {
	if e.Policy != b.policy || e.Rule != "" {
		b.v.Observe(ctx, e)
		return
	}
	m, ok := counted(e.Op, e.Shadow)
	if !ok {
		return
	}
	b.seriesOf(m).count(ctx, &e, b.v.near)
	if fallback(&e) {
		b.seriesOf(FallbackKeys).count(ctx, &e, b.v.near)
	}
}

// seriesOf returns b's series of m, resolved at its first event.
func (b *bound) seriesOf(m Metric) *series {
	s := b.series[m].Load()
	if s == nil {
		s = b.v.caches[m].get(seriesKey{policy: b.policy})
		b.series[m].Store(s)
	}
	return s
}

// series are the instruments of one metric and one policy.
type series struct {
	byOutcome bool
	counters  [numOutcomes]Counter // by observe.Outcome, or the one counter at 0
	latency   Histogram            // Decisions and Peeks
	near      Counter              // Decisions
}

func (v *View) newSeries(m Metric, label, rule string) *series {
	s := &series{byOutcome: m.Info().Outcome}
	if s.byOutcome {
		for o := range s.counters {
			s.counters[o] = v.inst.Counter(m, label, rule, observe.Outcome(o).String())
		}
	} else {
		s.counters[0] = v.inst.Counter(m, label, rule, "")
	}
	switch m {
	case Decisions:
		s.near = v.inst.Counter(NearLimit, label, rule, "")
		fallthrough
	case Peeks:
		s.latency = v.inst.Histogram(StoreLatency, label, rule)
	}
	return s
}

// count counts e in s.
func (s *series) count(ctx context.Context, e *observe.Event, near NearRule) {
	o := e.Outcome()
	i := 0
	if s.byOutcome {
		i = int(o)
	}
	s.counters[i].Add(ctx)
	if s.latency != nil {
		s.latency.Record(ctx, e.Latency)
	}
	if s.near != nil && o == observe.OutcomeAllowed && near.Near(e.Decision) {
		s.near.Add(ctx)
	}
}

// seriesKey is what a metric's series are told apart by, besides the
// outcome: the policy name, and the rule of a rule set's limit ("" for
// other limiters' events, and for metrics without the rule label).
type seriesKey struct {
	policy, rule string
}

// cache holds the series of each policy name (and rule) seen, in a map
// that is copied on write: a lookup of a known policy is one atomic load
// and one map lookup, with no lock and no allocation.
type cache struct {
	m     atomic.Pointer[map[seriesKey]*series]
	mu    sync.Mutex
	max   int
	build func(label, rule string) *series
	other *series // the OtherPolicy series, once built
}

func (c *cache) init(max int, build func(label, rule string) *series) {
	c.max, c.build = max, build
	c.m.Store(&map[seriesKey]*series{})
}

func (c *cache) get(k seriesKey) *series {
	if s, ok := (*c.m.Load())[k]; ok {
		return s
	}
	return c.add(k)
}

// add builds k's series; past c.max keys, the events of new ones count in
// the OtherPolicy series, whose rule label is empty.
func (c *cache) add(k seriesKey) *series {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.m.Load()
	if s, ok := old[k]; ok {
		return s
	}
	if len(old) >= c.max {
		if c.other == nil {
			c.other = c.build(OtherPolicy, "")
		}
		return c.other
	}
	s := c.build(Label(k.policy), k.rule)
	next := make(map[seriesKey]*series, len(old)+1)
	for x, y := range old {
		next[x] = y
	}
	next[k] = s
	c.m.Store(&next)
	return s
}
