package metricsview

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/observe"
)

var (
	ctx     = context.Background()
	errDown = errors.New("store: connection refused")
)

// The counter arrays have a slot for every observe.Outcome, and observe has
// none past OutcomeError, or its events would index past them.
func TestOutcomesCoverCore(t *testing.T) {
	for i := range numOutcomes {
		if name := observe.Outcome(i).String(); strings.HasPrefix(name, "Outcome(") {
			t.Errorf("observe.Outcome(%d) is %s, want a named outcome", i, name)
		}
	}
	if got, want := observe.Outcome(numOutcomes).String(), "Outcome("+strconv.Itoa(numOutcomes)+")"; got != want {
		t.Errorf("observe.Outcome(%d) is %q, an outcome past OutcomeError: size the counter arrays for it", numOutcomes, got)
	}
}

// TestNames checks that every metric's Prometheus name is what the
// OpenTelemetry-to-Prometheus translation makes of its OpenTelemetry name,
// unit and kind, so that the two exporters' series line up, and that no
// two metrics share a name.
func TestNames(t *testing.T) {
	seen := map[string]Metric{}
	for m := range Metric(NumMetrics) {
		info := m.Info()
		if info.Prom == "" || info.OTel == "" || info.Unit == "" || info.Help == "" {
			t.Errorf("metric %d: %+v: a name, unit or help is missing", m, info)
			continue
		}
		want := strings.ReplaceAll(info.OTel, ".", "_")
		switch {
		case info.Unit == "s":
			want += "_seconds"
		case strings.HasPrefix(info.Unit, "{") && strings.HasSuffix(info.Unit, "}"):
		default:
			t.Errorf("%s: unit %q, want s or an annotation such as {decision}", info.OTel, info.Unit)
		}
		if info.Kind == KindCounter {
			want += "_total"
		}
		if info.Prom != want {
			t.Errorf("%s (%s): Prometheus name %s, want %s", info.OTel, info.Unit, info.Prom, want)
		}
		if info.Watched != (m > StoreLatency) {
			t.Errorf("%s: Watched = %v, want %v", info.OTel, info.Watched, m > StoreLatency)
		}
		if (info.Kind == KindHistogram) != (m == StoreLatency) {
			t.Errorf("%s: kind %d", info.OTel, info.Kind)
		}
		for _, name := range []string{info.Prom, info.OTel} {
			if prev, ok := seen[name]; ok {
				t.Errorf("metrics %d and %d are both named %s", prev, m, name)
			}
			seen[name] = m
		}
	}
}

func TestNearRule(t *testing.T) {
	for _, tt := range []struct {
		fraction         float64
		limit, remaining int64
		want             bool
	}{
		// 10% of 100 is 10: 9 left is near, 10 is not.
		{0.1, 100, 0, true},
		{0.1, 100, 9, true},
		{0.1, 100, 10, false},
		{0.1, 100, 100, false},
		// 10% of 5 is 0.5: only 0 left is near.
		{0.1, 5, 0, true},
		{0.1, 5, 1, false},
		// 10% of 15 is 1.5: 0 and 1 are near.
		{0.1, 15, 1, true},
		{0.1, 15, 2, false},
		// 10% of 3 is 0.3.
		{0.1, 3, 0, true},
		{0.1, 3, 1, false},
		// A whole limit: everything short of Limit is near.
		{1, 10, 9, true},
		{1, 10, 10, false},
		{1, 10, 20, false}, // a burst above Limit
		// One third in millionths is 333333: 3 × 0.333333 < 1.
		{1.0 / 3, 3, 0, true},
		{1.0 / 3, 3, 1, false},
		{1.0 / 3, 3_000_000, 999_998, true},
		{1.0 / 3, 3_000_000, 999_999, false},
		// The smallest fraction, at the largest limit: 1e-6 × 1e9 = 1000.
		{1e-6, core.MaxLimit, 999, true},
		{1e-6, core.MaxLimit, 1000, false},
		// A decision no policy made, and one past int64 products.
		{1, 0, 0, false},
		{1, math.MaxInt64, math.MaxInt64 - 1, true},
		{1, math.MaxInt64, math.MaxInt64, false},
		{1e-6, math.MaxInt64, math.MaxInt64 / 1_000_000, true},
		{1e-6, math.MaxInt64, math.MaxInt64/1_000_000 + 1, false},
	} {
		r := NewNearRule(tt.fraction)
		if got := r.Near(core.Decision{Allowed: true, Limit: tt.limit, Remaining: tt.remaining}); got != tt.want {
			t.Errorf("NearRule(%v).Near(Limit %d, Remaining %d) = %v, want %v", tt.fraction, tt.limit, tt.remaining, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.MaxPolicies = 0 }, "WithMaxPolicies(0): must be at least 1"},
		{func(c *Config) { c.LatencyBuckets = nil }, "WithLatencyBuckets: at least one bound is required"},
		{func(c *Config) { c.LatencyBuckets = []float64{1, 1} }, "WithLatencyBuckets: bounds must increase, 1 then 1"},
		{func(c *Config) { c.LatencyBuckets = []float64{1, math.NaN()} }, "WithLatencyBuckets: bounds must be finite, not NaN"},
		{func(c *Config) { c.LatencyBuckets = []float64{1, math.Inf(1)} }, "WithLatencyBuckets: bounds must be finite, not +Inf"},
		{func(c *Config) { c.NearLimit = 1 }, ""},
		{func(c *Config) { c.NearLimit = 1e-6 }, ""},
		{func(c *Config) { c.NearLimit = 0 }, "WithNearLimit(0): the fraction must be more than 0 and at most 1"},
		{func(c *Config) { c.NearLimit = -0.1 }, "WithNearLimit(-0.1): the fraction must be more than 0 and at most 1"},
		{func(c *Config) { c.NearLimit = 1.5 }, "WithNearLimit(1.5): the fraction must be more than 0 and at most 1"},
		{func(c *Config) { c.NearLimit = math.NaN() }, "WithNearLimit(NaN): the fraction must be more than 0 and at most 1"},
		{func(c *Config) { c.NearLimit = 9e-7 }, "WithNearLimit(9e-07): the fraction must be at least 0.000001, the rule counts in millionths"},
	} {
		c := DefaultConfig()
		tt.change(&c)
		got := ""
		if err := c.Validate(); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("Validate(%+v) = %q, want %q", c, got, tt.want)
		}
	}
}

// recorder is Instruments that keeps every series in a map, by its name
// and labels.
type recorder struct {
	mu     sync.Mutex
	series map[string]*atomic.Int64
}

type recCounter struct{ n *atomic.Int64 }

func (c recCounter) Add(context.Context) { c.n.Add(1) }

type recHistogram struct{ n *atomic.Int64 }

func (h recHistogram) Record(_ context.Context, d time.Duration) { h.n.Add(int64(d)) }

func (r *recorder) get(name string) *atomic.Int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.series == nil {
		r.series = map[string]*atomic.Int64{}
	}
	if n, ok := r.series[name]; ok {
		return n
	}
	n := new(atomic.Int64)
	r.series[name] = n
	return n
}

func (r *recorder) Counter(m Metric, policy, rule, outcome string) Counter {
	if m.Info().Outcome != (outcome != "") {
		panic(fmt.Sprintf("%s: outcome %q", m.Info().Prom, outcome))
	}
	if rule != "" && !m.Info().Rule {
		panic(fmt.Sprintf("%s: rule %q", m.Info().Prom, rule))
	}
	name := m.Info().Prom + "{" + policy
	if rule != "" {
		name += ",rule=" + rule
	}
	if outcome != "" {
		name += "," + outcome
	}
	return recCounter{r.get(name + "}")}
}

func (r *recorder) Histogram(m Metric, policy, rule string) Histogram {
	if rule != "" {
		policy += ",rule=" + rule
	}
	return recHistogram{r.get(m.Info().Prom + "_ns{" + policy + "}")}
}

// dump returns every series, sorted, as "name{labels} value".
func (r *recorder) dump() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(r.series)) {
		lines = append(lines, fmt.Sprintf("%s %d", k, r.series[k].Load()))
	}
	return strings.Join(lines, "\n")
}

func allowed(policy string, limit, remaining int64) observe.Event {
	return observe.Event{Op: observe.OpAllow, Policy: policy, Latency: time.Microsecond,
		Decision: core.Decision{Allowed: true, Limit: limit, Remaining: remaining}}
}

// TestView counts a known list of events and checks every series.
func TestView(t *testing.T) {
	c := DefaultConfig()
	c.NearLimit = 0.5
	var r recorder
	v := New(c, &r)
	bound := v.ObserverFor("api")
	for _, e := range []observe.Event{
		allowed("api", 10, 9),
		allowed("api", 10, 5), // not near: 5 is half of 10
		allowed("api", 10, 4), // near
		allowed("api", 10, 0), // near
		{Op: observe.OpAllow, Policy: "api", Decision: core.Decision{Limit: 10}, Latency: time.Millisecond},   // denied: never near
		{Op: observe.OpAllow, Policy: "api", Err: errDown, Latency: time.Second},                              // an error: never near
		{Op: observe.OpAllow, Policy: "api", Shadow: true, Decision: core.Decision{Allowed: true, Limit: 10}}, // a shadow: never near
		{Op: observe.OpPeek, Policy: "api", Decision: core.Decision{Allowed: true, Limit: 10}, Latency: 2 * time.Microsecond},
		{Op: observe.OpPeek, Policy: "api", Shadow: true},
		{Op: observe.OpReset, Policy: "api", Latency: time.Hour},  // nothing
		{Op: observe.OpRefund, Policy: "api", Latency: time.Hour}, // nothing
		{Op: observe.OpStoreError, Policy: "redis", Err: errDown},
		{Op: observe.OpBreakerOpen, Policy: "redis"},
		{Op: observe.OpBreakerClose, Policy: "redis"}, // nothing
		allowed("", 1, 0), // the unnamed policy
	} {
		// Half through the bound observer, which must count alike.
		v.Observe(ctx, e)
		bound.Observe(ctx, e)
	}
	want := `ratekit_decisions_total{api,allowed} 8
ratekit_decisions_total{api,denied} 2
ratekit_decisions_total{api,error} 2
ratekit_decisions_total{default,allowed} 2
ratekit_decisions_total{default,denied} 0
ratekit_decisions_total{default,error} 0
ratekit_near_limit_total{api} 4
ratekit_near_limit_total{default} 2
ratekit_peeks_total{api,allowed} 2
ratekit_peeks_total{api,denied} 0
ratekit_peeks_total{api,error} 0
ratekit_shadow_decisions_total{api,allowed} 2
ratekit_shadow_decisions_total{api,denied} 0
ratekit_shadow_decisions_total{api,error} 0
ratekit_shadow_peeks_total{api,allowed} 0
ratekit_shadow_peeks_total{api,denied} 2
ratekit_shadow_peeks_total{api,error} 0
ratekit_store_errors_total{redis} 2
ratekit_breaker_opens_total{redis} 2
ratekit_store_latency_seconds_ns{api} 2002012000
ratekit_store_latency_seconds_ns{default} 2000`
	if got := r.dump(); got != sortLines(want) {
		t.Errorf("series:\n%s\nwant:\n%s", got, sortLines(want))
	}
}

func sortLines(s string) string {
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestViewRules counts the events of a rule set's limits: each limit, its
// rule and name, has series of its own, apart from a policy of the same
// name outside the rule set, and counts as one policy against MaxPolicies.
func TestViewRules(t *testing.T) {
	c := DefaultConfig()
	c.MaxPolicies = 3
	var r recorder
	v := New(c, &r)
	bound := v.ObserverFor("per-ip")
	ruled := func(e observe.Event, rule string) observe.Event { e.Rule = rule; return e }
	for _, e := range []observe.Event{
		ruled(allowed("per-ip", 10, 9), "login"),
		ruled(allowed("per-ip", 10, 0), "api"), // near
		ruled(observe.Event{Op: observe.OpAllow, Policy: "per-ip", Shadow: true, Decision: core.Decision{Limit: 10}}, "api"),
		ruled(observe.Event{Op: observe.OpPeek, Policy: "per-ip", Shadow: true, Decision: core.Decision{Limit: 10}}, "api"),
		ruled(observe.Event{Op: observe.OpRefund, Policy: "per-ip", Cost: 1}, "api"),          // nothing
		ruled(observe.Event{Op: observe.OpStoreError, Policy: "per-ip", Err: errDown}, "api"), // no rule label
		allowed("per-ip", 10, 9),                   // outside the rule set: the third policy
		ruled(allowed("per-user", 10, 9), "login"), // the fourth: _other
	} {
		v.Observe(ctx, e)
		bound.Observe(ctx, e)
	}
	want := `ratekit_decisions_total{_other,allowed} 2
ratekit_decisions_total{_other,denied} 0
ratekit_decisions_total{_other,error} 0
ratekit_decisions_total{per-ip,allowed} 2
ratekit_decisions_total{per-ip,denied} 0
ratekit_decisions_total{per-ip,error} 0
ratekit_decisions_total{per-ip,rule=api,allowed} 2
ratekit_decisions_total{per-ip,rule=api,denied} 0
ratekit_decisions_total{per-ip,rule=api,error} 0
ratekit_decisions_total{per-ip,rule=login,allowed} 2
ratekit_decisions_total{per-ip,rule=login,denied} 0
ratekit_decisions_total{per-ip,rule=login,error} 0
ratekit_near_limit_total{_other} 0
ratekit_near_limit_total{per-ip,rule=api} 2
ratekit_near_limit_total{per-ip,rule=login} 0
ratekit_near_limit_total{per-ip} 0
ratekit_shadow_decisions_total{per-ip,rule=api,allowed} 0
ratekit_shadow_decisions_total{per-ip,rule=api,denied} 2
ratekit_shadow_decisions_total{per-ip,rule=api,error} 0
ratekit_shadow_peeks_total{per-ip,rule=api,allowed} 0
ratekit_shadow_peeks_total{per-ip,rule=api,denied} 2
ratekit_shadow_peeks_total{per-ip,rule=api,error} 0
ratekit_store_errors_total{per-ip} 2
ratekit_store_latency_seconds_ns{_other} 2000
ratekit_store_latency_seconds_ns{per-ip,rule=api} 2000
ratekit_store_latency_seconds_ns{per-ip,rule=login} 2000
ratekit_store_latency_seconds_ns{per-ip} 2000`
	if got := r.dump(); got != sortLines(want) {
		t.Errorf("series:\n%s\nwant:\n%s", got, sortLines(want))
	}
}

// TestMaxPolicies checks that the policies past the first MaxPolicies are
// counted under OtherPolicy, per metric, and that "" and "default" share
// the unnamed policy's label.
func TestMaxPolicies(t *testing.T) {
	c := DefaultConfig()
	c.MaxPolicies = 2
	var r recorder
	v := New(c, &r)
	for _, p := range []string{"", "a", "b", "c", "a", "", "default"} {
		v.Observe(ctx, observe.Event{Op: observe.OpStoreError, Policy: p, Err: errDown})
	}
	v.ObserverFor("d").Observe(ctx, observe.Event{Op: observe.OpBreakerOpen, Policy: "d"})
	want := `ratekit_breaker_opens_total{d} 1
ratekit_store_errors_total{_other} 3
ratekit_store_errors_total{a} 2
ratekit_store_errors_total{default} 2`
	if got := r.dump(); got != want {
		t.Errorf("series:\n%s\nwant:\n%s", got, want)
	}
}

// TestObserveAllocs checks that counting for a known policy allocates
// nothing, by Observe and by a bound observer.
func TestObserveAllocs(t *testing.T) {
	var r recorder
	v := New(DefaultConfig(), &r)
	bound := v.ObserverFor("api")
	for _, e := range []observe.Event{
		allowed("api", 10, 0),
		{Op: observe.OpAllow, Policy: "api", Rule: "login"},
		{Op: observe.OpAllow, Policy: "api", Shadow: true},
		{Op: observe.OpPeek, Policy: "api"},
		{Op: observe.OpStoreError, Policy: "api", Err: errDown},
		{Op: observe.OpBreakerOpen, Policy: "api"},
	} {
		for name, o := range map[string]observe.Observer{"View": v, "bound": bound} {
			o.Observe(ctx, e)
			if a := testing.AllocsPerRun(100, func() { o.Observe(ctx, e) }); a != 0 {
				t.Errorf("%s.Observe(%v): %v allocs, want 0", name, e.Op, a)
			}
		}
	}
}

// TestConcurrentFirstEvents has goroutines meet a new policy at once:
// every event is counted, in one set of series.
func TestConcurrentFirstEvents(t *testing.T) {
	var r recorder
	v := New(DefaultConfig(), &r)
	bound := v.ObserverFor("api")
	const goroutines, events = 8, 100
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			o := observe.Observer(v)
			if g%2 == 0 {
				o = bound
			}
			for range events {
				o.Observe(ctx, allowed("api", 10, 9))
			}
		})
	}
	close(start)
	wg.Wait()
	if got, want := r.get("ratekit_decisions_total{api,allowed}").Load(), int64(goroutines*events); got != want {
		t.Errorf("allowed decisions: %d, want %d", got, want)
	}
}

type memStats core.Stats

func (s memStats) Stats() core.Stats { return core.Stats(s) }

type leaseStats hotkey.LeaseStats

func (s leaseStats) Stats() hotkey.LeaseStats { return hotkey.LeaseStats(s) }

type breaker bool

func (b breaker) BreakerOpen() bool { return bool(b) }

func TestWatches(t *testing.T) {
	var w Watches
	for _, tt := range []struct {
		err  error
		want string
	}{
		{w.Memory("", memStats{Keys: 3, FreshDrops: 2, LossyEvictions: 1}), ""},
		{w.Memory("default", memStats{}), `WatchMemory: policy "default" is watched already`},
		{w.Leased("", leaseStats{Keys: 4, Takes: 5, Dropped: 6}), ""},
		{w.Failover("redis", breaker(true)), ""},
		{w.Failover("local", breaker(false)), ""},
		{w.Failover("redis", breaker(false)), `WatchFailover: policy "redis" is watched already`},
		{w.Memory("x", nil), "WatchMemory: nil limiter"},
		{w.Leased("x", nil), "WatchLeased: nil limiter"},
		{w.Failover("x", nil), "WatchFailover: nil limiter"},
		{w.Memory("x", (*core.Memory)(nil)), "WatchMemory: nil limiter"},
		{w.Leased("x", (*hotkey.Leased)(nil)), "WatchLeased: nil limiter"},
		{w.Failover("x", (*core.Failover)(nil)), "WatchFailover: nil limiter"},
	} {
		got := ""
		if tt.err != nil {
			got = tt.err.Error()
		}
		if got != tt.want {
			t.Errorf("err = %q, want %q", got, tt.want)
		}
	}
	var got []string
	w.Read(func(label string, m Metric, v int64) {
		got = append(got, fmt.Sprintf("%s{%s} %d", m.Info().Prom, label, v))
	})
	want := []string{
		"ratekit_memory_keys{default} 3",
		"ratekit_memory_fresh_drops_total{default} 2",
		"ratekit_memory_lossy_evictions_total{default} 1",
		"ratekit_lease_keys{default} 4",
		"ratekit_lease_refills_total{default} 5",
		"ratekit_lease_dropped_units_total{default} 6",
		"ratekit_breaker_open{redis} 1",
		"ratekit_breaker_open{local} 0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// An AllowN of a request keyed by its fallback key counts in Decisions and
// in FallbackKeys, by outcome, whether the View or a bound observer counts
// it; a shadow candidate's and a Peek do not count in FallbackKeys.
func TestFallbackKeys(t *testing.T) {
	for name, newObs := range map[string]func(v *View) observe.Observer{
		"view":  func(v *View) observe.Observer { return v },
		"bound": func(v *View) observe.Observer { return v.ObserverFor("login") },
	} {
		t.Run(name, func(t *testing.T) {
			var r recorder
			obs := newObs(New(DefaultConfig(), &r))
			fb := allowed("login", 5, 4)
			fb.KeyFallback = true
			denied := fb
			denied.Decision.Allowed = false
			shadow := fb
			shadow.Shadow = true
			peek := fb
			peek.Op = observe.OpPeek
			for _, e := range []observe.Event{fb, fb, denied, allowed("login", 5, 3), shadow, peek} {
				obs.Observe(context.Background(), e)
			}
			got := map[string]int64{}
			for k, v := range r.series {
				if strings.HasPrefix(k, "ratekit_fallback_keys_total") || strings.HasPrefix(k, "ratekit_decisions_total") {
					got[k] = v.Load()
				}
			}
			want := map[string]int64{
				"ratekit_decisions_total{login,allowed}":     3,
				"ratekit_decisions_total{login,denied}":      1,
				"ratekit_decisions_total{login,error}":       0,
				"ratekit_fallback_keys_total{login,allowed}": 2,
				"ratekit_fallback_keys_total{login,denied}":  1,
				"ratekit_fallback_keys_total{login,error}":   0,
			}
			if !maps.Equal(got, want) {
				t.Errorf("series %v, want %v", got, want)
			}
		})
	}
}
