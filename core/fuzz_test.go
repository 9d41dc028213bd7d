package core

import (
	"context"
	"math/big"
	"testing"
	"time"
)

// FuzzInvariant drives one algorithm with random traffic and costs on a
// manual clock and checks, after every request:
//   - Peek predicted what AllowN then decided;
//   - the decision equals an independent reference model of the algorithm's
//     definition, written with exact rationals (math/big);
//   - the allowed units obey the algorithm's bound: at most L in any window
//     of length W (sliding log), at most 2L (fixed and sliding window, whose
//     estimate is also re-checked to be <= L), and at most B + r·Δ over any
//     span Δ (token and leaky buckets).
//
// Input: byte 0 picks the algorithm, bytes 1-3 the policy, then each pair of
// bytes is one request: how far the clock moves, and the cost.
func FuzzInvariant(f *testing.F) {
	f.Add([]byte{0, 2, 0, 4, 0, 1, 0, 1, 0, 1, 200, 3, 1, 1})
	f.Add([]byte{1, 9, 1, 0, 250, 9, 3, 9, 4, 1, 128, 9, 0, 9})
	f.Add([]byte{2, 4, 2, 0, 10, 2, 10, 2, 100, 4, 5, 1, 255, 4})
	f.Add([]byte{3, 9, 0, 0, 60, 9, 1, 5, 30, 3, 90, 9, 70, 1})
	f.Add([]byte{4, 3, 1, 5, 0, 2, 0, 3, 1, 1, 64, 5, 0, 5})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		p := Policy{
			Algorithm: Algorithms()[int(data[0])%len(Algorithms())],
			Limit:     1 + int64(data[1]%10),
			Window:    time.Duration(1+data[2]%3) * time.Second,
		}
		if p.Algorithm.Burstable() {
			p.Burst = int64(data[3] % 16)
		}
		data = data[4:]
		if len(data) > 600 {
			data = data[:600]
		}
		clock := NewManualClock(time.Unix(1_700_000_040, 0))
		m, err := New(p, WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		ref := newReference(p, clock.Now().UnixNano()/1000)
		var allowed []event
		for i := 0; i+1 < len(data); i += 2 {
			// Moves from 0 to about 2W, with a microsecond component so
			// requests land on and next to boundaries, and a nanosecond
			// one that the stores round away.
			clock.Advance(time.Duration(data[i])*p.Window/128 + time.Duration(data[i]%3)*time.Microsecond + time.Duration(data[i+1]%7))
			n := 1 + int64(data[i+1])%p.Capacity()
			now := clock.Now().UnixNano() / 1000 // microseconds, as the store counts
			pd, err := m.Peek(context.Background(), "k", n)
			if err != nil {
				t.Fatal(err)
			}
			d, err := m.AllowN(context.Background(), "k", n)
			if err != nil {
				t.Fatal(err)
			}
			if !peekPredicts(pd, d, n) {
				t.Fatalf("request %d: Peek %+v, AllowN %+v", i/2, pd, d)
			}
			if want := ref.allow(now, n); d.Allowed != want {
				t.Fatalf("request %d (%v, n=%d at +%v): allowed=%v, reference says %v", i/2, p, n, time.Duration(now-ref.start)*time.Microsecond, d.Allowed, want)
			}
			if d.Allowed {
				allowed = append(allowed, event{now, n})
				checkBound(t, p, allowed)
			}
		}
	})
}

type event struct{ at, n int64 }

// checkBound checks the newest allowed event against every earlier one.
// Times are microseconds.
func checkBound(t *testing.T, p Policy, ev []event) {
	t.Helper()
	last := ev[len(ev)-1]
	W, L, B := int64(p.Window/time.Microsecond), p.Limit, p.Capacity()
	var inWindow int64 // units in (last.at - W, last.at]
	var span int64     // units in [ev[i].at, last.at]
	for i := len(ev) - 1; i >= 0; i-- {
		span += ev[i].n
		if ev[i].at > last.at-W {
			inWindow += ev[i].n
		}
		if p.Algorithm.Burstable() && span*W > B*W+L*(last.at-ev[i].at) {
			Δ := time.Duration(last.at-ev[i].at) * time.Microsecond
			t.Fatalf("%d units in %v, above Burst + rate·Δ = %d + %d·%v/%v", span, Δ, B, L, Δ, p.Window)
		}
	}
	switch p.Algorithm {
	case SlidingLog:
		if inWindow > L {
			t.Fatalf("%d units in one window, limit %d", inWindow, L)
		}
	case FixedWindow, SlidingWindow:
		if inWindow > 2*L {
			t.Fatalf("%d units in one window, above 2·%d", inWindow, L)
		}
	}
}

// reference is a direct, slow transcription of each algorithm's definition
// in exact rationals, on a clock of whole microseconds.
type reference struct {
	p      Policy
	start  int64
	tokens *big.Rat // token and leaky bucket: units of room
	last   int64
	log    []event // every allowed request
}

func newReference(p Policy, now int64) *reference {
	return &reference{p: p, start: now, tokens: new(big.Rat).SetInt64(p.Capacity()), last: now}
}

func rat(a, b int64) *big.Rat { return big.NewRat(a, b) }

func (r *reference) allow(now, n int64) bool {
	p := r.p
	W, L := int64(p.Window/time.Microsecond), p.Limit
	ok := false
	switch p.Algorithm {
	case TokenBucket, LeakyBucket:
		// Continuous refill at L/W per µs, capped at the capacity.
		gained := rat(L*(now-r.last), W)
		r.tokens.Add(r.tokens, gained)
		if c := rat(p.Capacity(), 1); r.tokens.Cmp(c) > 0 {
			r.tokens = c
		}
		r.last = now
		if ok = r.tokens.Cmp(rat(n, 1)) >= 0; ok {
			r.tokens.Sub(r.tokens, rat(n, 1))
		}
		return ok
	case FixedWindow:
		ok = r.sum(floorDiv(now, W)*W, now)+n <= L
	case SlidingLog:
		ok = r.sum(now-W+1, now)+n <= L
	case SlidingWindow:
		start := floorDiv(now, W) * W
		prev := r.sum(start-W, start-1)
		cur := r.sum(start, now)
		est := rat(prev*(W-(now-start)), W)
		est.Add(est, rat(cur+n, 1))
		ok = est.Cmp(rat(L, 1)) <= 0
	}
	if ok {
		r.log = append(r.log, event{now, n})
	}
	return ok
}

// sum returns the units allowed at times in [from, to].
func (r *reference) sum(from, to int64) int64 {
	var s int64
	for _, e := range r.log {
		if e.at >= from && e.at <= to {
			s += e.n
		}
	}
	return s
}
