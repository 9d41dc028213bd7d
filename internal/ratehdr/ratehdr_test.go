package ratehdr

import (
	"math"
	"slices"
	"strconv"
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

// AppendInt agrees with strconv at every power of ten and its neighbours,
// after a prefix and into a buffer with and without room.
func TestAppendInt(t *testing.T) {
	var vs []int64
	for p := int64(1); p > 0 && p <= math.MaxInt64/10; p *= 10 {
		vs = append(vs, p-1, p, p+1, 10*p-1)
	}
	vs = append(vs, 0, -1, -10, math.MinInt64, math.MaxInt64, 999_999_999, 1_000_000_000)
	for _, v := range vs {
		checkAppendInt(t, v)
	}
}

func FuzzAppendInt(f *testing.F) {
	for _, v := range []int64{0, 9, 10, 99, 100, 59, 999_999_999, math.MaxInt64, math.MinInt64, -7} {
		f.Add(v)
	}
	f.Fuzz(checkAppendInt)
}

func checkAppendInt(t *testing.T, v int64) {
	t.Helper()
	want := strconv.AppendInt([]byte("r="), v, 10)
	if got := AppendInt([]byte("r="), v); string(got) != string(want) {
		t.Fatalf("AppendInt(%d) = %q, want %q", v, got, want)
	}
	if got := AppendInt(make([]byte, 2, 64), v)[2:]; string(got) != string(want[2:]) {
		t.Fatalf("AppendInt(%d) with room = %q, want %q", v, got, want[2:])
	}
}
