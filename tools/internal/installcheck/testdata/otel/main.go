// A limiter whose decisions are counted in OpenTelemetry metrics by
// ratekitotel, read by the SDK's manual reader; built outside the
// repository.
//
// go get github.com/ratekit/ratekit/ratekitotel@latest
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/ratekitotel"
)

func main() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	metrics, err := ratekitotel.New(ratekitotel.WithMeterProvider(provider))
	if err != nil {
		log.Fatal(err)
	}
	api, err := core.New(core.Policy{Name: "api", Limit: 10, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := observe.New(api, metrics)
	if err != nil {
		log.Fatal(err)
	}
	for range 12 {
		if _, err := limiter.AllowN(context.Background(), "203.0.113.7", 1); err != nil {
			log.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			fmt.Println(m.Name)
		}
	}
}
