package core

import "math/bits"

// Exact integer helpers. Times and durations are int64 microseconds; products
// that can pass 2^63 (Limit × Window reaches 1e9 × 3.2e13) go through 128
// bits.

// mulDivCeil returns ceil(a*b/c), saturating at the largest uint64.
func mulDivCeil(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0)
	}
	q, r := bits.Div64(hi, lo, c)
	if r != 0 {
		q++
	}
	return q
}

// mulDivFloor returns floor(a*b/c), saturating at the largest uint64.
func mulDivFloor(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// mulSat returns a*b, saturating at the largest uint64.
func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// floorDiv returns floor(a/b) for b > 0, rounding towards minus infinity
// for negative a (times before 1970 on a manual clock).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// u128 is an unsigned 128-bit integer for exact comparisons.
type u128 struct{ hi, lo uint64 }

func mul128(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, carry)
	return u128{hi, lo}
}

func (x u128) less(y u128) bool { return x.hi < y.hi || x.hi == y.hi && x.lo < y.lo }

// divisor divides by a fixed d with a multiplication and a shift instead of a
// hardware division (Granlund and Montgomery, "Division by invariant
// integers using multiplication", 1994). For N = 62 and l = ceil(log2 d),
// m = ceil(2^(N+l)/d) satisfies 2^(N+l) <= m·d <= 2^(N+l) + 2^l, so
// floor(x/d) = floor(x·m / 2^(N+l)) for every 0 <= x < 2^N.
type divisor struct {
	d     uint64
	m     uint64
	shift uint // N + l
}

// divisorRange is N: div is exact for dividends below 2^divisorRange.
const divisorRange = 62

func newDivisor(d uint64) divisor {
	l := uint(bits.Len64(d - 1)) // ceil(log2 d); 0 for d = 1
	k := divisorRange + l
	// m = ceil(2^k / d), with 2^k as a 128-bit number.
	var hi, lo uint64
	if k >= 64 {
		hi = 1 << (k - 64)
	} else {
		lo = 1 << k
	}
	q, r := bits.Div64(hi, lo, d)
	if r != 0 {
		q++
	}
	return divisor{d: d, m: q, shift: k}
}

// div returns floor(x/d) for 0 <= x < 2^62.
func (v divisor) div(x uint64) uint64 {
	hi, lo := bits.Mul64(x, v.m)
	// The shift is 62 to 126: the masks change no count, and spare the
	// code for counts of 64 and more.
	if v.shift >= 64 {
		return hi >> ((v.shift - 64) & 63)
	}
	return hi<<((64-v.shift)&63) | lo>>(v.shift&63)
}

// ceil returns ceil(x/d) for 0 <= x < 2^62 - d.
func (v divisor) ceil(x uint64) uint64 { return v.div(x + v.d - 1) }
