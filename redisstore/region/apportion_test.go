package region

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestApportion(t *testing.T) {
	tests := []struct {
		limit, floor int64
		demand       []int64
		want         []int64
	}{
		{600, 30, []int64{700, 200, 100}, []int64{387, 132, 81}},
		{600, 0, []int64{0, 0, 0}, []int64{200, 200, 200}},
		{10, 0, []int64{0, 0, 0}, []int64{4, 3, 3}},                                         // the remainder to the first
		{10, 1, []int64{1, 1, 1}, []int64{4, 3, 3}},                                         // ties to the lower index
		{10, 1, []int64{1, 1, 2}, []int64{3, 3, 4}},                                         // 7 by 1:1:2 = 1.75, 1.75, 3.5
		{100, 10, []int64{0, 5, 0}, []int64{10, 80, 10}},                                    // the silent get the floor
		{3, 1, []int64{9, 9, 9}, []int64{1, 1, 1}},                                          // floors take it all
		{1000, 0, []int64{1 << 62, 1 << 62, 1 << 62, 1 << 62}, []int64{250, 250, 250, 250}}, // sum above 2^63
		{7, 0, []int64{1}, []int64{7}},
	}
	for _, tt := range tests {
		got, err := Apportion(tt.limit, tt.floor, tt.demand)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("Apportion(%d, %d, %v) = %v, %v; want %v", tt.limit, tt.floor, tt.demand, got, err, tt.want)
		}
	}
	for _, bad := range []struct {
		limit, floor int64
		demand       []int64
	}{
		{10, 0, nil}, {-1, 0, []int64{1}}, {10, -1, []int64{1}}, {10, 4, []int64{1, 1, 1}}, {10, 0, []int64{1, -1}},
	} {
		if got, err := Apportion(bad.limit, bad.floor, bad.demand); err == nil {
			t.Errorf("Apportion(%d, %d, %v) = %v, want an error", bad.limit, bad.floor, bad.demand, got)
		}
	}
}

// TestApportionSum checks the invariants on random inputs: the shares sum
// to the limit exactly, none is under the floor, the same input gives the
// same split, and no share is more than one unit from its exact quota
// floor + rest×demand/total.
func TestApportionSum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		n := 1 + r.IntN(8)
		limit := r.Int64N(1_000_000_001)
		if r.IntN(3) == 0 {
			limit = r.Int64N(50)
		}
		floor := int64(0)
		if limit/int64(n) > 0 {
			floor = r.Int64N(limit/int64(n) + 1)
		}
		demand := make([]int64, n)
		for i := range demand {
			switch r.IntN(4) {
			case 0:
			case 1:
				demand[i] = r.Int64N(100)
			case 2:
				demand[i] = r.Int64N(1 << 40)
			default:
				demand[i] = r.Int64()
			}
		}
		got, err := Apportion(limit, floor, demand)
		if err != nil {
			t.Fatalf("Apportion(%d, %d, %v): %v", limit, floor, demand, err)
		}
		var sum int64
		for _, s := range got {
			if s < floor {
				t.Fatalf("Apportion(%d, %d, %v) = %v: a share under the floor", limit, floor, demand, got)
			}
			sum += s
		}
		if sum != limit {
			t.Fatalf("Apportion(%d, %d, %v) = %v, sum %d, want %d", limit, floor, demand, got, sum, limit)
		}
		again, _ := Apportion(limit, floor, slices.Clone(demand))
		if !slices.Equal(got, again) {
			t.Fatalf("Apportion(%d, %d, %v) = %v, then %v", limit, floor, demand, got, again)
		}
		var total float64
		for _, d := range demand {
			total += float64(d)
		}
		rest := float64(limit - floor*int64(n))
		for i, s := range got {
			quota := rest / float64(n)
			if total > 0 {
				quota = rest * float64(demand[i]) / total
			}
			if diff := float64(s-floor) - quota; diff > 1.001 || diff < -1.001 {
				t.Fatalf("Apportion(%d, %d, %v) = %v: share %d is %.3f from its quota", limit, floor, demand, got, i, diff)
			}
		}
	}
}
