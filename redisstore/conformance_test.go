package redisstore

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
)

// The conformance suite on a single node, the limiter reading the suite's
// manual clock.
func TestConformance(t *testing.T) {
	t.Parallel() // with the other conformance run, after the package's other tests
	addr := singleNode(t)
	client := newClient(t, addr)
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		l, err := New(client, p, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

// The refund suite on a single node, for a Limiter and for a Layered of
// one layer, which refunds as a Limiter of its policy.
func TestRefundConformance(t *testing.T) {
	t.Parallel()
	client := newClient(t, singleNode(t))
	t.Run("Limiter", func(t *testing.T) {
		limitertest.RunRefund(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
			return mustNew(t, client, p, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
		})
	})
	t.Run("Layered", func(t *testing.T) {
		limitertest.RunRefund(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
			return mustLayered(t, client, []core.Policy{p}, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
		})
	})
}
