package ratekitotel_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/internal/metricsview/metricstest"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/ratekitotel"
)

// TestCollect runs ratekitprom's TestScrape workload through every source
// of metrics and checks the collection, data point by data point.
func TestCollect(t *testing.T) {
	clock := core.NewManualClock(start)
	m, reader := newMetrics(t, ratekitotel.WithLatencyBuckets([]float64{0.3, 1}))

	small := metricstest.Run(t, clock, m, metricstest.Watches{
		Memory:   func(p string, l *core.Memory) error { return m.WatchMemory(p, l) },
		Failover: func(p string, f *core.Failover) error { return m.WatchFailover(p, f) },
		Leased:   func(p string, l *hotkey.Leased) error { return m.WatchLeased(p, l) },
	})

	want := `# ratekit.breaker.open gauge {breaker}
ratekit.breaker.open{policy=redis} 1
# ratekit.breaker.opens counter {opening}
ratekit.breaker.opens{policy=redis} 1
# ratekit.decisions counter {decision}
ratekit.decisions{outcome=allowed,policy=api} 3
ratekit.decisions{outcome=denied,policy=api} 2
ratekit.decisions{outcome=error,policy=api} 1
# ratekit.lease.dropped_units counter {unit}
ratekit.lease.dropped_units{policy=lease} 0
# ratekit.lease.keys updowncounter {key}
ratekit.lease.keys{policy=lease} 1
# ratekit.lease.refills counter {call}
ratekit.lease.refills{policy=lease} 2
# ratekit.memory.fresh_drops counter {key}
ratekit.memory.fresh_drops{policy=api} 0
ratekit.memory.fresh_drops{policy=small} 1
# ratekit.memory.keys updowncounter {key}
ratekit.memory.keys{policy=api} 1
ratekit.memory.keys{policy=small} 1
# ratekit.memory.lossy_evictions counter {key}
ratekit.memory.lossy_evictions{policy=api} 0
ratekit.memory.lossy_evictions{policy=small} 1
# ratekit.near_limit counter {decision}
ratekit.near_limit{policy=api} 1
# ratekit.peeks counter {peek}
ratekit.peeks{outcome=allowed,policy=api} 1
ratekit.peeks{outcome=denied,policy=api} 1
ratekit.peeks{outcome=error,policy=api} 0
# ratekit.shadow.decisions counter {decision}
ratekit.shadow.decisions{outcome=allowed,policy=api-v2} 2
ratekit.shadow.decisions{outcome=denied,policy=api-v2} 3
ratekit.shadow.decisions{outcome=error,policy=api-v2} 1
# ratekit.shadow.peeks counter {peek}
ratekit.shadow.peeks{outcome=allowed,policy=api-v2} 1
ratekit.shadow.peeks{outcome=denied,policy=api-v2} 1
ratekit.shadow.peeks{outcome=error,policy=api-v2} 0
# ratekit.store.errors counter {error}
ratekit.store.errors{policy=redis} 2
# ratekit.store.latency histogram s
ratekit.store.latency{policy=api} count=8 sum=2.5 buckets=[0.3:6 1:2 +Inf:0]`
	if got := collect(t, reader); got != want {
		t.Errorf("collected:\n%s\nwant:\n%s", got, want)
	}

	// A second collection reads the watched limiters again.
	clock.Advance(time.Second)
	small.Allow(ctx, "w") // z is fresh now
	want = `# ratekit.memory.fresh_drops counter {key}
ratekit.memory.fresh_drops{policy=api} 0
ratekit.memory.fresh_drops{policy=small} 2`
	if got := collect(t, reader, "ratekit.memory.fresh_drops"); got != want {
		t.Errorf("collected again:\n%s\nwant:\n%s", got, want)
	}
}

// TestPolicyAttributes checks the attributes of an unnamed policy and that
// the number of policies with series of their own is bounded.
func TestPolicyAttributes(t *testing.T) {
	m, reader := newMetrics(t, ratekitotel.WithMaxPolicies(2))
	for _, p := range []string{"", "a", "b", "c", "a", ""} {
		m.Observe(ctx, observe.Event{Op: observe.OpStoreError, Policy: p, Err: errDown})
	}
	want := `# ratekit.store.errors counter {error}
ratekit.store.errors{policy=_other} 2
ratekit.store.errors{policy=a} 2
ratekit.store.errors{policy=default} 2`
	if got := collect(t, reader); got != want {
		t.Errorf("collected:\n%s\nwant:\n%s", got, want)
	}
}

// TestNearLimit runs 25 requests against a limit of 20 at several
// fractions: the allowed ones leave 19 down to 0, and those that leave
// less than the fraction of 20 are near the limit; the 5 denied never are.
func TestNearLimit(t *testing.T) {
	for _, tt := range []struct {
		opts []ratekitotel.Option
		want int // allowed decisions that left Remaining < fraction × 20
	}{
		{nil, 2}, // 10% of 20 is 2: 1 and 0 left
		{[]ratekitotel.Option{ratekitotel.WithNearLimit(0.25)}, 5}, // 5: 4 down to 0, not 5 itself
		{[]ratekitotel.Option{ratekitotel.WithNearLimit(0.26)}, 6}, // 5.2: 5 down to 0
		{[]ratekitotel.Option{ratekitotel.WithNearLimit(1)}, 20},   // 20: every allowed one
	} {
		clock := core.NewManualClock(start)
		m, reader := newMetrics(t, tt.opts...)
		mem := newMemory(t, core.Policy{Name: "api", Limit: 20, Window: time.Minute}, clock)
		l := must[*observe.Limiter](t)(observe.New(mem, m, observe.WithClock(clock)))
		for range 25 {
			l.Allow(ctx, "203.0.113.7")
		}
		want := fmt.Sprintf(`# ratekit.decisions counter {decision}
ratekit.decisions{outcome=allowed,policy=api} 20
ratekit.decisions{outcome=denied,policy=api} 5
ratekit.decisions{outcome=error,policy=api} 0
# ratekit.near_limit counter {decision}
ratekit.near_limit{policy=api} %d`, tt.want)
		if got := collect(t, reader, "ratekit.decisions", "ratekit.near_limit"); got != want {
			t.Errorf("%d options: collected:\n%s\nwant:\n%s", len(tt.opts), got, want)
		}
	}
}

func TestErrors(t *testing.T) {
	m, _ := newMetrics(t)
	newErr := func(opts ...ratekitotel.Option) error { _, err := ratekitotel.New(opts...); return err }
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"nil option", newErr(nil), "ratekitotel: New: option 1 is nil"},
		{"nil option after a good one", newErr(ratekitotel.WithMaxPolicies(2), nil), "ratekitotel: New: option 2 is nil"},
		{"nil provider", newErr(ratekitotel.WithMeterProvider(nil)), "ratekitotel: New: WithMeterProvider(nil): a MeterProvider is required"},
		{"max policies", newErr(ratekitotel.WithMaxPolicies(0)), "ratekitotel: New: WithMaxPolicies(0): must be at least 1"},
		{"buckets", newErr(ratekitotel.WithLatencyBuckets([]float64{1, 1})), "ratekitotel: New: WithLatencyBuckets: bounds must increase, 1 then 1"},
		{"no buckets", newErr(ratekitotel.WithLatencyBuckets(nil)), "ratekitotel: New: WithLatencyBuckets: at least one bound is required"},
		{"near 0", newErr(ratekitotel.WithNearLimit(0)), "ratekitotel: New: WithNearLimit(0): the fraction must be more than 0 and at most 1"},
		{"near 1.5", newErr(ratekitotel.WithNearLimit(1.5)), "ratekitotel: New: WithNearLimit(1.5): the fraction must be more than 0 and at most 1"},
		{"near tiny", newErr(ratekitotel.WithNearLimit(1e-7)),
			"ratekitotel: New: WithNearLimit(1e-07): the fraction must be at least 0.000001, the rule counts in millionths"},
		{"nil memory", m.WatchMemory("x", nil), "ratekitotel: WatchMemory: nil limiter"},
		{"nil lease", m.WatchLeased("x", nil), "ratekitotel: WatchLeased: nil limiter"},
		{"nil failover", m.WatchFailover("x", nil), "ratekitotel: WatchFailover: nil limiter"},
		{"twice", func() error {
			mem := newMemory(t, core.Policy{Limit: 1, Window: time.Second}, core.SystemClock{})
			m.WatchMemory("", mem)
			return m.WatchMemory("default", mem)
		}(), `ratekitotel: WatchMemory: policy "default" is watched already`},
	} {
		if tt.err == nil || tt.err.Error() != tt.want {
			t.Errorf("%s: err = %v, want %q", tt.name, tt.err, tt.want)
		}
	}
}

// TestObserveAllocs checks that counting a known policy on the SDK
// allocates nothing.
func TestObserveAllocs(t *testing.T) {
	m, _ := newMetrics(t)
	events := []observe.Event{
		{Op: observe.OpAllow, Policy: "api", Decision: core.Decision{Allowed: true, Limit: 10, Remaining: 5}, Latency: time.Microsecond},
		{Op: observe.OpAllow, Policy: "api", Decision: core.Decision{Allowed: true, Limit: 10}, Latency: time.Microsecond}, // near its limit
		{Op: observe.OpAllow, Policy: "api", Shadow: true},
		{Op: observe.OpPeek, Policy: "api"},
		{Op: observe.OpStoreError, Policy: "api", Err: errDown},
		{Op: observe.OpBreakerOpen, Policy: "api"},
	}
	bound := m.ObserverFor("api")
	for _, e := range events {
		for name, o := range map[string]observe.Observer{"Metrics": m, "bound": bound} {
			o.Observe(ctx, e)
			if a := testing.AllocsPerRun(100, func() { o.Observe(ctx, e) }); a != 0 {
				t.Errorf("%s.Observe(%v): %v allocs, want 0", name, e.Op, a)
			}
		}
	}
}

// TestObserverFor checks that an observer prepared for one policy counts
// as Observe does, its own policy's events and any other's.
func TestObserverFor(t *testing.T) {
	m, reader := newMetrics(t)
	bound := observe.Observers(m, nil).(observe.PolicyObserver).ObserverFor("api")
	allowed := observe.Event{Op: observe.OpAllow, Policy: "api", Decision: core.Decision{Allowed: true}}
	for range 102 {
		bound.Observe(ctx, allowed)
	}
	bound.Observe(ctx, observe.Event{Op: observe.OpAllow, Policy: "other"})
	bound.Observe(ctx, observe.Event{Op: observe.OpAllow, Policy: "api", Shadow: true, Err: errDown})
	want := `# ratekit.decisions counter {decision}
ratekit.decisions{outcome=allowed,policy=api} 102
ratekit.decisions{outcome=allowed,policy=other} 0
ratekit.decisions{outcome=denied,policy=api} 0
ratekit.decisions{outcome=denied,policy=other} 1
ratekit.decisions{outcome=error,policy=api} 0
ratekit.decisions{outcome=error,policy=other} 0
# ratekit.shadow.decisions counter {decision}
ratekit.shadow.decisions{outcome=allowed,policy=api} 0
ratekit.shadow.decisions{outcome=denied,policy=api} 0
ratekit.shadow.decisions{outcome=error,policy=api} 1`
	if got := collect(t, reader, "ratekit.decisions", "ratekit.shadow.decisions"); got != want {
		t.Errorf("collected:\n%s\nwant:\n%s", got, want)
	}
}

// TestGlobalMeterProvider checks that without WithMeterProvider the
// instruments come from the global MeterProvider.
func TestGlobalMeterProvider(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(ctx)
	otel.SetMeterProvider(provider)
	m := must[*ratekitotel.Metrics](t)(ratekitotel.New())
	m.Observe(ctx, observe.Event{Op: observe.OpBreakerOpen, Policy: "redis"})
	want := `# ratekit.breaker.opens counter {opening}
ratekit.breaker.opens{policy=redis} 1`
	if got := collect(t, reader); got != want {
		t.Errorf("collected:\n%s\nwant:\n%s", got, want)
	}
}

// TestDeltaTemporality checks that a reader that asks for deltas gets the
// counts of each collection period, though the counters are counted from
// the start: the SDK takes the differences.
func TestDeltaTemporality(t *testing.T) {
	reader := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality {
		return metricdata.DeltaTemporality
	}))
	m, _ := newMetricsReader(t, reader)
	for _, tt := range []struct{ events, want int }{{3, 3}, {2, 2}, {0, 0}} {
		for range tt.events {
			m.Observe(ctx, observe.Event{Op: observe.OpStoreError, Policy: "redis", Err: errDown})
		}
		want := "# ratekit.store.errors counter {error}\nratekit.store.errors{policy=redis} " + strconv.Itoa(tt.want)
		if got := collect(t, reader, "ratekit.store.errors"); got != want {
			t.Errorf("after %d more events: collected:\n%s\nwant:\n%s", tt.events, got, want)
		}
	}
}

// TestCollectWhileObserving collects while goroutines meet new policies
// (run it with -race): every event is counted once, in its policy's
// series.
func TestCollectWhileObserving(t *testing.T) {
	m, reader := newMetrics(t)
	const goroutines, policies, events = 4, 8, 50
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			<-start
			for i := range policies * events {
				m.Observe(ctx, observe.Event{Op: observe.OpBreakerOpen, Policy: "p" + strconv.Itoa(i%policies)})
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-start
		for range 20 {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(ctx, &rm); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	close(start)
	wg.Wait()
	<-done
	want := "# ratekit.breaker.opens counter {opening}"
	for p := range policies {
		want += fmt.Sprintf("\nratekit.breaker.opens{policy=p%d} %d", p, goroutines*events)
	}
	if got := collect(t, reader); got != want {
		t.Errorf("collected:\n%s\nwant:\n%s", got, want)
	}
}

// TestCollectRules decides requests through a rule set of two rules and
// checks every data point: each limit has the attributes rule and policy
// (its name), apart from a policy of the same name outside the rule set,
// which has no rule attribute, as before rule sets were.
func TestCollectRules(t *testing.T) {
	m, reader := newMetrics(t, ratekitotel.WithLatencyBuckets([]float64{0.3, 1}))
	metricstest.RunRules(t, core.NewManualClock(start), m)
	want := `# ratekit.decisions counter {decision}
ratekit.decisions{outcome=allowed,policy=per-ip,rule=api} 2
ratekit.decisions{outcome=allowed,policy=per-ip,rule=login} 2
ratekit.decisions{outcome=allowed,policy=per-ip} 1
ratekit.decisions{outcome=denied,policy=per-ip,rule=api} 0
ratekit.decisions{outcome=denied,policy=per-ip,rule=login} 1
ratekit.decisions{outcome=denied,policy=per-ip} 0
ratekit.decisions{outcome=error,policy=per-ip,rule=api} 0
ratekit.decisions{outcome=error,policy=per-ip,rule=login} 0
ratekit.decisions{outcome=error,policy=per-ip} 0
# ratekit.near_limit counter {decision}
ratekit.near_limit{policy=per-ip,rule=api} 0
ratekit.near_limit{policy=per-ip,rule=login} 1
ratekit.near_limit{policy=per-ip} 0
# ratekit.shadow.decisions counter {decision}
ratekit.shadow.decisions{outcome=allowed,policy=watch,rule=login} 1
ratekit.shadow.decisions{outcome=denied,policy=watch,rule=login} 1
ratekit.shadow.decisions{outcome=error,policy=watch,rule=login} 0
# ratekit.shadow.peeks counter {peek}
ratekit.shadow.peeks{outcome=allowed,policy=watch,rule=login} 0
ratekit.shadow.peeks{outcome=denied,policy=watch,rule=login} 1
ratekit.shadow.peeks{outcome=error,policy=watch,rule=login} 0
# ratekit.store.latency histogram s
ratekit.store.latency{policy=per-ip,rule=api} count=2 sum=0 buckets=[0.3:2 1:0 +Inf:0]
ratekit.store.latency{policy=per-ip,rule=login} count=3 sum=0 buckets=[0.3:3 1:0 +Inf:0]
ratekit.store.latency{policy=per-ip} count=1 sum=0 buckets=[0.3:1 1:0 +Inf:0]`
	if got := collect(t, reader); got != want {
		t.Errorf("collected:\n%s\nwant:\n%s", got, want)
	}
}
