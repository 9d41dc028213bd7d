package ratekitprom_test

import (
	"testing"

	"github.com/ratekit/ratekit/internal/metricsview/metricstest"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/ratekitprom"
)

// newObserver returns a Metrics on no registry, for the benchmarks.
func newObserver(t testing.TB) observe.Observer {
	return must[*ratekitprom.Metrics](t)(ratekitprom.New(nil))
}

// BenchmarkHotKey measures what the Prometheus observer adds to a decision
// (see metricstest.BenchHotKey). Compare the pairs:
//
//	go test -run=^$ -bench=HotKey -benchmem -count=10 ./ratekitprom | tee new.txt
//	benchstat -col /hook new.txt
func BenchmarkHotKey(b *testing.B) { metricstest.BenchHotKey(b, "prometheus", newObserver) }

// BenchmarkHotKeyParallel is BenchmarkHotKey from every CPU at once: the
// counters of one policy are shared, so this shows their contention.
func BenchmarkHotKeyParallel(b *testing.B) {
	metricstest.BenchHotKeyParallel(b, "prometheus", newObserver)
}

// BenchmarkDecide measures what the observer adds to a rule set's
// decision: three events, two enforced limits and a shadow limit (see
// metricstest.BenchDecide).
func BenchmarkDecide(b *testing.B) { metricstest.BenchDecide(b, "prometheus", newObserver) }

// TestDecideAllocs checks that reporting a rule set's decision allocates
// nothing once its limits' series are made.
func TestDecideAllocs(t *testing.T) {
	if a := metricstest.DecideAllocs(t, newObserver(t)); a != 0 {
		t.Errorf("Decide: %v allocs, want 0", a)
	}
}
