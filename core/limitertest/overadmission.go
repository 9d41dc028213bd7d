package limitertest

import (
	"time"

	"github.com/ratekit/ratekit/core"
)

// OverAdmission returns the most units admitted in any span of steps beyond
// what a token bucket of policy p allows in that span (its Capacity plus the
// refill over the span's length), or a negative number if no span went over.
// admitted[i] is what was admitted in step i, each step lasting step. Tests of
// wrappers that trade exactness for fewer store calls (leases, regional
// shares) use it to measure their over-admission.
func OverAdmission(p core.Policy, step time.Duration, admitted []int64) int64 {
	// The worst span begins and ends with a step that admitted something.
	var at, sum []int64
	sum = append(sum, 0)
	for i, a := range admitted {
		if a > 0 {
			at = append(at, int64(i))
			sum = append(sum, sum[len(sum)-1]+a)
		}
	}
	worst := int64(-1 << 62)
	for i := range at {
		for j := i; j < len(at); j++ {
			span := time.Duration(at[j]-at[i]) * step
			worst = max(worst, sum[j+1]-sum[i]-p.Capacity()-int64(span)*p.Limit/int64(p.Window))
		}
	}
	return worst
}
