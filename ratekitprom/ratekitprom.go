// Package ratekitprom exports ratekit's decisions and stores as Prometheus
// metrics (github.com/prometheus/client_golang). It lives apart from core so
// that users of core do not download the Prometheus client.
//
// [New] returns a [Metrics]: an [observe.Observer] for [observe.New],
// [observe.NewShadow], [observe.FailoverHooks] and rules.NewObservedLimiter,
// and a prometheus.Collector
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
// an unnamed policy), the decision counters an "outcome" label
// ("allowed", "denied", "error"), and the metrics of decisions a "rule"
// label (see "Rule sets"). No label ever holds a key or a path, so
// the number of series is bounded by the number of policies (at most
// [WithMaxPolicies], default [DefaultMaxPolicies]; more are counted under
// the policy "_other").
//
//	ratekit_decisions_total{policy,rule,outcome}         AllowN calls
//	ratekit_peeks_total{policy,rule,outcome}             Peek calls
//	ratekit_shadow_decisions_total{policy,rule,outcome}  AllowN calls of a shadow candidate: what it would have decided
//	ratekit_shadow_peeks_total{policy,rule,outcome}      Peek calls of a shadow candidate
//	ratekit_store_latency_seconds{policy,rule}           histogram: time to decide an AllowN or Peek (shadow candidates excluded)
//	ratekit_near_limit_total{policy,rule}                allowed AllowN calls that left less than a fraction of the limit
//	ratekit_fallback_keys_total{policy,rule,outcome}     AllowN calls of requests keyed by their adapter's fallback key
//	ratekit_store_errors_total{policy}                   outage errors a Failover met and decided by its failure mode
//	ratekit_breaker_opens_total{policy}                  times a Failover's circuit breaker opened
//	ratekit_breaker_open{policy}                         1 while a watched Failover's breaker is open, else 0
//	ratekit_memory_keys{policy}                          keys a watched Memory limiter holds
//	ratekit_memory_fresh_drops_total{policy}             keys it dropped because they were fresh (nothing lost)
//	ratekit_memory_lossy_evictions_total{policy}         keys it evicted while they held usage
//	ratekit_lease_keys{policy}                           keys a watched Leased limiter holds a lease for
//	ratekit_lease_refills_total{policy}                  remote calls it made to top up a lease
//	ratekit_lease_dropped_units_total{policy}            leased units that expired unspent
//
// Reset and Refund calls are not counted. The rejection ratio of each
// policy over five minutes is
//
//	sum by (policy) (rate(ratekit_decisions_total{outcome="denied"}[5m]))
//	  / sum by (policy) (rate(ratekit_decisions_total[5m]))
//
// # Rule sets
//
// A rules Limiter made by rules.NewObservedLimiter reports each limit a
// request reaches: the rule's name is the "rule" label and the limit's
// name the "policy" label, so that every limit of the file has series of
// its own (and counts as one policy against [WithMaxPolicies]). An enforced
// limit's decision counts in ratekit_decisions_total by what that limit
// decided (one that would have allowed a request another limit refused
// counts it allowed), a shadow limit's in ratekit_shadow_decisions_total,
// or ratekit_shadow_peeks_total for a request the enforced limits refused.
// Both names come from the rule set's file, never from a request.
//
// Events from outside a rule set have the rule label "", which Prometheus
// stores as no label at all: their series are the ones they were before
// the label was added, and queries that do not name it are unchanged. A
// query by policy adds up the limits of one name in several rules (a
// login rule's per-ip and an api rule's per-ip); by rule and policy, it
// tells them apart:
//
//	sum by (rule, policy) (rate(ratekit_decisions_total{outcome="denied"}[5m]))
//	  / sum by (rule, policy) (rate(ratekit_decisions_total[5m]))
//
// # Keys near their limit
//
// ratekit_near_limit_total counts the allowed AllowN calls (not a shadow
// candidate's) whose Decision left less than a fraction f of the limit,
// [WithNearLimit] (default [DefaultNearLimit], 10%): with f in millionths,
// m = round(f × 1,000,000), when Remaining × 1,000,000 < m × Limit, in
// integer arithmetic. At 10% of a limit of 100, a Remaining of 9 counts and
// 10 does not; of a limit of 5, only 0 counts. The share of each policy's
// allowed traffic near its limit is
//
//	sum by (policy) (rate(ratekit_near_limit_total[5m]))
//	  / sum by (policy) (rate(ratekit_decisions_total{outcome="allowed"}[5m]))
//
// A share that grows before denials do says the limit is about to bite.
//
// # Cost
//
// Observe does no allocation once a policy has been seen: the series of a
// policy are resolved once and kept in a copy-on-write map, so an AllowN
// costs a map lookup, one counter increment and one histogram observation
// (two counter increments when it is near its limit).
//
// ratekitotel exports the same metrics through the OpenTelemetry metrics
// API, under names that translate to these.
package ratekitprom

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/internal/metricsview"
	"github.com/ratekit/ratekit/observe"
)

// DefaultMaxPolicies is the number of distinct policy names a [Metrics]
// keeps series for unless [WithMaxPolicies] says otherwise: 256.
const DefaultMaxPolicies = 256

// DefaultNearLimit is the fraction of the limit under which an allowed
// decision counts in ratekit_near_limit_total unless [WithNearLimit] says
// otherwise: 10%.
const DefaultNearLimit = 0.1

// UnnamedPolicy is the policy label of events whose policy has no name,
// "default", as the HTTP headers call it.
const UnnamedPolicy = "default"

// OtherPolicy is the policy label of events of policies beyond the
// [WithMaxPolicies] first: "_other".
const OtherPolicy = "_other"

// Metrics is an [observe.Observer] that counts events as Prometheus metrics, and
// a prometheus.Collector of them and of the watched limiters' stats. See the
// package documentation for the metrics.
//
// A Metrics is safe for concurrent use. Create one with [New].
type Metrics struct {
	view    *metricsview.View
	counts  [metricsview.NumMetrics]*prometheus.CounterVec // the counters the view counts in
	latency *latencyVec
	watched [metricsview.NumMetrics]*prometheus.Desc // the metrics read from watches
	watches metricsview.Watches
}

var (
	_ observe.PolicyObserver = (*Metrics)(nil)
	_ prometheus.Collector   = (*Metrics)(nil)
)

// Option configures a [Metrics].
type Option func(*config)

type config = metricsview.Config

// WithLatencyBuckets sets the upper bounds, in seconds, of the
// ratekit_store_latency_seconds buckets (finite, increasing, at least
// one). Default: 1µs, 2.5µs, 5µs, 10µs, 25µs, 50µs, 100µs, 250µs, 500µs,
// 1ms, 2.5ms, 5ms, 10ms, 25ms, 50ms, 100ms, 250ms and 1s: from under what
// a memory store takes to decide to what says a store is down.
func WithLatencyBuckets(b []float64) Option {
	return func(c *config) { c.LatencyBuckets = append([]float64(nil), b...) }
}

// WithMaxPolicies bounds the number of distinct policy names that get
// series of their own (at least 1), a rule set's limit (its rule and
// name) counting as one; the events of any more are counted under
// [OtherPolicy], so a policy name made from user input cannot flood the
// registry. Default: [DefaultMaxPolicies].
func WithMaxPolicies(n int) Option { return func(c *config) { c.MaxPolicies = n } }

// WithNearLimit sets the fraction f of the limit under which an allowed
// decision counts in ratekit_near_limit_total: 0 < f ≤ 1, kept in
// millionths (so at least 0.000001). See the package documentation for
// the exact rule. Default: [DefaultNearLimit].
func WithNearLimit(f float64) Option { return func(c *config) { c.NearLimit = f } }

// New returns a Metrics and registers it with reg, unless reg is nil (then
// register it yourself, it is a prometheus.Collector). It fails if an
// option is invalid or the registration fails, such as when another
// Metrics is registered with reg already.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	c := metricsview.DefaultConfig()
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("ratekitprom: New: option %d is nil", i+1)
		}
		opt(&c)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("ratekitprom: New: %w", err)
	}
	m := &Metrics{}
	for i := range metricsview.NumMetrics {
		info := metricsview.Metric(i).Info()
		labels := []string{metricsview.PolicyLabel}
		if info.Rule {
			labels = append(labels, metricsview.RuleLabel)
		}
		if info.Outcome {
			labels = append(labels, metricsview.OutcomeLabel)
		}
		switch {
		case info.Watched:
			m.watched[i] = prometheus.NewDesc(info.Prom, info.Help, labels, nil)
		case info.Kind == metricsview.KindHistogram:
			m.latency = newLatencyVec(info.Prom, info.Help, labels, c.LatencyBuckets)
		default:
			m.counts[i] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: info.Prom, Help: info.Help}, labels)
		}
	}
	m.view = metricsview.New(c, instruments{m})
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
func (m *Metrics) Observe(ctx context.Context, e observe.Event) { m.view.Observe(ctx, e) }

// ObserverFor returns an Observer that counts the events of policy like
// Observe, with the policy's series resolved once, at its first event of
// each kind: observe.New calls it when it knows the policy name, which
// saves a map lookup per event. Events of other policies are counted by
// Observe.
func (m *Metrics) ObserverFor(policy string) observe.Observer { return m.view.ObserverFor(policy) }

// Describe sends the descriptors of every metric to ch, for
// prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range m.counts {
		if v != nil {
			v.Describe(ch)
		}
	}
	m.latency.Describe(ch)
	for _, d := range m.watched {
		if d != nil {
			ch <- d
		}
	}
}

// Collect sends the current value of every metric to ch, reading the stats
// of the watched limiters, for prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, v := range m.counts {
		if v != nil {
			v.Collect(ch)
		}
	}
	m.latency.Collect(ch)
	m.watches.Read(func(label string, metric metricsview.Metric, v int64) {
		t := prometheus.GaugeValue
		if metric.Info().Kind == metricsview.KindCounter {
			t = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(m.watched[metric], t, float64(v), label)
	})
}

// instruments makes the series the view counts in.
type instruments struct{ m *Metrics }

func (i instruments) Counter(metric metricsview.Metric, policy, rule, outcome string) metricsview.Counter {
	values := make([]string, 1, 3)
	values[0] = policy
	if metric.Info().Rule {
		values = append(values, rule)
	}
	if outcome != "" {
		values = append(values, outcome)
	}
	return counter{i.m.counts[metric].WithLabelValues(values...)}
}

func (i instruments) Histogram(_ metricsview.Metric, policy, rule string) metricsview.Histogram {
	return i.m.latency.child(policy, rule)
}

// counter is a Prometheus counter as the view counts in it.
type counter struct{ c prometheus.Counter }

func (c counter) Add(context.Context) { c.c.Inc() }
