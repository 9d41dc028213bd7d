package core

import (
	"math/rand/v2"
	"testing"
)

func TestDivisor(t *testing.T) {
	const limit = 1 << divisorRange
	rng := rand.New(rand.NewPCG(7, 7))
	divisors := []uint64{1, 2, 3, 7, 10, 64, 97, 1000, 600_000_000, 1_000_000_007, 1 << 40, 39_587_628_866, limit - 1}
	for range 200 {
		divisors = append(divisors, 1+rng.Uint64N(limit-1), 1+rng.Uint64N(1<<20))
	}
	for _, d := range divisors {
		v := newDivisor(d)
		xs := []uint64{0, 1, d - 1, d, d + 1, 2*d - 1, limit - 1, limit - d}
		for range 2000 {
			xs = append(xs, rng.Uint64N(limit), rng.Uint64N(d*4+1)%limit)
		}
		for _, x := range xs {
			if x >= limit {
				continue
			}
			if got, want := v.div(x), x/d; got != want {
				t.Fatalf("%d / %d = %d, want %d", x, d, got, want)
			}
			if x < limit-d {
				if got, want := v.ceil(x), (x+d-1)/d; got != want {
					t.Fatalf("ceil(%d / %d) = %d, want %d", x, d, got, want)
				}
			}
		}
	}
}
