package metricstest

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
)

// BenchHotKey measures what an exporter adds to a decision: one hot key on
// a memory token bucket, on the system clock (the limiter's clock read and
// the observer's two are all paid, as in production), bare (hook=none) and
// wrapped in observe.New with the observer newObs returns (hook=name).
// "flood" denies nearly every request (100/1m), "open" allows every one.
func BenchHotKey(b *testing.B, name string, newObs func(testing.TB) observe.Observer) {
	policies := map[string]core.Policy{
		"flood": {Name: "api", Limit: 100, Window: time.Minute},
		"open":  {Name: "api", Limit: core.MaxLimit, Window: time.Millisecond},
	}
	for _, regime := range []string{"flood", "open"} {
		for _, hook := range []string{"none", name} {
			b.Run("regime="+regime+"/hook="+hook, func(b *testing.B) {
				l := hotLimiter(b, policies[regime], hook != "none", newObs)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					l.AllowN(context.Background(), "203.0.113.7", 1)
				}
			})
		}
	}
}

// BenchHotKeyParallel is BenchHotKey's "open" regime from every CPU at
// once: the series of one policy are shared, so this shows their
// contention.
func BenchHotKeyParallel(b *testing.B, name string, newObs func(testing.TB) observe.Observer) {
	p := core.Policy{Name: "api", Limit: core.MaxLimit, Window: time.Millisecond}
	for _, hook := range []string{"none", name} {
		b.Run("hook="+hook, func(b *testing.B) {
			l := hotLimiter(b, p, hook != "none", newObs)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.AllowN(context.Background(), "203.0.113.7", 1)
				}
			})
		})
	}
}

// hotLimiter returns a memory limiter of p on the system clock, observed
// when observed is set, with its key and the policy's series made.
func hotLimiter(b *testing.B, p core.Policy, observed bool, newObs func(testing.TB) observe.Observer) core.Limiter {
	var l core.Limiter = NewMemory(b, p, core.SystemClock{})
	if observed {
		l = Must[*observe.Limiter](b)(observe.New(l, newObs(b)))
	}
	l.AllowN(context.Background(), "203.0.113.7", 1)
	return l
}
