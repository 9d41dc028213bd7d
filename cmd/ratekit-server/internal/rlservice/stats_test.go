package rlservice

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
)

// promStats returns reg's per descriptor statistics, "name key=value".
func promStats(t *testing.T, reg *prometheus.Registry) map[string]int64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if v := int64(m.GetCounter().GetValue()); v != 0 {
				got[fmt.Sprintf("%s %s/%s", mf.GetName(), labels["domain"], labels["key"])] = v
			}
		}
	}
	return got
}

// otelStats returns the reader's per descriptor statistics, as promStats.
func otelStats(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !sum.IsMonotonic {
				t.Fatalf("%s: %T, want a monotonic int64 sum", m.Name, m.Data)
			}
			for _, dp := range sum.DataPoints {
				domain, _ := dp.Attributes.Value("domain")
				key, _ := dp.Attributes.Value("key")
				if dp.Value != 0 {
					got[fmt.Sprintf("%s %s/%s", m.Name, domain.AsString(), key.AsString())] = dp.Value
				}
			}
		}
	}
	return got
}

// The per descriptor statistics count units with envoyproxy/ratelimit's
// meanings, the same in Prometheus and OTel.
func TestStats(t *testing.T) {
	reg := prometheus.NewRegistry()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	l, err := New(mustConfig(t, testConfig), Options{Clock: core.NewManualClock(start), Registerer: reg, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range []struct {
		descs string
		hits  uint32
	}{
		{"a=1", 2},          // a: 2 of 5, within
		{"a=1", 2},          // 4 of 5: at the threshold (0.8 × 5), not past it
		{"a=1", 1},          // 5 of 5: 1 past it, near
		{"a=1", 1},          // over
		{"a=2;b=1", 1},      // b: 1 of 1, near (its threshold is 0)
		{"a=2;b=1", 1},      // b over; a would have allowed: within, nothing counted, not near
		{"shadow=1", 1},     // within, near
		{"shadow=1", 1},     // over, in shadow mode: over_limit and shadow_mode
		{"unl=1;zero=1", 3}, // unlimited: nothing; requests_per_unit 0: over
	} {
		if _, err := l.ShouldRateLimit(ctx, req("d", r.descs, r.hits)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{
		StatTotalHits + " d/a":        8,
		StatWithinLimit + " d/a":      7,
		StatNearLimit + " d/a":        1,
		StatOverLimit + " d/a":        1,
		StatTotalHits + " d/b":        2,
		StatWithinLimit + " d/b":      1,
		StatNearLimit + " d/b":        1,
		StatOverLimit + " d/b":        1,
		StatTotalHits + " d/shadow":   2,
		StatWithinLimit + " d/shadow": 1,
		StatNearLimit + " d/shadow":   1,
		StatOverLimit + " d/shadow":   1,
		StatShadowMode + " d/shadow":  1,
		StatTotalHits + " d/zero":     3,
		StatOverLimit + " d/zero":     3,
	}
	show := func(m map[string]int64) string {
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, "\n\t%s = %d", k, m[k])
		}
		return b.String()
	}
	wantProm := map[string]int64{}
	for k, v := range want {
		name, rest, _ := strings.Cut(k, " ")
		wantProm[strings.ReplaceAll(name, ".", "_")+" "+rest] = v
	}
	if got := promStats(t, reg); !maps.Equal(got, wantProm) {
		t.Errorf("Prometheus:%s\nwant%s", show(got), show(wantProm))
	}
	if got := otelStats(t, reader); !maps.Equal(got, want) {
		t.Errorf("OTel:%s\nwant%s", show(got), show(want))
	}
	if n := l.stats.count.Load(); n != 4 {
		t.Errorf("%d series handles built, want one per limit used, 4", n)
	}
}

// Deciding a request with statistics allocates no more than without.
func TestStatsAllocs(t *testing.T) {
	allocs := func(o Options) float64 {
		o.Clock = core.NewManualClock(start)
		l, err := New(mustConfig(t, testConfig), o)
		if err != nil {
			t.Fatal(err)
		}
		r := req("d", "a=1;shadow=1", 1)
		return testing.AllocsPerRun(100, func() { l.ShouldRateLimit(context.Background(), r) })
	}
	base := allocs(Options{})
	for name, o := range map[string]Options{
		"Prometheus": {Registerer: prometheus.NewRegistry()},
		"OTel":       {MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))},
	} {
		if with := allocs(o); with > base {
			t.Errorf("%s: %.0f allocations a request with statistics, %.0f without", name, with, base)
		}
	}
}
