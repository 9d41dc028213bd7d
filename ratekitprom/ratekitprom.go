// Package ratekitprom exports ratekit's decisions and stores as Prometheus
// metrics (github.com/prometheus/client_golang). It lives apart from core so
// that users of core do not download the Prometheus client.
//
// [New] returns a [Metrics]: an [observe.Observer] for [observe.New],
// [observe.NewShadow] and [observe.FailoverHooks], and a prometheus.Collector
// that also reads the stats of the limiters given to [Metrics.WatchMemory],
// [Metrics.WatchLeased] and [Metrics.WatchFailover] at each scrape:
//
//	m, err := ratekitprom.New(prometheus.DefaultRegisterer)
//	l, err := observe.New(mem, m)
//	err = m.WatchMemory("api", mem)
//
// # Metrics
//
// Every metric has a "policy" label (the [observe.Event] Policy; "default" for
// an unnamed policy) and the decision counters an "outcome" label
// ("allowed", "denied", "error"). No label ever holds a key or a path, so
// the number of series is bounded by the number of policies (at most
// [WithMaxPolicies], default [DefaultMaxPolicies]; more are counted under
// the policy "_other").
//
//	ratekit_decisions_total{policy,outcome}         AllowN calls
//	ratekit_peeks_total{policy,outcome}             Peek calls
//	ratekit_shadow_decisions_total{policy,outcome}  AllowN calls of a shadow candidate: what it would have decided
//	ratekit_shadow_peeks_total{policy,outcome}      Peek calls of a shadow candidate
//	ratekit_store_latency_seconds{policy}           histogram: time to decide an AllowN or Peek (shadow candidates excluded)
//	ratekit_store_errors_total{policy}              outage errors a Failover met and decided by its failure mode
//	ratekit_breaker_opens_total{policy}             times a Failover's circuit breaker opened
//	ratekit_breaker_open{policy}                    1 while a watched Failover's breaker is open, else 0
//	ratekit_memory_keys{policy}                     keys a watched Memory limiter holds
//	ratekit_memory_fresh_drops_total{policy}        keys it dropped because they were fresh (nothing lost)
//	ratekit_memory_lossy_evictions_total{policy}    keys it evicted while they held usage
//	ratekit_lease_keys{policy}                      keys a watched Leased limiter holds a lease for
//	ratekit_lease_refills_total{policy}             remote calls it made to top up a lease
//	ratekit_lease_dropped_units_total{policy}       leased units that expired unspent
//
// Reset calls are not counted. The rejection ratio of each policy over five
// minutes is
//
//	sum by (policy) (rate(ratekit_decisions_total{outcome="denied"}[5m]))
//	  / sum by (policy) (rate(ratekit_decisions_total[5m]))
//
// # Cost
//
// Observe does no allocation once a policy has been seen: the series of a
// policy are resolved once and kept in a copy-on-write map, so an AllowN
// costs a map lookup, one counter increment and one histogram observation.
package ratekitprom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/observe"
)

// DefaultMaxPolicies is the number of distinct policy names a [Metrics]
// keeps series for unless [WithMaxPolicies] says otherwise.
const DefaultMaxPolicies = 256

// UnnamedPolicy is the policy label of events whose policy has no name, as
// the HTTP headers call it.
const UnnamedPolicy = "default"

// OtherPolicy is the policy label of events of policies beyond the
// [WithMaxPolicies] first.
const OtherPolicy = "_other"

// DefaultLatencyBuckets returns the default upper bounds of the
// ratekit_store_latency_seconds buckets, in seconds: from 1µs (a memory
// store decides in well under that) to 1 s (a store that slow is down). It
// returns a new slice on every call, which the caller may change.
func DefaultLatencyBuckets() []float64 {
	return []float64{
		1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
		1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
	}
}

// Metrics is an [observe.Observer] that counts events as Prometheus metrics, and
// a prometheus.Collector of them and of the watched limiters' stats. See the
// package documentation for the metrics.
//
// A Metrics is safe for concurrent use. Create one with [New].
type Metrics struct {
	decisions, peeks, shadow, shadowPeeks *prometheus.CounterVec
	latency                               *latencyVec
	storeErrors, breakerOpens             *prometheus.CounterVec

	decisionC, peekC          cache[timedOutcomes]
	shadowC, shadowPeekC      cache[outcomes]
	storeErrorC, breakerOpenC cache[prometheus.Counter]

	stats statsCollector
}

var (
	_ observe.PolicyObserver = (*Metrics)(nil)
	_ prometheus.Collector   = (*Metrics)(nil)
)

// Option configures a [Metrics].
type Option func(*config)

type config struct {
	buckets     []float64
	maxPolicies int
}

// WithLatencyBuckets sets the upper bounds, in seconds, of the
// ratekit_store_latency_seconds buckets (increasing). Default:
// [DefaultLatencyBuckets].
func WithLatencyBuckets(b []float64) Option {
	return func(c *config) { c.buckets = append([]float64(nil), b...) }
}

// WithMaxPolicies bounds the number of distinct policy names that get
// series of their own (at least 1); the events of any more are counted
// under [OtherPolicy], so a policy name made from user input cannot flood
// the registry. Default: [DefaultMaxPolicies].
func WithMaxPolicies(n int) Option { return func(c *config) { c.maxPolicies = n } }

// New returns a Metrics and registers it with reg, unless reg is nil (then
// register it yourself, it is a prometheus.Collector). It fails if an
// option is invalid or the registration fails, such as when another
// Metrics is registered with reg already.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	c := config{buckets: DefaultLatencyBuckets(), maxPolicies: DefaultMaxPolicies}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("ratekitprom: nil option")
		}
		opt(&c)
	}
	if c.maxPolicies < 1 {
		return nil, fmt.Errorf("ratekitprom: WithMaxPolicies(%d): must be at least 1", c.maxPolicies)
	}
	for i := 1; i < len(c.buckets); i++ {
		if c.buckets[i] <= c.buckets[i-1] {
			return nil, fmt.Errorf("ratekitprom: WithLatencyBuckets: bounds must increase, %v then %v", c.buckets[i-1], c.buckets[i])
		}
	}
	outcomeVec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"policy", "outcome"})
	}
	policyVec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"policy"})
	}
	m := &Metrics{
		decisions:    outcomeVec("ratekit_decisions_total", "AllowN calls by policy and outcome (allowed, denied, error)."),
		peeks:        outcomeVec("ratekit_peeks_total", "Peek calls by policy and outcome (allowed, denied, error)."),
		shadow:       outcomeVec("ratekit_shadow_decisions_total", "What a shadow candidate policy would have decided on AllowN, by outcome; nothing was enforced by it."),
		shadowPeeks:  outcomeVec("ratekit_shadow_peeks_total", "What a shadow candidate policy would have answered to Peek, by outcome."),
		latency:      newLatencyVec("ratekit_store_latency_seconds", "Time the limiter took to decide an AllowN or Peek.", c.buckets),
		storeErrors:  policyVec("ratekit_store_errors_total", "Outage errors of a remote store that a Failover decided by its failure mode."),
		breakerOpens: policyVec("ratekit_breaker_opens_total", "Times a Failover's circuit breaker opened."),
	}
	m.decisionC.init(c.maxPolicies, m.timedOutcomesOf(m.decisions))
	m.peekC.init(c.maxPolicies, m.timedOutcomesOf(m.peeks))
	m.shadowC.init(c.maxPolicies, outcomesOf(m.shadow))
	m.shadowPeekC.init(c.maxPolicies, outcomesOf(m.shadowPeeks))
	m.storeErrorC.init(c.maxPolicies, counterOf(m.storeErrors))
	m.breakerOpenC.init(c.maxPolicies, counterOf(m.breakerOpens))
	m.stats.init()
	if reg != nil {
		if err := reg.Register(m); err != nil {
			return nil, fmt.Errorf("ratekitprom: register: %w", err)
		}
	}
	return m, nil
}

// Observe counts e. See the package documentation for what each event
// counts in. It never blocks and, once e.Policy has been seen, does not
// allocate.
func (m *Metrics) Observe(_ context.Context, e observe.Event) {
	switch e.Op {
	case observe.OpAllow:
		if e.Shadow {
			m.shadowC.get(e.Policy)[e.Outcome()].Inc()
			return
		}
		m.decisionC.get(e.Policy).count(e)
	case observe.OpPeek:
		if e.Shadow {
			m.shadowPeekC.get(e.Policy)[e.Outcome()].Inc()
			return
		}
		m.peekC.get(e.Policy).count(e)
	case observe.OpStoreError:
		m.storeErrorC.get(e.Policy).Inc()
	case observe.OpBreakerOpen:
		m.breakerOpenC.get(e.Policy).Inc()
	}
}

// ObserverFor returns an Observer that counts the events of policy like
// Observe, with the policy's series resolved once, at its first event of
// each kind: observe.New calls it when it knows the policy name, which
// saves a map lookup per event. Events of other policies are counted by
// Observe.
func (m *Metrics) ObserverFor(policy string) observe.Observer {
	return &policyMetrics{m: m, policy: policy}
}

// policyMetrics is a Metrics prepared for one policy.
type policyMetrics struct {
	m                  *Metrics
	policy             string
	decision, peek     atomic.Pointer[timedOutcomes]
	shadow, shadowPeek atomic.Pointer[outcomes]
}

// resolve returns the series in p, or resolves them in c and keeps them.
func resolve[T any](p *atomic.Pointer[T], c *cache[T], policy string) *T {
	if v := p.Load(); v != nil {
		return v
	}
	v := c.get(policy)
	p.Store(&v)
	return &v
}

// Observe counts e, which is about p.policy unless a caller erred.
func (p *policyMetrics) Observe(ctx context.Context, e observe.Event) {
	if e.Policy != p.policy {
		p.m.Observe(ctx, e)
		return
	}
	switch {
	case e.Op == observe.OpAllow && !e.Shadow:
		resolve(&p.decision, &p.m.decisionC, p.policy).count(e)
	case e.Op == observe.OpAllow:
		resolve(&p.shadow, &p.m.shadowC, p.policy)[e.Outcome()].Inc()
	case e.Op == observe.OpPeek && !e.Shadow:
		resolve(&p.peek, &p.m.peekC, p.policy).count(e)
	case e.Op == observe.OpPeek:
		resolve(&p.shadowPeek, &p.m.shadowPeekC, p.policy)[e.Outcome()].Inc()
	default:
		p.m.Observe(ctx, e)
	}
}

// Describe sends the descriptors of every metric to ch, for
// prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	m.stats.Describe(ch)
}

// Collect sends the current value of every metric to ch, reading the stats
// of the watched limiters, for prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	m.stats.Collect(ch)
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.decisions, m.peeks, m.shadow, m.shadowPeeks, m.latency, m.storeErrors, m.breakerOpens}
}

// numOutcomes is the number of observe.Outcome values: OutcomeError is the
// last (TestOutcomesCoverCore checks that core has no outcome past it).
const numOutcomes = int(observe.OutcomeError) + 1

// outcomes are the counters of one policy, indexed by observe.Outcome.
type outcomes [numOutcomes]prometheus.Counter

func outcomesOf(v *prometheus.CounterVec) func(string) outcomes {
	return func(p string) outcomes {
		var o outcomes
		for i := range o {
			o[i] = v.WithLabelValues(p, observe.Outcome(i).String())
		}
		return o
	}
}

// timedOutcomes are the counters of one policy and its latency histogram,
// found with one lookup.
type timedOutcomes struct {
	outcomes outcomes
	latency  *latencyHist
}

// count counts e's outcome and its latency.
func (t timedOutcomes) count(e observe.Event) {
	t.outcomes[e.Outcome()].Inc()
	t.latency.observe(e.Latency)
}

func (m *Metrics) timedOutcomesOf(v *prometheus.CounterVec) func(string) timedOutcomes {
	count := outcomesOf(v)
	return func(p string) timedOutcomes {
		return timedOutcomes{outcomes: count(p), latency: m.latency.child(p)}
	}
}

func counterOf(v *prometheus.CounterVec) func(string) prometheus.Counter {
	return func(p string) prometheus.Counter { return v.WithLabelValues(p) }
}

// cache holds the series of each policy name seen, in a map that is copied
// on write: a lookup of a known policy is one atomic load and one map
// lookup, with no lock and no allocation.
type cache[T any] struct {
	m     atomic.Pointer[map[string]T]
	mu    sync.Mutex
	max   int
	build func(policy string) T
	other *T // the OtherPolicy series, once built
}

func (c *cache[T]) init(max int, build func(string) T) {
	c.max, c.build = max, build
	c.m.Store(&map[string]T{})
}

func (c *cache[T]) get(policy string) T {
	if v, ok := (*c.m.Load())[policy]; ok {
		return v
	}
	return c.add(policy)
}

func (c *cache[T]) add(policy string) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.m.Load()
	if v, ok := old[policy]; ok {
		return v
	}
	if len(old) >= c.max {
		if c.other == nil {
			v := c.build(OtherPolicy)
			c.other = &v
		}
		return *c.other
	}
	label := policy
	if policy == "" {
		label = UnnamedPolicy
	}
	v := c.build(label)
	next := make(map[string]T, len(old)+1)
	for k, x := range old {
		next[k] = x
	}
	next[policy] = v
	c.m.Store(&next)
	return v
}
