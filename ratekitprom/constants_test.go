package ratekitprom

import (
	"testing"

	"github.com/ratekit/ratekit/internal/metricsview"
	"github.com/ratekit/ratekit/internal/metricsview/metricstest"
)

// TestConstants checks the exported defaults and label values, written as
// literals so that go doc shows their values, against the internal ones
// the metrics are made with.
func TestConstants(t *testing.T) {
	if DefaultMaxPolicies != metricsview.DefaultMaxPolicies {
		t.Errorf("DefaultMaxPolicies = %d, metricsview's %d", DefaultMaxPolicies, metricsview.DefaultMaxPolicies)
	}
	if DefaultNearLimit != metricsview.DefaultNearLimit {
		t.Errorf("DefaultNearLimit = %v, metricsview's %v", DefaultNearLimit, metricsview.DefaultNearLimit)
	}
	if UnnamedPolicy != metricsview.UnnamedPolicy {
		t.Errorf("UnnamedPolicy = %q, metricsview's %q", UnnamedPolicy, metricsview.UnnamedPolicy)
	}
	if OtherPolicy != metricsview.OtherPolicy {
		t.Errorf("OtherPolicy = %q, metricsview's %q", OtherPolicy, metricsview.OtherPolicy)
	}
}

// TestBucketsDoc checks that WithLatencyBuckets's doc lists the default
// bounds.
func TestBucketsDoc(t *testing.T) { metricstest.CheckBucketsDoc(t, "ratekitprom.go") }
