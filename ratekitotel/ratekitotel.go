// Package ratekitotel exports ratekit's decisions and stores as
// OpenTelemetry metrics (go.opentelemetry.io/otel/metric): the metrics of
// ratekitprom, so that a service that exports OTLP needs no Prometheus
// client. It lives apart from core so that users of core do not download
// OpenTelemetry.
//
// [New] returns a [Metrics]: an [observe.Observer] for [observe.New],
// [observe.NewShadow], [observe.FailoverHooks] and
// rules.NewObservedLimiter, whose instruments come
// from the global MeterProvider or the one given with [WithMeterProvider],
// and which also reads the stats of the limiters given to
// [Metrics.WatchMemory], [Metrics.WatchLeased] and [Metrics.WatchFailover]
// at each collection:
//
//	m, err := ratekitotel.New(ratekitotel.WithMeterProvider(provider))
//	l, err := observe.New(mem, m)
//	err = m.WatchMemory("api", mem)
//
// # Metrics
//
// The instruments are those of ratekitprom under OpenTelemetry names, with
// the same attributes: "policy" on every one (the [observe.Event] Policy;
// "default" for an unnamed policy; at most [WithMaxPolicies], default
// [DefaultMaxPolicies], more under "_other"), "outcome" ("allowed",
// "denied", "error") on the decision counters, and "rule" on the metrics
// of decisions of a rule set's limits. No attribute ever holds a key or a
// path.
//
// A rules Limiter made by rules.NewObservedLimiter reports each limit a
// request reaches with the rule's name as "rule" and the limit's name as
// "policy" (see ratekitprom, "Rule sets"); both come from the rule set's
// file, never from a request. The data points of other limiters have no
// "rule" attribute, as before rule sets were (Prometheus's label is ""
// for them, which Prometheus stores as no label: the same series). The OpenTelemetry-to-Prometheus translation (dots to
// underscores, the unit's suffix, "_total" for a counter) makes
// ratekitprom's names of them, so the same dashboards and queries serve:
//
//	name                           unit        instrument               Prometheus name
//	ratekit.decisions              {decision}  ObservableCounter        ratekit_decisions_total
//	ratekit.peeks                  {peek}      ObservableCounter        ratekit_peeks_total
//	ratekit.shadow.decisions       {decision}  ObservableCounter        ratekit_shadow_decisions_total
//	ratekit.shadow.peeks           {peek}      ObservableCounter        ratekit_shadow_peeks_total
//	ratekit.store.latency          s           Histogram                ratekit_store_latency_seconds
//	ratekit.near_limit             {decision}  ObservableCounter        ratekit_near_limit_total
//	ratekit.fallback_keys          {decision}  ObservableCounter        ratekit_fallback_keys_total
//	ratekit.store.errors           {error}     ObservableCounter        ratekit_store_errors_total
//	ratekit.breaker.opens          {opening}   ObservableCounter        ratekit_breaker_opens_total
//	ratekit.breaker.open           {breaker}   ObservableGauge          ratekit_breaker_open
//	ratekit.memory.keys            {key}       ObservableUpDownCounter  ratekit_memory_keys
//	ratekit.memory.fresh_drops     {key}       ObservableCounter        ratekit_memory_fresh_drops_total
//	ratekit.memory.lossy_evictions {key}       ObservableCounter        ratekit_memory_lossy_evictions_total
//	ratekit.lease.keys             {key}       ObservableUpDownCounter  ratekit_lease_keys
//	ratekit.lease.refills          {call}      ObservableCounter        ratekit_lease_refills_total
//	ratekit.lease.dropped_units    {unit}      ObservableCounter        ratekit_lease_dropped_units_total
//
// The SDK exports the counters with the temporality its reader asks for.
//
// What each metric counts is documented in ratekitprom. ratekit.near_limit
// counts the allowed AllowN calls (not a shadow candidate's) that left
// less than a fraction f of the limit, [WithNearLimit] (default
// [DefaultNearLimit], 10%): with f in millionths, m = round(f × 1,000,000),
// when Remaining × 1,000,000 < m × Limit, in integer arithmetic. At 10% of
// a limit of 100, a Remaining of 9 counts and 10 does not.
//
// A policy's series exist, at zero, from its first event of their kind,
// as in Prometheus, so that a ratio of two of them is 0 rather than
// missing. The latency histogram's bucket bounds are given to the
// instrument as advice ([WithLatencyBuckets]); a View of the
// MeterProvider may change them.
//
// # Cost
//
// Observe does no allocation once a policy has been seen (with the SDK's
// MeterProvider): the series of a policy are made once and kept in a
// copy-on-write map. A counter is an atomic count that a callback reports
// at each collection, so an AllowN costs a map lookup, one atomic addition
// and the SDK's cost of one histogram Record (the API has no asynchronous
// histogram), which is most of it. The histogram records with the
// request's context, so an SDK that takes exemplars can link a slow
// decision to its trace.
package ratekitotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratekit/ratekit/internal/metricsview"
	"github.com/ratekit/ratekit/observe"
)

// ScopeName is the instrumentation scope of the Meter a [Metrics] takes
// from its MeterProvider: this package's import path.
const ScopeName = "github.com/ratekit/ratekit/ratekitotel"

// DefaultMaxPolicies is the number of distinct policy names a [Metrics]
// keeps series for unless [WithMaxPolicies] says otherwise: 256.
const DefaultMaxPolicies = 256

// DefaultNearLimit is the fraction of the limit under which an allowed
// decision counts in ratekit.near_limit unless [WithNearLimit] says
// otherwise: 10%.
const DefaultNearLimit = 0.1

// UnnamedPolicy is the policy attribute of events whose policy has no
// name, "default", as the HTTP headers call it.
const UnnamedPolicy = "default"

// OtherPolicy is the policy attribute of events of policies beyond the
// [WithMaxPolicies] first: "_other".
const OtherPolicy = "_other"

// Metrics is an [observe.Observer] that counts events in OpenTelemetry
// instruments, and reports the watched limiters' stats at each collection.
// See the package documentation for the instruments.
//
// A Metrics is safe for concurrent use. Create one with [New], one per
// MeterProvider: two on one provider add up in the same instruments.
type Metrics struct {
	view    *metricsview.View
	watches metricsview.Watches
}

var _ observe.PolicyObserver = (*Metrics)(nil)

// Option configures a [Metrics].
type Option func(*config)

type config struct {
	view     metricsview.Config
	provider metric.MeterProvider
	nilSet   bool // WithMeterProvider(nil) was given
}

// WithMeterProvider sets the MeterProvider the instruments come from, such
// as an SDK MeterProvider with an OTLP exporter's reader. It fails [New] if
// mp is nil. Default: the global MeterProvider, otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.provider, c.nilSet = mp, mp == nil }
}

// WithLatencyBuckets sets the upper bounds, in seconds, of the
// ratekit.store.latency buckets (finite, increasing, at least one), given
// to the histogram as advice. Default: 1µs, 2.5µs, 5µs, 10µs, 25µs,
// 50µs, 100µs, 250µs, 500µs, 1ms, 2.5ms, 5ms, 10ms, 25ms, 50ms, 100ms,
// 250ms and 1s: from under what a memory store takes to decide to what
// says a store is down.
func WithLatencyBuckets(b []float64) Option {
	return func(c *config) { c.view.LatencyBuckets = append([]float64(nil), b...) }
}

// WithMaxPolicies bounds the number of distinct policy names that get
// series of their own (at least 1), a rule set's limit (its rule and
// name) counting as one; the events of any more are counted under
// [OtherPolicy], so a policy name made from user input cannot flood the
// exporter. Default: [DefaultMaxPolicies].
func WithMaxPolicies(n int) Option { return func(c *config) { c.view.MaxPolicies = n } }

// WithNearLimit sets the fraction f of the limit under which an allowed
// decision counts in ratekit.near_limit: 0 < f ≤ 1, kept in millionths (so
// at least 0.000001). See the package documentation for the exact rule.
// Default: [DefaultNearLimit].
func WithNearLimit(f float64) Option { return func(c *config) { c.view.NearLimit = f } }

// New returns a Metrics whose instruments come from the MeterProvider of
// [WithMeterProvider], else the global one, under the scope [ScopeName].
// It fails if an option is invalid or the Meter refuses an instrument or
// the callback that reads the watched limiters.
func New(opts ...Option) (*Metrics, error) {
	c := config{view: metricsview.DefaultConfig()}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("ratekitotel: New: option %d is nil", i+1)
		}
		opt(&c)
	}
	if c.nilSet {
		return nil, errors.New("ratekitotel: New: WithMeterProvider(nil): a MeterProvider is required")
	}
	if err := c.view.Validate(); err != nil {
		return nil, fmt.Errorf("ratekitotel: New: %w", err)
	}
	if c.provider == nil {
		c.provider = otel.GetMeterProvider()
	}
	inst, err := newInstruments(c.provider.Meter(ScopeName), c.view.LatencyBuckets)
	if err != nil {
		return nil, err
	}
	m := &Metrics{view: metricsview.New(c.view, inst)}
	if err := inst.watch(&m.watches); err != nil {
		return nil, err
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

// instruments are the OpenTelemetry instruments, indexed by metric, and
// the counter series made so far.
type instruments struct {
	meter      metric.Meter
	latency    metric.Float64Histogram
	observable [metricsview.NumMetrics]metric.Int64Observable

	mu       sync.Mutex
	counters []*counter // read at each collection
}

func newInstruments(meter metric.Meter, buckets []float64) (*instruments, error) {
	inst := &instruments{meter: meter}
	for i := range metricsview.NumMetrics {
		info := metricsview.Metric(i).Info()
		desc, unit := metric.WithDescription(info.Help), metric.WithUnit(info.Unit)
		var err error
		switch info.Kind {
		case metricsview.KindHistogram:
			inst.latency, err = meter.Float64Histogram(info.OTel, desc, unit, metric.WithExplicitBucketBoundaries(buckets...))
		case metricsview.KindCounter:
			inst.observable[i], err = meter.Int64ObservableCounter(info.OTel, desc, unit)
		case metricsview.KindUpDownCounter:
			inst.observable[i], err = meter.Int64ObservableUpDownCounter(info.OTel, desc, unit)
		default:
			inst.observable[i], err = meter.Int64ObservableGauge(info.OTel, desc, unit)
		}
		if err != nil {
			return nil, fmt.Errorf("ratekitotel: %s: %w", info.OTel, err)
		}
	}
	return inst, nil
}

// attrs returns the attributes of a series: policy, rule when it is not
// empty (the series of other limiters' events keep the attributes they
// had before rule sets were), and outcome when it is not empty.
func attrs(policy, rule, outcome string) metric.MeasurementOption {
	kv := make([]attribute.KeyValue, 1, 3)
	kv[0] = attribute.String(metricsview.PolicyLabel, policy)
	if rule != "" {
		kv = append(kv, attribute.String(metricsview.RuleLabel, rule))
	}
	if outcome != "" {
		kv = append(kv, attribute.String(metricsview.OutcomeLabel, outcome))
	}
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// Counter returns a counter series, reported from the next collection on.
func (inst *instruments) Counter(m metricsview.Metric, policy, rule, outcome string) metricsview.Counter {
	c := &counter{observable: inst.observable[m], attrs: attrs(policy, rule, outcome)}
	inst.mu.Lock()
	inst.counters = append(inst.counters, c)
	inst.mu.Unlock()
	return c
}

// Histogram returns the latency series of a policy and rule.
func (inst *instruments) Histogram(_ metricsview.Metric, policy, rule string) metricsview.Histogram {
	return &histogram{h: inst.latency, opts: []metric.RecordOption{attrs(policy, rule, "")}}
}

// counter is one counter series: an atomic count that the collection
// callback reports as the value of an observable counter (a precomputed
// sum), which costs the request path one atomic addition where a
// synchronous Counter's Add costs the SDK's attribute handling and lookup.
type counter struct {
	n          atomic.Int64
	observable metric.Int64Observable
	attrs      metric.ObserveOption
}

func (c *counter) Add(context.Context) { c.n.Add(1) }

// histogram is the latency histogram with a policy's attributes. It is
// synchronous, as the OpenTelemetry API has no asynchronous histogram, and
// records with the request's context, so that an SDK can take exemplars.
type histogram struct {
	h    metric.Float64Histogram
	opts []metric.RecordOption
}

func (h *histogram) Record(ctx context.Context, d time.Duration) {
	h.h.Record(ctx, d.Seconds(), h.opts...)
}
