package ratekitotel_test

import (
	"testing"

	"github.com/ratekit/ratekit/internal/metricsview/metricstest"
	"github.com/ratekit/ratekit/observe"
)

// newObserver returns a Metrics on the SDK's MeterProvider (its
// instruments' cost included; the ManualReader never collects during a
// run), for the benchmarks.
func newObserver(t testing.TB) observe.Observer {
	m, _ := newMetrics(t)
	return m
}

// BenchmarkHotKey measures what the OpenTelemetry observer adds to a
// decision (see metricstest.BenchHotKey), as ratekitprom's does for
// Prometheus. Compare the pairs:
//
//	go test -run=^$ -bench=HotKey -benchmem -count=10 ./ratekitotel | tee new.txt
//	benchstat -col /hook new.txt
func BenchmarkHotKey(b *testing.B) { metricstest.BenchHotKey(b, "otel", newObserver) }

// BenchmarkHotKeyParallel is BenchmarkHotKey from every CPU at once: the
// series of one policy are shared, so this shows their contention.
func BenchmarkHotKeyParallel(b *testing.B) { metricstest.BenchHotKeyParallel(b, "otel", newObserver) }

// BenchmarkDecide measures what the observer adds to a rule set's
// decision: three events, two enforced limits and a shadow limit (see
// metricstest.BenchDecide).
func BenchmarkDecide(b *testing.B) { metricstest.BenchDecide(b, "otel", newObserver) }

// TestDecideAllocs checks that reporting a rule set's decision allocates
// nothing once its limits' series are made.
func TestDecideAllocs(t *testing.T) {
	if a := metricstest.DecideAllocs(t, newObserver(t)); a != 0 {
		t.Errorf("Decide: %v allocs, want 0", a)
	}
}
