// Package metricsview is what ratekit's metrics exporters, ratekitprom
// (Prometheus) and ratekitotel (OpenTelemetry), share, so that both count
// the same events in the same series:
//
//   - the catalogue of metrics ([Metric], [Metric.Info]): each metric's
//     Prometheus and OpenTelemetry names, unit, description and kind, and
//     the label values ([Label], [UnnamedPolicy], [OtherPolicy], the rule
//     of a rule set's limit);
//   - the options both take and their validation ([Config]), and the
//     near-limit rule ([NearRule]);
//   - a [View]: the observe.PolicyObserver that says which events count in
//     which series, at most [Config].MaxPolicies policies with series of
//     their own, and counts them in the instruments an exporter makes
//     ([Instruments]);
//   - the limiters watched at each collection ([Watches]).
//
// It imports neither Prometheus nor OpenTelemetry: the exporters live in
// modules of their own, which import this package. A change to it must
// keep compiling their released versions, or they must require the root
// version that makes it.
package metricsview

import "github.com/ratekit/ratekit/observe"

// Metric is one metric both exporters export.
type Metric uint8

// The metrics. Those up to [NearLimit] are counters the [View] counts per
// event; [StoreLatency] is the latency histogram of the AllowN and Peek
// events; the rest are read from the limiters of [Watches] at each
// collection.
const (
	Decisions Metric = iota
	Peeks
	ShadowDecisions
	ShadowPeeks
	StoreErrors
	BreakerOpens
	FallbackKeys
	NearLimit
	StoreLatency
	BreakerOpen
	MemoryKeys
	MemoryFreshDrops
	MemoryLossyEvictions
	LeaseKeys
	LeaseRefills
	LeaseDroppedUnits

	// NumMetrics is the number of metrics, for arrays indexed by Metric.
	NumMetrics = int(iota)
)

// Kind is the kind of instrument a metric is.
type Kind uint8

const (
	// KindCounter is a monotonic count: a Prometheus counter, an
	// OpenTelemetry Counter (or ObservableCounter for a watched limiter's).
	KindCounter Kind = iota
	// KindUpDownCounter is a count that can go down, such as keys held: a
	// Prometheus gauge, an OpenTelemetry ObservableUpDownCounter.
	KindUpDownCounter
	// KindGauge is a state: a Prometheus gauge, an OpenTelemetry
	// ObservableGauge.
	KindGauge
	// KindHistogram is a histogram of durations, in seconds.
	KindHistogram
)

// The label (attribute) names. Every metric has PolicyLabel; those whose
// [Info].Rule is set have RuleLabel too (the observe.Event Rule: the rule
// of a rule set's limit, whose name is then the policy label; empty for
// the events of other limiters), and those whose [Info].Outcome is set
// OutcomeLabel. No label ever holds a key or a path.
const (
	PolicyLabel  = "policy"
	RuleLabel    = "rule"
	OutcomeLabel = "outcome"
)

// UnnamedPolicy is the policy label of events whose policy has no name, as
// the HTTP headers call it.
const UnnamedPolicy = "default"

// OtherPolicy is the policy label of events of policies beyond the
// [Config].MaxPolicies first.
const OtherPolicy = "_other"

// Label returns the policy label of a policy name: [UnnamedPolicy] for "".
func Label(policy string) string {
	if policy == "" {
		return UnnamedPolicy
	}
	return policy
}

// Info describes one metric.
type Info struct {
	// Prom is the Prometheus name, such as "ratekit_decisions_total".
	Prom string
	// OTel is the OpenTelemetry name, such as "ratekit.decisions". The
	// OpenTelemetry-to-Prometheus translation (dots to underscores, the
	// unit's suffix, "_total" for a counter) makes Prom of it.
	OTel string
	// Unit is the OpenTelemetry unit (UCUM): "s", or a count's annotation
	// such as "{decision}".
	Unit string
	// Help is the description both exporters give.
	Help string
	// Kind is the kind of instrument.
	Kind Kind
	// Outcome reports whether the metric has the outcome label besides the
	// policy label.
	Outcome bool
	// Rule reports whether the metric has the rule label besides the
	// policy label: the metrics of decisions, which a rule set's limits
	// make.
	Rule bool
	// Watched reports whether the metric is read from the limiters of
	// [Watches] at each collection rather than counted per event.
	Watched bool
}

// Info returns m's description.
func (m Metric) Info() Info { return infos[m] }

var infos = [NumMetrics]Info{
	Decisions: {
		Prom: "ratekit_decisions_total", OTel: "ratekit.decisions", Unit: "{decision}", Outcome: true, Rule: true,
		Help: "AllowN calls by policy and outcome (allowed, denied, error).",
	},
	Peeks: {
		Prom: "ratekit_peeks_total", OTel: "ratekit.peeks", Unit: "{peek}", Outcome: true, Rule: true,
		Help: "Peek calls by policy and outcome (allowed, denied, error).",
	},
	ShadowDecisions: {
		Prom: "ratekit_shadow_decisions_total", OTel: "ratekit.shadow.decisions", Unit: "{decision}", Outcome: true, Rule: true,
		Help: "What a shadow candidate policy would have decided on AllowN, by outcome; nothing was enforced by it.",
	},
	ShadowPeeks: {
		Prom: "ratekit_shadow_peeks_total", OTel: "ratekit.shadow.peeks", Unit: "{peek}", Outcome: true, Rule: true,
		Help: "What a shadow candidate policy would have answered to Peek, by outcome.",
	},
	StoreErrors: {
		Prom: "ratekit_store_errors_total", OTel: "ratekit.store.errors", Unit: "{error}",
		Help: "Outage errors of a remote store that a Failover decided by its failure mode.",
	},
	BreakerOpens: {
		Prom: "ratekit_breaker_opens_total", OTel: "ratekit.breaker.opens", Unit: "{opening}",
		Help: "Times a Failover's circuit breaker opened.",
	},
	FallbackKeys: {
		Prom: "ratekit_fallback_keys_total", OTel: "ratekit.fallback_keys", Unit: "{decision}", Outcome: true, Rule: true,
		Help: "AllowN calls of requests keyed by their adapter's fallback key (httplimit.FallbackKey), their own key missing or unusable, by outcome.",
	},
	NearLimit: {
		Prom: "ratekit_near_limit_total", OTel: "ratekit.near_limit", Unit: "{decision}", Rule: true,
		Help: "Allowed AllowN calls that left less than the near-limit fraction of the policy's limit (by default 10%).",
	},
	StoreLatency: {
		Prom: "ratekit_store_latency_seconds", OTel: "ratekit.store.latency", Unit: "s", Kind: KindHistogram, Rule: true,
		Help: "Time the limiter took to decide an AllowN or Peek.",
	},
	BreakerOpen: {
		Prom: "ratekit_breaker_open", OTel: "ratekit.breaker.open", Unit: "{breaker}", Kind: KindGauge, Watched: true,
		Help: "1 while a Failover's circuit breaker is open, else 0.",
	},
	MemoryKeys: {
		Prom: "ratekit_memory_keys", OTel: "ratekit.memory.keys", Unit: "{key}", Kind: KindUpDownCounter, Watched: true,
		Help: "Keys a Memory limiter holds, fresh ones not yet dropped included.",
	},
	MemoryFreshDrops: {
		Prom: "ratekit_memory_fresh_drops_total", OTel: "ratekit.memory.fresh_drops", Unit: "{key}", Watched: true,
		Help: "Keys a Memory limiter dropped because they had become fresh: no information lost.",
	},
	MemoryLossyEvictions: {
		Prom: "ratekit_memory_lossy_evictions_total", OTel: "ratekit.memory.lossy_evictions", Unit: "{key}", Watched: true,
		Help: "Keys a Memory limiter evicted while they still held usage, because it was full.",
	},
	LeaseKeys: {
		Prom: "ratekit_lease_keys", OTel: "ratekit.lease.keys", Unit: "{key}", Kind: KindUpDownCounter, Watched: true,
		Help: "Keys a Leased limiter holds a lease for.",
	},
	LeaseRefills: {
		Prom: "ratekit_lease_refills_total", OTel: "ratekit.lease.refills", Unit: "{call}", Watched: true,
		Help: "Remote calls a Leased limiter made to top up a lease.",
	},
	LeaseDroppedUnits: {
		Prom: "ratekit_lease_dropped_units_total", OTel: "ratekit.lease.dropped_units", Unit: "{unit}", Watched: true,
		Help: "Leased units that expired (or were evicted or reset) before they were spent.",
	},
}

// numOutcomes is the number of observe.Outcome values: OutcomeError is the
// last (TestOutcomesCoverCore checks that observe has no outcome past it).
const numOutcomes = int(observe.OutcomeError) + 1
