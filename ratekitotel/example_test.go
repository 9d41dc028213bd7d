package ratekitotel_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/ratekitotel"
)

// A limiter of 10 a minute observed into an SDK MeterProvider (here with a
// ManualReader; a service gives it an OTLP exporter's reader): 12 requests
// are 10 allowed and 2 denied, and the tenth, which left 0 of 10, was near
// its limit.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	metrics, err := ratekitotel.New(ratekitotel.WithMeterProvider(provider))
	if err != nil {
		panic(err)
	}

	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	api, err := core.New(core.Policy{Name: "api", Limit: 10, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	limiter, err := observe.New(api, metrics, observe.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for range 12 {
		limiter.Allow(context.Background(), "203.0.113.7")
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					lines = append(lines, fmt.Sprintf("%s %s {%s} %d", m.Name, m.Unit, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// ratekit.decisions {decision} {outcome=allowed,policy=api} 10
	// ratekit.decisions {decision} {outcome=denied,policy=api} 2
	// ratekit.decisions {decision} {outcome=error,policy=api} 0
	// ratekit.near_limit {decision} {policy=api} 1
}
