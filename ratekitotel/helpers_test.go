package ratekitotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/internal/metricsview/metricstest"
	"github.com/ratekit/ratekit/ratekitotel"
)

var (
	ctx     = context.Background()
	start   = metricstest.Start
	errDown = metricstest.ErrDown
)

// must and newMemory, under the names these tests use.
func must[T any](t testing.TB) func(T, error) T { return metricstest.Must[T](t) }

var newMemory = metricstest.NewMemory

// newMetrics returns a Metrics on an SDK MeterProvider and the reader that
// collects from it.
func newMetrics(t testing.TB, opts ...ratekitotel.Option) (*ratekitotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	return newMetricsReader(t, sdkmetric.NewManualReader(), opts...)
}

// newMetricsReader returns a Metrics on an SDK MeterProvider with reader.
func newMetricsReader(t testing.TB, reader *sdkmetric.ManualReader, opts ...ratekitotel.Option) (*ratekitotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { provider.Shutdown(context.Background()) })
	m := must[*ratekitotel.Metrics](t)(ratekitotel.New(append([]ratekitotel.Option{ratekitotel.WithMeterProvider(provider)}, opts...)...))
	return m, reader
}

// collect collects from reader and returns the metrics of the given names
// (all when none is given) as text, sorted: a line "# name kind unit" for
// each metric, then a line per data point, "name{attributes} value", a
// histogram's as "count=… sum=… buckets=[bound:count … +Inf:count]".
func collect(t testing.TB, reader *sdkmetric.ManualReader, names ...string) string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	type block struct {
		name  string
		lines []string
	}
	var blocks []block
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ratekitotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, ratekitotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			if len(names) > 0 && !slices.Contains(names, m.Name) {
				continue
			}
			if m.Description == "" {
				t.Errorf("%s has no description", m.Name)
			}
			var kind string
			var points []string
			point := func(attrs attribute.Set, value string) {
				points = append(points, fmt.Sprintf("%s{%s} %s", m.Name, attrs.Encoded(attribute.DefaultEncoder()), value))
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				kind = "updowncounter"
				if d.IsMonotonic {
					kind = "counter"
				}
				for _, p := range d.DataPoints {
					point(p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Gauge[int64]:
				kind = "gauge"
				for _, p := range d.DataPoints {
					point(p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Histogram[float64]:
				kind = "histogram"
				for _, p := range d.DataPoints {
					var b []string
					for i, n := range p.BucketCounts {
						bound := "+Inf"
						if i < len(p.Bounds) {
							bound = fmt.Sprint(p.Bounds[i])
						}
						b = append(b, fmt.Sprintf("%s:%d", bound, n))
					}
					point(p.Attributes, fmt.Sprintf("count=%d sum=%v buckets=[%s]", p.Count, p.Sum, strings.Join(b, " ")))
				}
			default:
				t.Errorf("%s: data of type %T", m.Name, m.Data)
			}
			slices.Sort(points)
			blocks = append(blocks, block{m.Name, append([]string{fmt.Sprintf("# %s %s %s", m.Name, kind, m.Unit)}, points...)})
		}
	}
	slices.SortFunc(blocks, func(a, b block) int { return strings.Compare(a.name, b.name) })
	var out []string
	for _, b := range blocks {
		out = append(out, b.lines...)
	}
	return strings.Join(out, "\n")
}
