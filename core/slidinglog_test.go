package core

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// logOf returns the log that m, a sliding-log limiter, holds for key, or
// nil.
func logOf(t *testing.T, m *Memory, key string) *logState {
	t.Helper()
	s, ok := m.eng.(*store[logRef, *slidingLog])
	if !ok {
		t.Fatalf("%T is not a sliding log's store", m.eng)
	}
	sh, h, check := s.locate(key)
	i, res := sh.find(h&tagHash|tagUsed, check)
	if res != found {
		return nil
	}
	return s.alg.logs.at(sh.slots[i].state)
}

// logBytes returns the bytes of the log's backing array, counted from its
// capacity: what the log holds on the heap, whatever the allocator's
// timing.
func logBytes(s *logState) int {
	return cap(s.slots) * int(unsafe.Sizeof(logSlot{}))
}

// logEntries returns the entries of the log that hold units.
func logEntries(s *logState) int {
	n := 0
	for k := range s.n() {
		if s.value(s.slot(k)) != 0 {
			n++
		}
	}
	return n
}

// countWork runs f with the log's work counter on and returns the steps it
// counted.
func countWork(f func()) int64 {
	var n int64
	logWork = &n
	defer func() { logWork = nil }()
	f()
	return n
}

// slidingLogAt returns a sliding log of limit L per hour on a manual clock
// holding k one-unit entries spaced W/k apart, the last one now: the clock
// stepping by W/k lets exactly one entry leave.
func slidingLogAt(t *testing.T, limit int64, k int) (*Memory, *ManualClock, time.Duration) {
	t.Helper()
	p := Policy{Algorithm: SlidingLog, Limit: limit, Window: time.Hour}
	clock := NewManualClock(time.Unix(1_800_000_000, 0))
	m, err := New(p, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	step := p.Window / time.Duration(k)
	for i := range k {
		if i > 0 {
			clock.Advance(step)
		}
		if d, _ := m.AllowN(context.Background(), "k", 1); !d.Allowed {
			t.Fatalf("fill: request %d denied: %+v", i, d)
		}
	}
	return m, clock, step
}

// A sliding log's decisions cost O(log k) for k entries, plus what they
// drop: at 100,000 entries a denied request of cost L (which must find when
// enough units leave), an allowed one (as one entry leaves), a request
// given back at once (and allowed again, so that the log keeps its
// length), and one given back from the middle of the log, each
// count at most a few times the steps they count at 100 entries, on
// average and at worst. Steps are counted, not timed (see logWork).
func TestSlidingLogWorkDoesNotGrowWithTheLog(t *testing.T) {
	ctx := context.Background()
	const limit = 100_000
	type cost struct{ mean, worst int64 }
	measure := func(k int) map[string]cost {
		m, clock, step := slidingLogAt(t, limit, k)
		const rounds = 200
		got := map[string]cost{}
		run := func(name string, op func()) {
			var c cost
			for range rounds {
				w := countWork(op)
				c.mean += w
				c.worst = max(c.worst, w)
			}
			c.mean /= rounds
			got[name] = c
		}
		run("denied cost L", func() {
			if d, _ := m.AllowN(ctx, "k", limit); d.Allowed {
				t.Fatal("a request of cost L allowed")
			}
		})
		run("allowed", func() {
			clock.Advance(step)
			if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
				t.Fatalf("denied: %+v", d)
			}
		})
		run("refund at once", func() {
			clock.Advance(step)
			if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
				t.Fatalf("denied: %+v", d)
			}
			m.Refund(ctx, "k", 1, 0)
			if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
				t.Fatalf("denied after a refund: %+v", d)
			}
		})
		run("refund from the middle", func() {
			clock.Advance(step)
			if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
				t.Fatalf("denied: %+v", d)
			}
			m.Refund(ctx, "k", 1, 30*time.Minute)
		})
		return got
	}
	small, large := measure(100), measure(100_000)
	for name, s := range small {
		l := large[name]
		t.Logf("%s: %d steps on average, %d at worst at 100 entries; %d and %d at 100,000", name, s.mean, s.worst, l.mean, l.worst)
		if l.mean > 4*max(s.mean, 1) || l.worst > 4*max(s.worst, 1) {
			t.Errorf("%s: %d steps on average, %d at worst at 100,000 entries, against %d and %d at 100: want at most 4 times", name, l.mean, l.worst, s.mean, s.worst)
		}
	}
}

// A sliding log's memory is what the docs say: 12 bytes an entry for a key
// at its limit, filled one request at a time and kept there, and never
// more than 16·L bytes, however refunds empty entries in the middle of the
// log; after a burst has left, the log shrinks with its next request.
// Bytes are counted from the ring's capacity.
func TestSlidingLogMemoryPerEntry(t *testing.T) {
	ctx := context.Background()
	const limit = 100_000
	m, clock, step := slidingLogAt(t, limit, limit)
	perEntry := func(what string, want float64) {
		t.Helper()
		s := logOf(t, m, "k")
		if got := float64(logBytes(s)) / float64(logEntries(s)); got > want {
			t.Errorf("%s: %d bytes for %d entries, %.1f an entry, want at most %v", what, logBytes(s), logEntries(s), got, want)
		}
	}
	bound := func(what string, i int) {
		t.Helper()
		if b := logBytes(logOf(t, m, "k")); b > 16*limit {
			t.Fatalf("%s, step %d: %d bytes, above 16·L = %d", what, i, b, 16*limit)
		}
	}
	perEntry("filled to the limit", 12)
	for i := range limit {
		clock.Advance(step)
		if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
			t.Fatalf("at the limit, request %d denied: %+v", i, d)
		}
		bound("at the limit", i)
	}
	perEntry("at the limit for a window", 12)
	// Every allowed request followed by the refund of one counted half
	// a window ago: holes in the middle of the log.
	for i := range 2 * limit {
		clock.Advance(step)
		m.AllowN(ctx, "k", 1)
		m.Refund(ctx, "k", 1, 30*time.Minute)
		bound("with refunds from the middle", i)
	}
	// Refunds that leave holes, each followed by a request a microsecond
	// later, which fills the ring until it is compacted.
	for i := range 2 * limit {
		clock.Advance(time.Microsecond)
		m.Refund(ctx, "k", 1, time.Duration(i%50)*time.Minute/50)
		m.AllowN(ctx, "k", 1)
		bound("refilled after refunds", i)
	}

	// A burst of L requests, 1 µs apart: all but 10 leave, and the next
	// request shrinks the ring to at most four times its entries.
	b, clock, _ := slidingLogAt(t, limit, 1)
	for range limit - 1 {
		clock.Advance(time.Microsecond)
		b.AllowN(ctx, "k", 1)
	}
	clock.Advance(time.Hour - 10*time.Microsecond)
	if d, _ := b.AllowN(ctx, "k", 1); !d.Allowed {
		t.Fatalf("after the burst: %+v", d)
	}
	if s := logOf(t, b, "k"); logEntries(s) != 11 || logBytes(s) > 4*11*12 {
		t.Errorf("after the burst left: %d bytes for %d entries, want 11 entries in at most %d bytes", logBytes(s), logEntries(s), 4*11*12)
	}
}

// naiveLog is the sliding log written plainly, as a slice of entries: what
// slidingLog must decide, field for field.
type naiveLog struct {
	limit, window int64
	e             []event
}

func (g *naiveLog) live(now int64) (first int, units int64) {
	for first < len(g.e) && g.e[first].at <= now-g.window {
		first++
	}
	for _, e := range g.e[first:] {
		units += e.n
	}
	return first, units
}

func (g *naiveLog) decide(now, n int64, commit bool) verdict {
	first, units := g.live(now)
	if units+n > g.limit {
		freed := int64(0)
		for _, e := range g.e[first:] {
			if freed += e.n; units-freed+n <= g.limit {
				return deny(g.limit-units, e.at+g.window-now, g.e[len(g.e)-1].at+g.window-now)
			}
		}
		panic("no entry makes room")
	}
	if !commit {
		// A Peek: the log as it is.
		_, until := g.holds(now)
		return verdict{remaining: g.limit - units, resetAfter: until}
	}
	at := now
	if len(g.e) > 0 {
		at = max(at, g.e[len(g.e)-1].at)
	}
	g.e = g.e[first:]
	if k := len(g.e); k > 0 && g.e[k-1].at == at {
		g.e[k-1].n += n
	} else {
		g.e = append(g.e, event{at, n})
	}
	return verdict{remaining: g.limit - units - n, resetAfter: at + g.window - now}
}

func (g *naiveLog) refund(now, since, n int64) {
	if len(g.e) == 0 || since <= now-g.window {
		return
	}
	first, _ := g.live(now)
	g.e = g.e[first:]
	var kept []event
	for _, e := range g.e {
		if e.at >= since && n > 0 {
			t := min(e.n, n)
			e.n -= t
			n -= t
		}
		if e.n > 0 {
			kept = append(kept, e)
		}
	}
	g.e = kept
}

func (g *naiveLog) holds(now int64) (units, until int64) {
	if len(g.e) == 0 || g.e[len(g.e)-1].at <= now-g.window {
		return 0, 0
	}
	_, units = g.live(now)
	return units, g.e[len(g.e)-1].at + g.window - now
}

// checkLog checks a log's structure: the tree sums each slot's units, the
// slots outside the entries hold none, the units are counted right, times
// are in order, the newest entry holds units, and the ring is within its
// bounds.
func checkLog(t *testing.T, s *logState, limit int64) {
	t.Helper()
	if s == nil {
		return
	}
	c := cap(s.slots)
	units := make([]int64, c)
	for i := range c {
		units[i] = s.value(i)
	}
	var sum int64
	for k := range s.n() {
		i := s.slot(k)
		sum += units[i]
		units[i] = -1
		if k > 0 && s.time(s.slot(k-1)) > s.time(i) {
			t.Fatalf("entry %d at %d before entry %d at %d", k, s.time(i), k-1, s.time(s.slot(k-1)))
		}
	}
	for i, u := range units {
		if u > 0 {
			t.Fatalf("slot %d outside the entries holds %d units", i, u)
		}
	}
	if sum != int64(s.sum) || s.prefix(c) != sum {
		t.Fatalf("log %+v: %d units counted, tree total %d", *s, sum, s.prefix(c))
	}
	if n := s.n(); n > 0 && s.value(s.slot(n-1)) == 0 {
		t.Fatalf("the newest entry holds no units")
	}
	if c < 1 || int64(c) > max(minRing, ceilDiv(4*limit, 3)) {
		t.Fatalf("%d entries in a ring of %d, limit %d", s.n(), c, limit)
	}
}

// The ring and its tree decide exactly as the plain log, field for field,
// through random requests, refunds, clock steps back and long silences,
// at limits from 1 to 5,000, so that the ring wraps, grows, shrinks and is
// compacted.
func TestSlidingLogMatchesNaive(t *testing.T) {
	for seed := range uint64(24) {
		rng := rand.New(rand.NewPCG(seed, 3))
		limit := []int64{1, 3, 40, 700, 5000}[seed%5]
		const window = 1_000_000 // µs
		l := &slidingLog{limit: limit, window: window, logs: newLogArena(1)}
		g := &naiveLog{limit: limit, window: window}
		var r logRef
		now := int64(1_800_000_000_000_000)
		// How far the clock moves: in small steps, so that many
		// entries share the window, or large ones.
		spacing := []int64{1, window / (4 * limit), window / 8}[seed%3] + 1
		t.Run(strconv.Itoa(int(seed)), func(t *testing.T) {
			for op := range 20_000 {
				switch x := rng.IntN(100); {
				case x < 1:
					now += 2 * window
				case x < 2:
					now -= window / 3
				default:
					now += rng.Int64N(2 * spacing)
				}
				n := 1 + rng.Int64N(min(limit, 3))
				if rng.IntN(20) == 0 {
					n = 1 + rng.Int64N(limit)
				}
				what := "AllowN"
				switch x := rng.IntN(10); {
				case x < 6:
					want := g.decide(now, n, true)
					var got verdict
					got, r = l.decide(r, now, n, true)
					if got != want {
						t.Fatalf("op %d: AllowN(%d) = %+v, want %+v", op, n, got, want)
					}
				case x < 8:
					what = "Refund"
					since := now - rng.Int64N(window+window/4)
					g.refund(now, since, n)
					r = l.refund(r, now, since, n)
				default:
					what = "Peek"
					want := g.decide(now, n, false)
					got, _ := l.decide(r, now, n, false)
					if got != want {
						t.Fatalf("op %d: Peek(%d) = %+v, want %+v", op, n, got, want)
					}
				}
				gu, guntil := g.holds(now)
				lu, luntil := l.holds(r, now)
				if gu != lu || guntil != luntil || l.fresh(r, now) != (gu == 0) {
					t.Fatalf("op %d (%s): holds %d, %d, fresh %v; want %d, %d", op, what, lu, luntil, l.fresh(r, now), gu, guntil)
				}
				if limit <= 40 || op%64 == 0 {
					checkLog(t, l.logs.at(r), limit)
				}
			}
		})
	}
}
