package httplimit

import (
	"slices"
	"testing"

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
		if got := layerNames(ps); !slices.Equal(got, tc.want) {
			t.Errorf("layerNames(%q) = %q, want %q", tc.names, got, tc.want)
		}
	}
}
