package ratekitotel_test

import (
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
)

// BenchmarkHotKey measures what the OpenTelemetry observer adds to a
// decision, as ratekitprom's BenchmarkHotKey does for Prometheus: one hot
// key on a memory token bucket, on the system clock (the limiter's clock
// read and the observer's two are all paid, as in production), bare and
// wrapped in observe.New with a ratekitotel.Metrics on the SDK's
// MeterProvider (its instruments' cost included; the ManualReader never
// collects during the run). "flood" denies nearly every request
// (100/1m), "open" allows every one. Compare the pairs:
//
//	go test -run=^$ -bench=HotKey -benchmem -count=10 ./ratekitotel | tee new.txt
//	benchstat -col /hook new.txt
func BenchmarkHotKey(b *testing.B) {
	policies := map[string]core.Policy{
		"flood": {Name: "api", Limit: 100, Window: time.Minute},
		"open":  {Name: "api", Limit: core.MaxLimit, Window: time.Millisecond},
	}
	for _, regime := range []string{"flood", "open"} {
		for _, hook := range []string{"none", "otel"} {
			b.Run("regime="+regime+"/hook="+hook, func(b *testing.B) {
				var l core.Limiter = newMemory(b, policies[regime], core.SystemClock{})
				if hook == "otel" {
					m, _ := newMetrics(b)
					l = must[*observe.Limiter](b)(observe.New(l, m))
				}
				l.AllowN(ctx, "203.0.113.7", 1) // the key and the policy's series exist
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					l.AllowN(ctx, "203.0.113.7", 1)
				}
			})
		}
	}
}

// BenchmarkHotKeyParallel is BenchmarkHotKey from every CPU at once: the
// series of one policy are shared, so this shows their contention.
func BenchmarkHotKeyParallel(b *testing.B) {
	p := core.Policy{Name: "api", Limit: core.MaxLimit, Window: time.Millisecond}
	for _, hook := range []string{"none", "otel"} {
		b.Run("hook="+hook, func(b *testing.B) {
			var l core.Limiter = newMemory(b, p, core.SystemClock{})
			if hook == "otel" {
				m, _ := newMetrics(b)
				l = must[*observe.Limiter](b)(observe.New(l, m))
			}
			l.AllowN(ctx, "203.0.113.7", 1)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.AllowN(ctx, "203.0.113.7", 1)
				}
			})
		})
	}
}
