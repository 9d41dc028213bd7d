package metricsview

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/ratekit/ratekit/core"
)

// DefaultMaxPolicies is the number of distinct policy names that get
// series of their own unless WithMaxPolicies says otherwise.
const DefaultMaxPolicies = 256

// DefaultNearLimit is the fraction of the limit under which an allowed
// decision is near its limit unless WithNearLimit says otherwise: 10%.
const DefaultNearLimit = 0.1

// DefaultLatencyBuckets returns the default upper bounds of the latency
// histogram's buckets, in seconds: from 1µs (a memory store decides in
// well under that) to 1 s (a store that slow is down). It returns a new
// slice on every call.
func DefaultLatencyBuckets() []float64 {
	return []float64{
		1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
		1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
	}
}

// Config holds the options both exporters take, by the names of their
// options: WithLatencyBuckets, WithMaxPolicies and WithNearLimit.
type Config struct {
	// LatencyBuckets are the upper bounds, in seconds, of the latency
	// histogram's buckets.
	LatencyBuckets []float64
	// MaxPolicies bounds the number of policy names with series of their
	// own; the events of any more are counted under [OtherPolicy].
	MaxPolicies int
	// NearLimit is the fraction of the limit under which an allowed
	// decision is near its limit: see [NearRule].
	NearLimit float64
}

// DefaultConfig returns the defaults: [DefaultLatencyBuckets],
// [DefaultMaxPolicies] and [DefaultNearLimit].
func DefaultConfig() Config {
	return Config{LatencyBuckets: DefaultLatencyBuckets(), MaxPolicies: DefaultMaxPolicies, NearLimit: DefaultNearLimit}
}

// Validate returns an error naming the option whose value is invalid, for
// the exporter to wrap with its package name, or nil.
func (c *Config) Validate() error {
	if c.MaxPolicies < 1 {
		return fmt.Errorf("WithMaxPolicies(%d): must be at least 1", c.MaxPolicies)
	}
	b := c.LatencyBuckets
	if len(b) == 0 {
		return fmt.Errorf("WithLatencyBuckets: at least one bound is required")
	}
	for i, x := range b {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("WithLatencyBuckets: bounds must be finite, not %v", x)
		}
		if i > 0 && x <= b[i-1] {
			return fmt.Errorf("WithLatencyBuckets: bounds must increase, %v then %v", b[i-1], x)
		}
	}
	if f := c.NearLimit; !(f > 0 && f <= 1) {
		return fmt.Errorf("WithNearLimit(%v): the fraction must be more than 0 and at most 1", f)
	}
	if c.NearLimit < 1e-6 {
		return fmt.Errorf("WithNearLimit(%v): the fraction must be at least 0.000001, the rule counts in millionths", c.NearLimit)
	}
	return nil
}

// NearRule says whether an allowed decision left its key near the limit.
//
// The fraction f is kept in millionths, m = round(f × 1,000,000), and an
// allowed AllowN Decision is near its limit when
//
//	Remaining × 1,000,000 < m × Limit
//
// in exact integer arithmetic: with the default 10% and a limit of 100, a
// Remaining of 9 is near and 10 is not; with a limit of 5, only 0 is (10%
// of 5 is 0.5). A Decision whose Limit is 0 (one no policy made) is never
// near. Remaining above Limit, as a bucket's burst allows, is never near.
type NearRule struct {
	millionths uint64
}

// NewNearRule returns the rule for fraction f, which [Config.Validate]
// accepts.
func NewNearRule(f float64) NearRule {
	return NearRule{millionths: uint64(math.Round(f * 1e6))}
}

// Near reports whether d, an allowed decision, left its key near its
// limit by the rule.
func (r NearRule) Near(d core.Decision) bool {
	if d.Limit <= 0 {
		return false
	}
	// Both products fit in 128 bits whatever the int64s are.
	hiR, loR := bits.Mul64(uint64(max(d.Remaining, 0)), 1e6)
	hiL, loL := bits.Mul64(r.millionths, uint64(d.Limit))
	return hiR < hiL || hiR == hiL && loR < loL
}
