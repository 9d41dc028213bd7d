package core_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
)

func TestMemorySettle(t *testing.T) {
	limitertest.RunSettle(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustNew(t, p, clock)
	})
}

// A single layer settles exactly as its Memory.
func TestLayeredSettleConformance(t *testing.T) {
	limitertest.RunSettle(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustLayered(t, mustNew(t, p, clock))
	})
}
