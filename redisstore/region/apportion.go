package region

import (
	"errors"
	"fmt"
	"math/bits"
)

// Apportion splits limit units among regions by their demand: each region
// gets floor units, and the rest, limit - floor×len(demand), is divided in
// proportion to demand by the largest-remainder rule (Hamilton's method):
// region i first gets ⌊rest×demand[i]/total⌋; the units left over, fewer
// than len(demand), go one each to the regions with the largest remainders
// rest×demand[i] mod total, ties to the lower index. When every demand is 0
// the rest is divided equally by the same rule. The shares always sum to
// limit exactly, each is at least floor, and the result depends only on the
// arguments, so every region that computes it gets the same split.
//
// It fails when limit or floor is negative, a demand is negative, there is
// no region, or the floors add up to more than limit.
//
// A [Limiter] calls it for every period; it is exported so that an
// operator can compute, from the demand a group saw, the shares it used.
func Apportion(limit, floor int64, demand []int64) ([]int64, error) {
	n := int64(len(demand))
	switch {
	case n == 0:
		return nil, errors.New("region: Apportion: no region")
	case limit < 0 || floor < 0:
		return nil, fmt.Errorf("region: Apportion: limit %d and floor %d must not be negative", limit, floor)
	case floor > limit/n:
		return nil, fmt.Errorf("region: Apportion: %d regions with a floor of %d need more than the limit %d", n, floor, limit)
	}
	weights := demand
	var total uint64
	for i, d := range demand {
		if d < 0 {
			return nil, fmt.Errorf("region: Apportion: demand[%d] is %d, must not be negative", i, d)
		}
		var carry uint64
		total, carry = bits.Add64(total, uint64(d), 0)
		if carry != 0 { // above 2^64: halve every weight, deterministically
			return Apportion(limit, floor, halve(demand))
		}
	}
	if total == 0 {
		weights = make([]int64, n)
		for i := range weights {
			weights[i] = 1
		}
		total = uint64(n)
	}
	rest := uint64(limit - floor*n)
	shares := make([]int64, n)
	rems := make([]uint64, n)
	left := rest
	for i, w := range weights {
		hi, lo := bits.Mul64(rest, uint64(w))
		q, r := bits.Div64(hi, lo, total) // hi < total: rest×w/total <= rest
		shares[i] = floor + int64(q)
		rems[i] = r
		left -= q
	}
	// left < n: hand them out by largest remainder, ties to the lower index.
	for ; left > 0; left-- {
		best := -1
		for i, r := range rems {
			if best < 0 || r > rems[best] {
				best = i
			}
		}
		shares[best]++
		rems[best] = 0
		// A remainder of 0 may still win a later round only if all are 0,
		// which cannot happen while units are left: the remainders sum to
		// left×total.
	}
	return shares, nil
}

// halve returns demand with every value halved, rounding down.
func halve(demand []int64) []int64 {
	h := make([]int64, len(demand))
	for i, d := range demand {
		h[i] = d / 2
	}
	return h
}
