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
