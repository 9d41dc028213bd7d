package core_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// One cost per layer: each layer counts its own cost, all or nothing, and a
// layer that refuses charges none.
func TestLayeredCosts(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	calls := mustNew(t, core.Policy{Name: "calls", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute}, clock)
	bytes := mustNew(t, core.Policy{Name: "bytes", Limit: 100, Window: time.Minute}, clock)
	l := mustLayered(t, calls, bytes)
	keys := []string{"ana"}
	var dst [2]core.Decision
	for i, tc := range []struct {
		at                   time.Duration
		calls, bytes         int64
		allowed              bool
		layer                int
		leftCalls, leftBytes int64
		retryAfter           time.Duration
	}{
		{0, 1, 60, true, 0, 9, 40, 0},
		{0, 1, 30, true, 0, 8, 10, 0},
		// bytes refuses 20 of 10 left (10 more take 6s at 100/min):
		// calls is charged nothing either.
		{0, 1, 20, false, 1, 8, 10, 6 * time.Second},
		{0, 8, 10, true, 0, 0, 0, 0},
		// calls refuses until its window ends; bytes, refilled to 10,
		// would allow but counts nothing.
		{6 * time.Second, 1, 1, false, 0, 0, 10, 54 * time.Second},
	} {
		clock.Advance(tc.at)
		d, err := l.AllowCosts(ctx, keys, []int64{tc.calls, tc.bytes}, dst[:0])
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if d.Allowed != tc.allowed || d.Layer != tc.layer || d.RetryAfter != tc.retryAfter {
			t.Errorf("request %d: allowed=%v layer=%d retry=%v, want %v, %d, %v", i, d.Allowed, d.Layer, d.RetryAfter, tc.allowed, tc.layer, tc.retryAfter)
		}
		if len(d.Layers) != 2 || &d.Layers[0] != &dst[0] {
			t.Errorf("request %d: Layers is not dst", i)
		}
		pc, _ := calls.Peek(ctx, "ana", 1)
		pb, _ := bytes.Peek(ctx, "ana", 1)
		if pc.Remaining != tc.leftCalls || pb.Remaining != tc.leftBytes {
			t.Errorf("request %d: left calls=%d bytes=%d, want %d, %d", i, pc.Remaining, pb.Remaining, tc.leftCalls, tc.leftBytes)
		}
	}
	// Peek counts nothing and agrees with AllowCosts.
	p, err := l.PeekCosts(ctx, keys, []int64{1, 5}, dst[:0])
	if err != nil || p.Allowed || p.Layer != 0 {
		t.Errorf("PeekCosts: %+v, %v; want denied by layer 0", p, err)
	}
	// Refund gives each layer back its own cost (elapsed 0: the whole
	// cost, the refill having returned none of it).
	if err := l.RefundCosts(ctx, keys, []int64{8, 10}, 0); err != nil {
		t.Fatal(err)
	}
	pc, _ := calls.Peek(ctx, "ana", 1)
	pb, _ := bytes.Peek(ctx, "ana", 1)
	if pc.Remaining != 8 || pb.Remaining != 20 {
		t.Errorf("after refund: calls=%d bytes=%d, want 8, 20", pc.Remaining, pb.Remaining)
	}
}

func TestLayeredCostsErrors(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	a := mustNew(t, core.Policy{Name: "a", Limit: 10, Window: time.Minute}, clock)
	b := mustNew(t, core.Policy{Name: "b", Limit: 100, Window: time.Minute}, clock)
	l := mustLayered(t, a, b)
	for _, tc := range []struct {
		name  string
		costs []int64
		want  error
		layer int
	}{
		{"one cost", []int64{1}, nil, -1},
		{"three costs", []int64{1, 1, 1}, nil, -1},
		{"zero", []int64{1, 0}, core.ErrInvalidCost, 1},
		{"negative", []int64{-1, 1}, core.ErrInvalidCost, 0},
		{"above capacity", []int64{1, 101}, core.ErrCostTooHigh, 1},
	} {
		d, err := l.AllowCosts(ctx, []string{"k"}, tc.costs, nil)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || d.Allowed || d.Layer != tc.layer {
			t.Errorf("%s: %+v, %v; want %v at layer %d", tc.name, d, err, tc.want, tc.layer)
		}
		if err := l.RefundCosts(ctx, []string{"k"}, tc.costs, 0); err == nil {
			t.Errorf("%s: RefundCosts succeeded", tc.name)
		}
		if _, err := l.PeekCosts(ctx, []string{"k"}, tc.costs, nil); err == nil {
			t.Errorf("%s: PeekCosts succeeded", tc.name)
		}
	}
	// Nothing was counted by any refused call.
	for _, m := range []*core.Memory{a, b} {
		if d, _ := m.Peek(ctx, "k", 1); d.Remaining != m.Policy().Limit {
			t.Errorf("%s: %d left, want %d", m.Policy().Name, d.Remaining, m.Policy().Limit)
		}
	}
}

// A dst with room for every layer makes AllowCosts allocate nothing.
func TestLayeredCostsAllocs(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	l := mustLayered(t,
		mustNew(t, core.Policy{Name: "a", Limit: 1e9, Window: time.Minute}, clock),
		mustNew(t, core.Policy{Name: "b", Algorithm: core.FixedWindow, Limit: 1e9, Window: time.Minute}, clock))
	keys := []string{"ip", "account"}
	costs := []int64{1, 3}
	var dst [2]core.Decision
	if n := testing.AllocsPerRun(100, func() {
		if _, err := l.AllowCosts(ctx, keys, costs, dst[:0]); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AllowCosts: %v allocs, want 0", n)
	}
}

func BenchmarkLayeredCosts(b *testing.B) {
	clock := core.NewManualClock(layeredStart)
	l := mustLayered(b,
		mustNew(b, core.Policy{Name: "a", Limit: 1e9, Window: time.Hour}, clock),
		mustNew(b, core.Policy{Name: "b", Algorithm: core.FixedWindow, Limit: 1e9, Window: time.Hour}, clock))
	keys := []string{"k", "/x"}
	costs := []int64{1, 1}
	var dst [2]core.Decision
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.AllowCosts(ctx, keys, costs, dst[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
