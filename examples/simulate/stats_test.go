package main

import (
	"testing"
	"time"
)

func at(s ...float64) []event {
	out := make([]event, len(s))
	for i, v := range s {
		out[i] = event{at: time.Duration(v * float64(time.Second)), cost: 1}
	}
	return out
}

func TestWorstBurst(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []event
		units  int64
		where  span
	}{
		{"none", nil, 0, span{}},
		{"one", at(5), 1, span{5 * time.Second, 5 * time.Second}},
		// [30s, 90s) holds 30, 59, 60 and 61; 119 is out of [59s, 119s).
		{"sliding", at(0, 30, 59, 60, 61, 119), 4, span{30 * time.Second, 61 * time.Second}},
		// Exactly one window apart: never in the same window.
		{"half open", at(0, 60, 120, 180), 1, span{0, 0}},
		{"one microsecond less", at(0, 59.999999, 119.999998), 2, span{0, 59999999 * time.Microsecond}},
		// The fixed window's boundary: 100 at 0:59, 100 at 1:00.
		{"boundary", append(at(repeat(59, 100)...), at(repeat(60, 100)...)...), 200, span{59 * time.Second, 60 * time.Second}},
		{"costs", []event{{at: 0, cost: 50}, {at: 10 * time.Second, cost: 1}, {at: 69 * time.Second, cost: 60}}, 61, span{10 * time.Second, 69 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			units, where := worstBurst(tc.events, time.Minute)
			if units != tc.units || where != tc.where {
				t.Errorf("worstBurst = %d in %v, want %d in %v", units, where, tc.units, tc.where)
			}
		})
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestPercentile(t *testing.T) {
	var ms []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ms = append(ms, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		ds   []time.Duration
		p    int
		want time.Duration
	}{
		{ms, 50, 50 * time.Millisecond},
		{ms, 99, 99 * time.Millisecond},
		{ms, 100, 100 * time.Millisecond},
		{ms[95:], 50, 3 * time.Millisecond}, // 1..5: rank ⌈2.5⌉ = 3
		{ms[95:], 99, 5 * time.Millisecond}, // rank ⌈4.95⌉ = 5
		{ms[99:], 1, 1 * time.Millisecond},  // one value
		{ms[98:], 50, 1 * time.Millisecond}, // 1, 2: rank 1
		{ms[98:], 51, 2 * time.Millisecond}, // rank ⌈1.02⌉ = 2
	} {
		got, ok := percentile(tc.ds, tc.p)
		if !ok || got != tc.want {
			t.Errorf("p%d of %d values = %v, %v; want %v", tc.p, len(tc.ds), got, ok, tc.want)
		}
	}
	if _, ok := percentile(nil, 50); ok {
		t.Error("p50 of nothing: ok")
	}
	if ms[0] != 100*time.Millisecond {
		t.Error("percentile sorted its argument")
	}
}
