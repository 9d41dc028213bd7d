package ratekitprom_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/internal/metricsview/metricstest"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/ratekitprom"
)

var (
	ctx     = context.Background()
	start   = metricstest.Start
	errDown = metricstest.ErrDown
)

// must and newMemory, under the names these tests use.
func must[T any](t testing.TB) func(T, error) T { return metricstest.Must[T](t) }

var newMemory = metricstest.NewMemory

// TestScrape runs a known workload through every source of metrics and
// checks the scrape, series by series.
func TestScrape(t *testing.T) {
	clock := core.NewManualClock(start)
	reg := prometheus.NewPedanticRegistry()
	m := must[*ratekitprom.Metrics](t)(ratekitprom.New(reg, ratekitprom.WithLatencyBuckets([]float64{0.3, 1})))

	metricstest.Run(t, clock, m, metricstest.Watches{
		Memory:   func(p string, l *core.Memory) error { return m.WatchMemory(p, l) },
		Failover: func(p string, f *core.Failover) error { return m.WatchFailover(p, f) },
		Leased:   func(p string, l *hotkey.Leased) error { return m.WatchLeased(p, l) },
	})

	want := `
# HELP ratekit_breaker_open 1 while a Failover's circuit breaker is open, else 0.
# TYPE ratekit_breaker_open gauge
ratekit_breaker_open{policy="redis"} 1
# HELP ratekit_breaker_opens_total Times a Failover's circuit breaker opened.
# TYPE ratekit_breaker_opens_total counter
ratekit_breaker_opens_total{policy="redis"} 1
# HELP ratekit_decisions_total AllowN calls by policy and outcome (allowed, denied, error).
# TYPE ratekit_decisions_total counter
ratekit_decisions_total{outcome="allowed",policy="api",rule=""} 3
ratekit_decisions_total{outcome="denied",policy="api",rule=""} 2
ratekit_decisions_total{outcome="error",policy="api",rule=""} 1
# HELP ratekit_lease_dropped_units_total Leased units that expired (or were evicted or reset) before they were spent.
# TYPE ratekit_lease_dropped_units_total counter
ratekit_lease_dropped_units_total{policy="lease"} 0
# HELP ratekit_lease_keys Keys a Leased limiter holds a lease for.
# TYPE ratekit_lease_keys gauge
ratekit_lease_keys{policy="lease"} 1
# HELP ratekit_lease_refills_total Remote calls a Leased limiter made to top up a lease.
# TYPE ratekit_lease_refills_total counter
ratekit_lease_refills_total{policy="lease"} 2
# HELP ratekit_memory_fresh_drops_total Keys a Memory limiter dropped because they had become fresh: no information lost.
# TYPE ratekit_memory_fresh_drops_total counter
ratekit_memory_fresh_drops_total{policy="api"} 0
ratekit_memory_fresh_drops_total{policy="small"} 1
# HELP ratekit_memory_keys Keys a Memory limiter holds, fresh ones not yet dropped included.
# TYPE ratekit_memory_keys gauge
ratekit_memory_keys{policy="api"} 1
ratekit_memory_keys{policy="small"} 1
# HELP ratekit_memory_lossy_evictions_total Keys a Memory limiter evicted while they still held usage, because it was full.
# TYPE ratekit_memory_lossy_evictions_total counter
ratekit_memory_lossy_evictions_total{policy="api"} 0
ratekit_memory_lossy_evictions_total{policy="small"} 1
# HELP ratekit_near_limit_total Allowed AllowN calls that left less than the near-limit fraction of the policy's limit (by default 10%).
# TYPE ratekit_near_limit_total counter
ratekit_near_limit_total{policy="api",rule=""} 1
# HELP ratekit_peeks_total Peek calls by policy and outcome (allowed, denied, error).
# TYPE ratekit_peeks_total counter
ratekit_peeks_total{outcome="allowed",policy="api",rule=""} 1
ratekit_peeks_total{outcome="denied",policy="api",rule=""} 1
ratekit_peeks_total{outcome="error",policy="api",rule=""} 0
# HELP ratekit_shadow_decisions_total What a shadow candidate policy would have decided on AllowN, by outcome; nothing was enforced by it.
# TYPE ratekit_shadow_decisions_total counter
ratekit_shadow_decisions_total{outcome="allowed",policy="api-v2",rule=""} 2
ratekit_shadow_decisions_total{outcome="denied",policy="api-v2",rule=""} 3
ratekit_shadow_decisions_total{outcome="error",policy="api-v2",rule=""} 1
# HELP ratekit_shadow_peeks_total What a shadow candidate policy would have answered to Peek, by outcome.
# TYPE ratekit_shadow_peeks_total counter
ratekit_shadow_peeks_total{outcome="allowed",policy="api-v2",rule=""} 1
ratekit_shadow_peeks_total{outcome="denied",policy="api-v2",rule=""} 1
ratekit_shadow_peeks_total{outcome="error",policy="api-v2",rule=""} 0
# HELP ratekit_store_errors_total Outage errors of a remote store that a Failover decided by its failure mode.
# TYPE ratekit_store_errors_total counter
ratekit_store_errors_total{policy="redis"} 2
# HELP ratekit_store_latency_seconds Time the limiter took to decide an AllowN or Peek.
# TYPE ratekit_store_latency_seconds histogram
ratekit_store_latency_seconds_bucket{policy="api",rule="",le="0.3"} 6
ratekit_store_latency_seconds_bucket{policy="api",rule="",le="1"} 8
ratekit_store_latency_seconds_bucket{policy="api",rule="",le="+Inf"} 8
ratekit_store_latency_seconds_sum{policy="api",rule=""} 2.5
ratekit_store_latency_seconds_count{policy="api",rule=""} 8
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndLint(reg); err != nil || len(n) != 0 {
		t.Errorf("lint: %v %v", n, err)
	}
}

// TestPolicyLabels checks the labels of an unnamed policy and that the
// number of policies with series of their own is bounded.
func TestPolicyLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := must[*ratekitprom.Metrics](t)(ratekitprom.New(reg, ratekitprom.WithMaxPolicies(2)))
	for _, p := range []string{"", "a", "b", "c", "a", ""} {
		m.Observe(ctx, observe.Event{Op: observe.OpStoreError, Policy: p, Err: errDown})
	}
	want := `
# HELP ratekit_store_errors_total Outage errors of a remote store that a Failover decided by its failure mode.
# TYPE ratekit_store_errors_total counter
ratekit_store_errors_total{policy="_other"} 2
ratekit_store_errors_total{policy="a"} 2
ratekit_store_errors_total{policy="default"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_store_errors_total"); err != nil {
		t.Error(err)
	}
}

func TestErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := must[*ratekitprom.Metrics](t)(ratekitprom.New(reg))
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"second Metrics", func() error { _, err := ratekitprom.New(reg); return err }(), "ratekitprom: register: duplicate metrics collector registration attempted"},
		{"nil option", func() error { _, err := ratekitprom.New(nil, nil); return err }(), "ratekitprom: New: option 1 is nil"},
		{"nil option after a good one", func() error { _, err := ratekitprom.New(nil, ratekitprom.WithMaxPolicies(2), nil); return err }(), "ratekitprom: New: option 2 is nil"},
		{"max policies", func() error { _, err := ratekitprom.New(nil, ratekitprom.WithMaxPolicies(0)); return err }(), "ratekitprom: New: WithMaxPolicies(0): must be at least 1"},
		{"buckets", func() error {
			_, err := ratekitprom.New(nil, ratekitprom.WithLatencyBuckets([]float64{1, 1}))
			return err
		}(), "ratekitprom: New: WithLatencyBuckets: bounds must increase, 1 then 1"},
		{"no buckets", func() error { _, err := ratekitprom.New(nil, ratekitprom.WithLatencyBuckets(nil)); return err }(),
			"ratekitprom: New: WithLatencyBuckets: at least one bound is required"},
		{"near 0", func() error { _, err := ratekitprom.New(nil, ratekitprom.WithNearLimit(0)); return err }(),
			"ratekitprom: New: WithNearLimit(0): the fraction must be more than 0 and at most 1"},
		{"near 1.5", func() error { _, err := ratekitprom.New(nil, ratekitprom.WithNearLimit(1.5)); return err }(),
			"ratekitprom: New: WithNearLimit(1.5): the fraction must be more than 0 and at most 1"},
		{"nil memory", m.WatchMemory("x", nil), "ratekitprom: WatchMemory: nil limiter"},
		{"nil lease", m.WatchLeased("x", nil), "ratekitprom: WatchLeased: nil limiter"},
		{"nil failover", m.WatchFailover("x", nil), "ratekitprom: WatchFailover: nil limiter"},
		{"twice", func() error {
			mem := newMemory(t, core.Policy{Limit: 1, Window: time.Second}, core.SystemClock{})
			m.WatchMemory("", mem)
			return m.WatchMemory("default", mem)
		}(), `ratekitprom: WatchMemory: policy "default" is watched already`},
	} {
		if tt.err == nil || tt.err.Error() != tt.want {
			t.Errorf("%s: err = %v, want %q", tt.name, tt.err, tt.want)
		}
	}
}

// TestObserveAllocs checks that counting a known policy allocates nothing.
func TestObserveAllocs(t *testing.T) {
	m := must[*ratekitprom.Metrics](t)(ratekitprom.New(nil))
	events := []observe.Event{
		{Op: observe.OpAllow, Policy: "api", Decision: core.Decision{Allowed: true}, Latency: time.Microsecond},
		{Op: observe.OpAllow, Policy: "api", Decision: core.Decision{Allowed: true, Limit: 10}, Latency: time.Microsecond}, // near its limit
		{Op: observe.OpAllow, Policy: "api", Shadow: true},
		{Op: observe.OpPeek, Policy: "api"},
		{Op: observe.OpStoreError, Policy: "api", Err: errDown},
		{Op: observe.OpBreakerOpen, Policy: "api"},
	}
	for _, e := range events {
		m.Observe(ctx, e)
		if a := testing.AllocsPerRun(100, func() { m.Observe(ctx, e) }); a != 0 {
			t.Errorf("Observe(%v): %v allocs, want 0", e.Op, a)
		}
	}
}

// TestObserverFor checks that an observer prepared for one policy counts
// as Observe does, its own policy's events without allocating and any
// other's through Observe.
func TestObserverFor(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := must[*ratekitprom.Metrics](t)(ratekitprom.New(reg))
	bound := observe.Observers(m, nil).(observe.PolicyObserver).ObserverFor("api")
	allowed := observe.Event{Op: observe.OpAllow, Policy: "api", Decision: core.Decision{Allowed: true}}
	bound.Observe(ctx, allowed)
	if a := testing.AllocsPerRun(100, func() { bound.Observe(ctx, allowed) }); a != 0 {
		t.Errorf("bound Observe: %v allocs, want 0", a)
	}
	bound.Observe(ctx, observe.Event{Op: observe.OpAllow, Policy: "other"})
	bound.Observe(ctx, observe.Event{Op: observe.OpAllow, Policy: "api", Shadow: true, Err: errDown})
	want := `
# HELP ratekit_decisions_total AllowN calls by policy and outcome (allowed, denied, error).
# TYPE ratekit_decisions_total counter
ratekit_decisions_total{outcome="allowed",policy="api",rule=""} 102
ratekit_decisions_total{outcome="denied",policy="api",rule=""} 0
ratekit_decisions_total{outcome="error",policy="api",rule=""} 0
ratekit_decisions_total{outcome="allowed",policy="other",rule=""} 0
ratekit_decisions_total{outcome="denied",policy="other",rule=""} 1
ratekit_decisions_total{outcome="error",policy="other",rule=""} 0
# HELP ratekit_shadow_decisions_total What a shadow candidate policy would have decided on AllowN, by outcome; nothing was enforced by it.
# TYPE ratekit_shadow_decisions_total counter
ratekit_shadow_decisions_total{outcome="allowed",policy="api",rule=""} 0
ratekit_shadow_decisions_total{outcome="denied",policy="api",rule=""} 0
ratekit_shadow_decisions_total{outcome="error",policy="api",rule=""} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_decisions_total", "ratekit_shadow_decisions_total"); err != nil {
		t.Error(err)
	}
}

// TestNearLimit runs 25 requests against a limit of 20 at several
// fractions: the allowed ones leave 19 down to 0, and those that leave
// less than the fraction of 20 are near the limit; the 5 denied never are.
func TestNearLimit(t *testing.T) {
	for _, tt := range []struct {
		opts []ratekitprom.Option
		want int // allowed decisions that left Remaining < fraction × 20
	}{
		{nil, 2}, // 10% of 20 is 2: 1 and 0 left
		{[]ratekitprom.Option{ratekitprom.WithNearLimit(0.25)}, 5}, // 5: 4 down to 0, not 5 itself
		{[]ratekitprom.Option{ratekitprom.WithNearLimit(0.26)}, 6}, // 5.2: 5 down to 0
		{[]ratekitprom.Option{ratekitprom.WithNearLimit(1)}, 20},   // 20: every allowed one
	} {
		clock := core.NewManualClock(start)
		reg := prometheus.NewPedanticRegistry()
		m := must[*ratekitprom.Metrics](t)(ratekitprom.New(reg, tt.opts...))
		mem := newMemory(t, core.Policy{Name: "api", Limit: 20, Window: time.Minute}, clock)
		l := must[*observe.Limiter](t)(observe.New(mem, m, observe.WithClock(clock)))
		for range 25 {
			l.Allow(ctx, "203.0.113.7")
		}
		want := fmt.Sprintf(`
# HELP ratekit_decisions_total AllowN calls by policy and outcome (allowed, denied, error).
# TYPE ratekit_decisions_total counter
ratekit_decisions_total{outcome="allowed",policy="api",rule=""} 20
ratekit_decisions_total{outcome="denied",policy="api",rule=""} 5
ratekit_decisions_total{outcome="error",policy="api",rule=""} 0
# HELP ratekit_near_limit_total Allowed AllowN calls that left less than the near-limit fraction of the policy's limit (by default 10%%).
# TYPE ratekit_near_limit_total counter
ratekit_near_limit_total{policy="api",rule=""} %d
`, tt.want)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekit_decisions_total", "ratekit_near_limit_total"); err != nil {
			t.Errorf("%d options: %v", len(tt.opts), err)
		}
	}
}

// TestScrapeRules decides requests through a rule set of two rules and
// checks every series: each limit is labelled by its rule and its name,
// apart from a policy of the same name outside the rule set, whose rule
// label is empty (the same series, to Prometheus, as one without the
// label).
func TestScrapeRules(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := must[*ratekitprom.Metrics](t)(ratekitprom.New(reg, ratekitprom.WithLatencyBuckets([]float64{0.3, 1})))
	metricstest.RunRules(t, core.NewManualClock(start), m)
	want := `
# HELP ratekit_decisions_total AllowN calls by policy and outcome (allowed, denied, error).
# TYPE ratekit_decisions_total counter
ratekit_decisions_total{outcome="allowed",policy="per-ip",rule=""} 1
ratekit_decisions_total{outcome="denied",policy="per-ip",rule=""} 0
ratekit_decisions_total{outcome="error",policy="per-ip",rule=""} 0
ratekit_decisions_total{outcome="allowed",policy="per-ip",rule="api"} 2
ratekit_decisions_total{outcome="denied",policy="per-ip",rule="api"} 0
ratekit_decisions_total{outcome="error",policy="per-ip",rule="api"} 0
ratekit_decisions_total{outcome="allowed",policy="per-ip",rule="login"} 2
ratekit_decisions_total{outcome="denied",policy="per-ip",rule="login"} 1
ratekit_decisions_total{outcome="error",policy="per-ip",rule="login"} 0
# HELP ratekit_near_limit_total Allowed AllowN calls that left less than the near-limit fraction of the policy's limit (by default 10%).
# TYPE ratekit_near_limit_total counter
ratekit_near_limit_total{policy="per-ip",rule=""} 0
ratekit_near_limit_total{policy="per-ip",rule="api"} 0
ratekit_near_limit_total{policy="per-ip",rule="login"} 1
# HELP ratekit_shadow_decisions_total What a shadow candidate policy would have decided on AllowN, by outcome; nothing was enforced by it.
# TYPE ratekit_shadow_decisions_total counter
ratekit_shadow_decisions_total{outcome="allowed",policy="watch",rule="login"} 1
ratekit_shadow_decisions_total{outcome="denied",policy="watch",rule="login"} 1
ratekit_shadow_decisions_total{outcome="error",policy="watch",rule="login"} 0
# HELP ratekit_shadow_peeks_total What a shadow candidate policy would have answered to Peek, by outcome.
# TYPE ratekit_shadow_peeks_total counter
ratekit_shadow_peeks_total{outcome="allowed",policy="watch",rule="login"} 0
ratekit_shadow_peeks_total{outcome="denied",policy="watch",rule="login"} 1
ratekit_shadow_peeks_total{outcome="error",policy="watch",rule="login"} 0
# HELP ratekit_store_latency_seconds Time the limiter took to decide an AllowN or Peek.
# TYPE ratekit_store_latency_seconds histogram
ratekit_store_latency_seconds_bucket{policy="per-ip",rule="",le="0.3"} 1
ratekit_store_latency_seconds_bucket{policy="per-ip",rule="",le="1"} 1
ratekit_store_latency_seconds_bucket{policy="per-ip",rule="",le="+Inf"} 1
ratekit_store_latency_seconds_sum{policy="per-ip",rule=""} 0
ratekit_store_latency_seconds_count{policy="per-ip",rule=""} 1
ratekit_store_latency_seconds_bucket{policy="per-ip",rule="api",le="0.3"} 2
ratekit_store_latency_seconds_bucket{policy="per-ip",rule="api",le="1"} 2
ratekit_store_latency_seconds_bucket{policy="per-ip",rule="api",le="+Inf"} 2
ratekit_store_latency_seconds_sum{policy="per-ip",rule="api"} 0
ratekit_store_latency_seconds_count{policy="per-ip",rule="api"} 2
ratekit_store_latency_seconds_bucket{policy="per-ip",rule="login",le="0.3"} 3
ratekit_store_latency_seconds_bucket{policy="per-ip",rule="login",le="1"} 3
ratekit_store_latency_seconds_bucket{policy="per-ip",rule="login",le="+Inf"} 3
ratekit_store_latency_seconds_sum{policy="per-ip",rule="login"} 0
ratekit_store_latency_seconds_count{policy="per-ip",rule="login"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndLint(reg); err != nil || len(n) != 0 {
		t.Errorf("lint: %v %v", n, err)
	}
}
