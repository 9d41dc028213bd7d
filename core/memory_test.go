package core_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
)

func TestMemoryConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		m, err := core.New(p, core.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}
