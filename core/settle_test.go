package core

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldUnits returns what key's state counts at now (algorithm.holds), for
// the tests: 0 for a key not held.
func (s *store[S, A]) heldUnits(key string, now int64) int64 {
	sh, h, check := s.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, res := sh.find(h&tagHash|tagUsed, check)
	if res != found {
		return 0
	}
	units, _ := s.alg.holds(s.load(&sh.slots[i].state), now)
	return units
}

func heldUnits(t *testing.T, m *Memory, key string) int64 {
	t.Helper()
	return m.eng.(interface{ heldUnits(string, int64) int64 }).heldUnits(key, m.now())
}

// settlePolicies are one policy per algorithm, and a calendar window.
func settlePolicies() []Policy {
	return []Policy{
		{Name: "token", Algorithm: TokenBucket, Limit: 3, Window: time.Second, Burst: 10},
		{Name: "leaky", Algorithm: LeakyBucket, Limit: 10, Window: 10 * time.Second},
		{Name: "fixed", Algorithm: FixedWindow, Limit: 10, Window: 10 * time.Second},
		{Name: "calendar", Algorithm: FixedWindow, Limit: 10, Window: 24 * time.Hour, Calendar: CalendarDay, Zone: "Europe/Berlin"},
		{Name: "sliding", Algorithm: SlidingWindow, Limit: 10, Window: 10 * time.Second},
		{Name: "log", Algorithm: SlidingLog, Limit: 10, Window: 10 * time.Second},
	}
}

// A key that overspends by k units is denied, with Remaining 0, for
// exactly as long as its algorithm takes to free room for the next
// request, and allowed at that time, not 1 µs before.
func TestSettleOverspendWaitsExactly(t *testing.T) {
	ctx := context.Background()
	for _, p := range settlePolicies() {
		for _, k := range []int64{1, 3, 7} {
			for _, n := range []int64{1, 4, p.Capacity()} {
				t.Run(fmt.Sprintf("%s/k=%d/n=%d", p.Name, k, n), func(t *testing.T) {
					// 2.5 s into an epoch window of 10 s; 21:00 in Berlin.
					start := time.Unix(1_800_000_002, 500_000_000)
					clock := NewManualClock(start)
					m := mustNew(t, p, WithClock(clock))
					C := p.Capacity()
					W := p.Window
					var want time.Duration // the wait for n units
					switch p.Algorithm {
					case TokenBucket, LeakyBucket:
						// The whole bucket, then k more: a backlog of
						// (C+k)·T, of which n·T must fit in C·T.
						mustAllow(t, m, "k", C)
						want = time.Duration(ceilDiv(int64((k+n)*int64(W/time.Microsecond)), p.Limit)) * time.Microsecond
					case FixedWindow:
						mustAllow(t, m, "k", C)
						_, end := m.eng.(*store[fwState, *fixedWindow]).alg.at(m.now())
						want = time.Duration(end-m.now()) * time.Microsecond
					case SlidingWindow:
						mustAllow(t, m, "k", C)
						// Next window: prev = C+k weighs (W-e)/W; n fits
						// once (C+k)·(W-e) <= (L-n)·W.
						Wu := int64(W / time.Microsecond)
						e0 := m.now() % Wu
						e := Wu - (p.Limit-n)*Wu/(C+k)
						want = time.Duration(Wu-e0+e) * time.Microsecond
					case SlidingLog:
						mustAllow(t, m, "k", 4)
						clock.Advance(time.Second)
						mustAllow(t, m, "k", C-4)
						clock.Advance(time.Second)
						// The log holds 4 at 0 s, C-4 at 1 s, k at 2 s:
						// n fits once k+n units have left, the entries
						// at 0 s (4 units) and 1 s (C-4) leaving at 10 s
						// and 11 s.
						switch need := k + n; {
						case need <= 4:
							want = W - 2*time.Second
						case need <= C:
							want = W - time.Second
						default:
							want = W
						}
					}
					est := int64(1)
					if p.Algorithm == SlidingLog {
						est = C - 4
					}
					// The last request estimated est and cost est+k more
					// than it: settle it now.
					if err := m.Settle(ctx, "k", est, est+k, 0); err != nil {
						t.Fatal(err)
					}
					for _, peek := range []bool{true, false} {
						d := decideAt(t, m, "k", n, peek)
						if d.Allowed || d.Remaining != 0 || d.RetryAfter != want {
							t.Fatalf("in debt (peek %v): %+v, want denied, Remaining 0, RetryAfter %v", peek, d, want)
						}
						if d.ResetAfter < d.RetryAfter {
							t.Fatalf("ResetAfter %v before RetryAfter %v", d.ResetAfter, d.RetryAfter)
						}
					}
					if u := heldUnits(t, m, "k"); u <= p.Limit && p.Algorithm != SlidingWindow {
						t.Fatalf("holds %d units, want more than the limit %d", u, p.Limit)
					}
					clock.Advance(want - time.Microsecond)
					if d := decideAt(t, m, "k", n, false); d.Allowed || d.RetryAfter != time.Microsecond {
						t.Fatalf("1µs before: %+v, want denied for 1µs", d)
					}
					clock.Advance(time.Microsecond)
					if d := decideAt(t, m, "k", n, false); !d.Allowed {
						t.Fatalf("at RetryAfter: %+v, want allowed", d)
					}
				})
			}
		}
	}
}

// decideAt is AllowN (or Peek) that fails the test on error.
func decideAt(t *testing.T, m *Memory, key string, n int64, peek bool) Decision {
	t.Helper()
	f := m.AllowN
	if peek {
		f = m.Peek
	}
	d, err := f(context.Background(), key, n)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustAllow(t *testing.T, m *Memory, key string, n int64) {
	t.Helper()
	if d := decideAt(t, m, key, n, false); !d.Allowed {
		t.Fatalf("AllowN(%d): %+v, want allowed", n, d)
	}
}

// A debt is bounded at one capacity past the limit: a huge actual cost
// overflows nothing, and the key waits as long as a debt of one capacity
// takes.
func TestSettleDebtBound(t *testing.T) {
	ctx := context.Background()
	for _, p := range settlePolicies() {
		t.Run(p.Name, func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_002, 500_000_000))
			m := mustNew(t, p, WithClock(clock))
			mustAllow(t, m, "k", 1)
			for range 3 {
				if err := m.Settle(ctx, "k", 1, 1<<62, 0); err != nil {
					t.Fatal(err)
				}
			}
			if u, most := heldUnits(t, m, "k"), 2*p.Capacity(); u != most && p.Algorithm != SlidingWindow {
				t.Fatalf("holds %d units, want the bound %d", u, most)
			}
			d := decideAt(t, m, "k", 1, true)
			most := max(3*p.Window, time.Duration(2*p.Capacity())*p.Window/time.Duration(p.Limit)+time.Microsecond)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > d.ResetAfter || d.ResetAfter > most {
				t.Fatalf("at the bound: %+v", d)
			}
			// A key never seen is charged too: its request ran while its
			// state was dropped.
			if err := m.Settle(ctx, "new", 1, 3, 0); err != nil {
				t.Fatal(err)
			}
			if u := heldUnits(t, m, "new"); u != 2 && p.Algorithm != SlidingWindow {
				t.Fatalf("a new key charged 2 holds %d", u)
			}
		})
	}
}

func TestSettleErrors(t *testing.T) {
	ctx := context.Background()
	m := mustNew(t, Policy{Algorithm: TokenBucket, Limit: 10, Window: time.Second})
	for _, c := range []struct {
		key         string
		est, actual int64
		elapsed     time.Duration
		want        error
	}{
		{"", 1, 1, 0, ErrEmptyKey},
		{"k", 0, 1, 0, ErrInvalidCost},
		{"k", 1, -1, 0, ErrInvalidCost},
		{"k", 1, 2, -1, ErrInvalidElapsed},
	} {
		err := m.Settle(ctx, c.key, c.est, c.actual, c.elapsed)
		if !errors.Is(err, c.want) || !CallerError(ctx, err) {
			t.Errorf("Settle(%q, %d, %d, %v) = %v, want %v, a caller error", c.key, c.est, c.actual, c.elapsed, err, c.want)
		}
	}
	if n := m.Stats().Keys; n != 0 {
		t.Fatalf("failed settles hold %d keys", n)
	}
	if err := m.Settle(ctx, "k", 1, 1, 0); err != nil || m.Stats().Keys != 0 {
		t.Fatalf("a settle at the estimate: %v, %d keys; want nothing done", err, m.Stats().Keys)
	}
	// An estimate above the capacity (a policy lowered since) is settled.
	if err := m.Settle(ctx, "k", 100, 101, 0); err != nil {
		t.Fatal(err)
	}
}

// Settling below the estimate is Refund of the difference, elapsed and
// all: twins on one clock, one settling and one refunding, decide alike.
func TestSettleBelowMatchesRefund(t *testing.T) {
	ctx := context.Background()
	for _, p := range settlePolicies() {
		t.Run(p.Name, func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_002, 500_000_000))
			a := mustNew(t, p, WithClock(clock))
			b := mustNew(t, p, WithClock(clock))
			rng := rand.New(rand.NewPCG(3, uint64(len(p.Name))))
			C := p.Capacity()
			type open struct {
				key string
				n   int64
				at  time.Time
			}
			var reqs []open
			for step := range 2000 {
				clock.Advance(time.Duration(rng.Int64N(int64(p.Window / 8))))
				key := []string{"x", "y"}[rng.IntN(2)]
				if rng.IntN(2) == 0 || len(reqs) == 0 {
					n := 1 + rng.Int64N(C)
					da, db := decideAt(t, a, key, n, false), decideAt(t, b, key, n, false)
					if da != db {
						t.Fatalf("step %d: %+v, twin %+v", step, da, db)
					}
					if da.Allowed {
						reqs = append(reqs, open{key, n, clock.Now()})
					}
					continue
				}
				i := rng.IntN(len(reqs))
				r := reqs[i]
				reqs = append(reqs[:i], reqs[i+1:]...)
				actual := rng.Int64N(r.n + 1)
				elapsed := clock.Now().Sub(r.at)
				if err := a.Settle(ctx, r.key, r.n, actual, elapsed); err != nil {
					t.Fatal(err)
				}
				if actual < r.n {
					if err := b.Refund(ctx, r.key, r.n-actual, elapsed); err != nil {
						t.Fatal(err)
					}
				}
				for n := int64(1); n <= C; n++ {
					if da, db := decideAt(t, a, r.key, n, true), decideAt(t, b, r.key, n, true); da != db {
						t.Fatalf("step %d: Peek(%d) after settling %d of %d: %+v, after Refund %+v", step, n, actual, r.n, da, db)
					}
				}
			}
		})
	}
}

// Concurrent AllowN and Settle on one hot key, the clock standing still:
// each goroutine takes an estimate and settles an actual cost from 0 to
// the estimate + 2, and at the end the key holds exactly the actual costs
// of the requests allowed, never more than the capacity plus the charges
// of the requests in flight after the last one allowed.
func TestSettleConcurrentHotKey(t *testing.T) {
	const (
		goroutines = 8
		rounds     = 3000
		over       = 2
	)
	ctx := context.Background()
	for _, p := range settlePolicies() {
		p.Limit *= 100
		if p.Burst > 0 {
			p.Burst *= 100
		}
		t.Run(p.Name, func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_002, 500_000_000))
			m := mustNew(t, p, WithClock(clock))
			var (
				allowed, denied, charged, givenBack, actualSum atomic.Int64
				wg                                             sync.WaitGroup
				start                                          = make(chan struct{})
			)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 9))
					<-start
					for range rounds {
						est := 1 + rng.Int64N(4)
						d, err := m.AllowN(ctx, "hot", est)
						if err != nil {
							t.Error(err)
							return
						}
						if !d.Allowed {
							denied.Add(1)
							if d.Remaining < 0 || d.RetryAfter <= 0 {
								t.Errorf("denied %+v", d)
							}
							continue
						}
						allowed.Add(1)
						actual := rng.Int64N(est + over + 1)
						if err := m.Settle(ctx, "hot", est, actual, 0); err != nil {
							t.Error(err)
							return
						}
						actualSum.Add(actual)
						if actual > est {
							charged.Add(actual - est)
						} else {
							givenBack.Add(est - actual)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			held := heldUnits(t, m, "hot")
			t.Logf("%s: %d allowed, %d denied, %d units charged after, %d given back; the key holds %d = the sum of actual costs %d (capacity %d)",
				p.Name, allowed.Load(), denied.Load(), charged.Load(), givenBack.Load(), held, actualSum.Load(), p.Capacity())
			if want := actualSum.Load(); held != want {
				t.Fatalf("the key holds %d units, the allowed requests cost %d", held, want)
			}
			if held > p.Capacity()+goroutines*over {
				t.Fatalf("the key holds %d units, above capacity %d + %d in flight", held, p.Capacity(), goroutines*over)
			}
			if denied.Load() == 0 {
				t.Fatal("nothing was denied: the test never filled the key")
			}
		})
	}
}

// Layered settles in every layer, and Tiered in the key's plan.
func TestLayeredAndTieredSettle(t *testing.T) {
	ctx := context.Background()
	clock := NewManualClock(time.Unix(1_800_000_002, 500_000_000))
	a := mustNew(t, Policy{Algorithm: TokenBucket, Limit: 10, Window: 10 * time.Second}, WithClock(clock))
	b := mustNew(t, Policy{Algorithm: FixedWindow, Limit: 20, Window: time.Minute}, WithClock(clock))
	l, err := NewLayered(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := As[Settler](l); !ok {
		t.Fatal("a Layered is not a Settler")
	}
	if d, _ := l.AllowN(ctx, "k", 5); !d.Allowed {
		t.Fatal(d)
	}
	if err := l.Settle(ctx, "k", 5, 12, 0); err != nil {
		t.Fatal(err)
	}
	if ua, ub := heldUnits(t, a, "k"), heldUnits(t, b, "k"); ua != 12 || ub != 12 {
		t.Fatalf("layers hold %d and %d, want 12 each", ua, ub)
	}
	d, _ := l.Peek(ctx, "k", 1)
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 3*time.Second || d.Policy != a.Policy() {
		t.Fatalf("in debt in the bucket: %+v, want denied for 3s by it", d)
	}
	if err := l.SettleKeys(ctx, []string{"k", "k"}, 12, 2, 0); err != nil {
		t.Fatal(err)
	}
	if ua, ub := heldUnits(t, a, "k"), heldUnits(t, b, "k"); ua != 2 || ub != 2 {
		t.Fatalf("after giving back 10, layers hold %d and %d, want 2 each", ua, ub)
	}
	if err := l.Settle(ctx, "k", 1, -1, 0); !errors.Is(err, ErrInvalidCost) {
		t.Fatalf("negative actual: %v", err)
	}

	tr, err := NewTiered(map[string]Policy{"free": {Algorithm: SlidingLog, Limit: 5, Window: time.Minute}},
		func(context.Context, string) (string, error) { return "free", nil }, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := tr.AllowN(ctx, "u", 5); !d.Allowed {
		t.Fatal(d)
	}
	if err := tr.Settle(ctx, "u", 5, 8, 0); err != nil {
		t.Fatal(err)
	}
	if d, _ := tr.Peek(ctx, "u", 1); d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("tiered in debt: %+v, want denied for a window", d)
	}
	if err := tr.Settle(ctx, "", 5, 8, 0); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("empty key: %v", err)
	}
}

// The wrappers do not pass Settler on yet.
func TestWrappersAreNotSettlers(t *testing.T) {
	m := mustNew(t, Policy{Algorithm: TokenBucket, Limit: 10, Window: time.Second})
	if _, ok := As[Settler](m); !ok {
		t.Fatal("Memory is not a Settler")
	}
	f, err := NewFailover(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := As[Settler](f); ok {
		t.Fatal("Failover claims Settler")
	}
}

// settleModel is FuzzInvariant with settles: after each allowed request
// the caller settles it at once (elapsed 0) at an actual cost from 0 to
// about twice the capacity, or a huge one. After every step it checks that
// the decision equals the reference model's, its debt included (tokens
// down to -Burst, window and log sums up to 2·Limit); that a denial's
// RetryAfter is exact (a Peek 1 µs earlier is denied, one at that time
// allowed); and that the units allowed and charged obey the algorithm's
// bound (at most L in a window for the log at each allowed request, 3·L
// for the windows, whose previous window may hold 2·L, and B + r·Δ for the
// buckets).
//
// Input: bytes 0-3 as for FuzzInvariant, then triples: the clock's move,
// the cost, the actual cost.
func settleModel(t *testing.T, data []byte) {
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
	ctx := context.Background()
	clock := NewManualClock(time.Unix(1_700_000_040, 0))
	m, err := New(p, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ref := newReference(p, clock.Now().UnixNano()/1000)
	C := p.Capacity()
	var events []event // allowed and charged
	for i := 0; i+2 < len(data); i += 3 {
		clock.Advance(time.Duration(data[i])*p.Window/128 + time.Duration(data[i]%3)*time.Microsecond + time.Duration(data[i+1]%7))
		n := 1 + int64(data[i+1])%C
		now := clock.Now().UnixNano() / 1000
		d, err := m.AllowN(ctx, "k", n)
		if err != nil {
			t.Fatal(err)
		}
		if want := ref.allow(now, n); d.Allowed != want {
			t.Fatalf("step %d (%v, n=%d at +%v): allowed=%v, reference says %v", i/3, p, n, time.Duration(now-ref.start)*time.Microsecond, d.Allowed, want)
		}
		if d.Remaining < 0 {
			t.Fatalf("step %d: %+v", i/3, d)
		}
		if !d.Allowed {
			at := clock.Now()
			clock.Set(at.Add(d.RetryAfter - time.Microsecond))
			before := decideAt(t, m, "k", n, true)
			clock.Set(at.Add(d.RetryAfter))
			then := decideAt(t, m, "k", n, true)
			clock.Set(at)
			if before.Allowed || !then.Allowed {
				t.Fatalf("step %d (%v, n=%d at +%v): denied %+v; 1µs before its RetryAfter %+v, at it %+v",
					i/3, p, n, time.Duration(now-ref.start)*time.Microsecond, d, before, then)
			}
			continue
		}
		events = append(events, event{now, n})
		checkSettleBound(t, p, events)
		actual := int64(data[i+2]) % (2*C + 2)
		if data[i+2] == 255 {
			actual = 1 << 50
		}
		if err := m.Settle(ctx, "k", n, actual, 0); err != nil {
			t.Fatal(err)
		}
		events[len(events)-1].n = min(n, actual)
		if k := ref.settle(now, n, actual); k > 0 {
			events = append(events, event{now, k})
		}
	}
}

// settle settles the request of est units the reference just allowed at
// now at its actual cost, and returns the units it charged.
func (r *reference) settle(now, est, actual int64) (charged int64) {
	p := r.p
	W, L := int64(p.Window/time.Microsecond), p.Limit
	if actual <= est {
		if p.Algorithm.Burstable() {
			r.tokens.Add(r.tokens, rat(est-actual, 1))
		} else {
			r.log[len(r.log)-1].n = actual
		}
		return 0
	}
	k := actual - est
	if p.Algorithm.Burstable() {
		floor := rat(-p.Capacity(), 1)
		if r.tokens.Cmp(floor) <= 0 {
			return 0
		}
		before := new(big.Rat).Set(r.tokens)
		r.tokens.Sub(r.tokens, rat(k, 1))
		if r.tokens.Cmp(floor) < 0 {
			r.tokens = floor
		}
		// What the charge took, rounded down: the bound then checks
		// no more than was charged.
		took := before.Sub(before, r.tokens)
		return new(big.Int).Quo(took.Num(), took.Denom()).Int64()
	}
	var sum int64
	switch p.Algorithm {
	case FixedWindow, SlidingWindow:
		sum = r.sum(floorDiv(now, W)*W, now)
	case SlidingLog:
		sum = r.sum(now-W+1, now)
	}
	if k = min(k, 2*L-sum); k <= 0 {
		return 0
	}
	r.log = append(r.log, event{now, k})
	return k
}

// checkSettleBound is checkBound with charges among the events: the
// windows' bound is 3·L.
func checkSettleBound(t *testing.T, p Policy, ev []event) {
	t.Helper()
	if p.Algorithm == FixedWindow || p.Algorithm == SlidingWindow {
		last := ev[len(ev)-1]
		W := int64(p.Window / time.Microsecond)
		var in int64
		for _, e := range ev {
			if e.at > last.at-W {
				in += e.n
			}
		}
		if in > 3*p.Limit {
			t.Fatalf("%d units in one window, above 3·%d", in, p.Limit)
		}
		return
	}
	checkBound(t, p, ev)
}

// TestSettleModel runs settleModel on 500 random inputs, every algorithm
// in turn; FuzzSettle explores further.
func TestSettleModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 13))
	for i := range 500 {
		data := make([]byte, 4+3*(20+rng.IntN(150)))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		data[0] = byte(i)
		t.Run(fmt.Sprint(i), func(t *testing.T) { settleModel(t, data) })
		if t.Failed() {
			return
		}
	}
}

func FuzzSettle(f *testing.F) {
	f.Add([]byte{0, 2, 0, 4, 0, 1, 9, 0, 1, 0, 200, 3, 1})
	f.Add([]byte{1, 9, 1, 0, 250, 9, 30, 3, 9, 255, 128, 9, 0})
	f.Add([]byte{2, 4, 2, 0, 10, 2, 7, 10, 2, 2, 100, 4, 1})
	f.Add([]byte{3, 9, 0, 0, 60, 9, 20, 1, 5, 0, 90, 9, 19})
	f.Add([]byte{4, 3, 1, 5, 0, 2, 9, 0, 3, 255, 64, 5, 0})
	f.Fuzz(settleModel)
}

// TestSettleConcurrentHotKey over a Layered limiter of a token bucket and
// a sliding log: each layer ends holding exactly the actual costs of the
// requests allowed, and no more than its capacity plus the charges in
// flight.
func TestSettleConcurrentLayered(t *testing.T) {
	const goroutines, rounds, over = 8, 3000, 2
	ctx := context.Background()
	clock := NewManualClock(time.Unix(1_800_000_002, 500_000_000))
	a := mustNew(t, Policy{Algorithm: TokenBucket, Limit: 600, Window: time.Minute, Burst: 500}, WithClock(clock))
	b := mustNew(t, Policy{Algorithm: SlidingLog, Limit: 800, Window: time.Minute}, WithClock(clock))
	l, err := NewLayered(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied, actualSum atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 17))
			<-start
			for range rounds {
				est := 1 + rng.Int64N(4)
				// Half the requests go to the bucket alone, past the
				// layered lock.
				var d Decision
				var err error
				if rng.IntN(2) == 0 {
					d, err = l.AllowN(ctx, "hot", est)
				} else {
					d, err = a.AllowN(ctx, "other", est)
					if err == nil && d.Allowed {
						err = a.Settle(ctx, "other", est, 0, 0)
					}
					if err != nil {
						t.Error(err)
						return
					}
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					denied.Add(1)
					continue
				}
				allowed.Add(1)
				actual := rng.Int64N(est + over + 1)
				if err := l.Settle(ctx, "hot", est, actual, 0); err != nil {
					t.Error(err)
					return
				}
				actualSum.Add(actual)
			}
		}()
	}
	close(start)
	wg.Wait()
	ua, ub := heldUnits(t, a, "hot"), heldUnits(t, b, "hot")
	t.Logf("%d allowed, %d denied; the bucket holds %d, the log %d, the actual costs %d", allowed.Load(), denied.Load(), ua, ub, actualSum.Load())
	if ua != actualSum.Load() || ub != actualSum.Load() {
		t.Fatalf("the layers hold %d and %d, the allowed requests cost %d", ua, ub, actualSum.Load())
	}
	if ua > 500+goroutines*over {
		t.Fatalf("the bucket holds %d, above its capacity 500 + %d in flight", ua, goroutines*over)
	}
	if u := heldUnits(t, a, "other"); u != 0 {
		t.Fatalf("the bucket's other key holds %d after giving everything back", u)
	}
}

// A key in debt at the bound carries through SetPolicy, to a limit ten
// times lower or higher and a window twice as long: still in debt after
// the lower one, decisions sane after both, and the key repays on the new
// policy's terms.
func TestSettleDebtCarriesThroughSetPolicy(t *testing.T) {
	ctx := context.Background()
	for _, p := range settlePolicies() {
		for _, scale := range []int64{10, -10} {
			t.Run(fmt.Sprintf("%s/%d", p.Name, scale), func(t *testing.T) {
				p.Limit *= 100
				if p.Burst > 0 {
					p.Burst *= 100
				}
				clock := NewManualClock(time.Unix(1_800_000_002, 500_000_000))
				m := mustNew(t, p, WithClock(clock))
				mustAllow(t, m, "k", 1)
				if err := m.Settle(ctx, "k", 1, 1<<62, 0); err != nil {
					t.Fatal(err)
				}
				q := p
				if scale > 0 {
					q.Limit *= scale
					q.Burst *= scale
				} else {
					q.Limit /= -scale
					q.Burst /= -scale
				}
				if p.Calendar == 0 {
					q.Window *= 2
				}
				if err := m.SetPolicy(q); err != nil {
					t.Fatal(err)
				}
				d := decideAt(t, m, "k", 1, true)
				if d.Remaining < 0 || d.Allowed != (d.RetryAfter == 0) || scale < 0 && d.Allowed {
					t.Fatalf("after SetPolicy(%v): %+v", q, d)
				}
				if !d.Allowed {
					clock.Advance(d.RetryAfter)
					mustAllow(t, m, "k", 1)
				}
			})
		}
	}
}
