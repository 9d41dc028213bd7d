package ratehdr

import (
	"slices"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Names repeated across layers get the first free suffix, in layer order.
func TestLayerNames(t *testing.T) {
	for _, tc := range []struct {
		names, want []string
	}{
		{[]string{"burst", "daily"}, []string{"burst", "daily"}},
		{[]string{"", ""}, []string{"default", "default-2"}},
		{[]string{"", "default"}, []string{"default", "default-2"}},
		{[]string{"a", "a", "a-2"}, []string{"a", "a-3", "a-2"}},
		{[]string{"a", "a", "a"}, []string{"a", "a-2", "a-3"}},
	} {
		ps := make([]core.Policy, len(tc.names))
		for i, n := range tc.names {
			ps[i] = core.Policy{Name: n}
		}
		if got := LayerNames(ps); !slices.Equal(got, tc.want) {
			t.Errorf("LayerNames(%q) = %q, want %q", tc.names, got, tc.want)
		}
	}
}

// Layered formats what the middleware writes for a layered decision: one
// member per layer, a layer that denied with r=0 and its Retry-After, one
// that would have allowed with its figures, names escaped.
func TestLayered(t *testing.T) {
	burst := core.Policy{Name: "burst", Limit: 10, Window: time.Second}
	daily := core.Policy{Name: `da"y`, Limit: 1000, Window: 24*time.Hour + time.Millisecond}
	ds := []core.Decision{
		{Allowed: false, Limit: 10, RetryAfter: 1500 * time.Millisecond, ResetAfter: 2 * time.Second, Policy: burst},
		{Allowed: true, Limit: 1000, Remaining: 1200, ResetAfter: 90 * time.Second, Policy: daily},
	}
	policy, rate := Layered(ds, true)
	if want := `"burst";q=10;w=1, "da\"y";q=1000;w=86401`; policy != want {
		t.Errorf("policy %s, want %s", policy, want)
	}
	if want := `"burst";r=0;t=2, "da\"y";r=1000;t=90`; rate != want {
		t.Errorf("rate %s, want %s", rate, want)
	}
	if _, rate := Layered(ds[:1], false); rate != `"burst";r=0;t=2` {
		t.Errorf("allowed: rate %s", rate)
	}
}
