package core

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks for the memory limiter. Run them with
//
//	go test -run=^$ -bench=. -benchmem -count=10 -cpu=1,2 ./core | tee new.txt
//	benchstat new.txt
//
// Like x/time/rate's BenchmarkAllowN, the cases fix "now" before the timer
// starts (a ManualClock that does not move), so they measure the limiter and
// not the machine's clock; BenchmarkSystemClock adds the clock read that
// production pays (about 25 ns on a VM with kvm-clock, 15 on bare metal).
// Keys are prepared before the timer starts too.

var benchStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// BenchmarkSystemClock is BenchmarkHotKey's token bucket on the system
// clock: the same work plus one monotonic clock read per decision.
func BenchmarkSystemClock(b *testing.B) {
	ctx := context.Background()
	for _, regime := range []string{"flood", "open"} {
		p := hotPolicies(TokenBucket)[regime]
		b.Run(regime+"/serial", func(b *testing.B) {
			m := mustNew(b, p)
			b.ReportAllocs()
			for b.Loop() {
				m.AllowN(ctx, "203.0.113.7", 1)
			}
		})
		b.Run(regime+"/parallel", func(b *testing.B) {
			m := mustNew(b, p)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m.AllowN(ctx, "203.0.113.7", 1)
				}
			})
		})
	}
}

// hotPolicies are the two regimes of a hot key: "flood" is the canonical
// 100/1m, so nearly every request is denied (a client hammering a limited
// route); "open" allows every request, so every decision writes the state.
func hotPolicies(a Algorithm) map[string]Policy {
	return map[string]Policy{
		"flood": {Algorithm: a, Limit: 100, Window: time.Minute},
		"open":  {Algorithm: a, Limit: MaxLimit, Window: time.Millisecond},
	}
}

func mustNew(b testing.TB, p Policy, opts ...Option) *Memory {
	b.Helper()
	m, err := New(p, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkHotKey measures one key, serial and parallel: the cost of the
// algorithm, one shard lock and one probe of the shard's table.
func BenchmarkHotKey(b *testing.B) {
	ctx := context.Background()
	for _, a := range Algorithms() {
		for _, regime := range []string{"flood", "open"} {
			p := hotPolicies(a)[regime]
			b.Run(a.String()+"/"+regime+"/serial", func(b *testing.B) {
				m := mustNew(b, p, WithClock(NewManualClock(benchStart)))
				b.ReportAllocs()
				for b.Loop() {
					m.AllowN(ctx, "203.0.113.7", 1)
				}
			})
			b.Run(a.String()+"/"+regime+"/parallel", func(b *testing.B) {
				m := mustNew(b, p, WithClock(NewManualClock(benchStart)))
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						m.AllowN(ctx, "203.0.113.7", 1)
					}
				})
			})
		}
	}
}

// ipKeys returns n distinct client-IP-like keys.
func ipKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	return keys
}

// BenchmarkManyKeys measures 1e3 and 1e6 distinct keys in parallel at
// 100/1m: 1e3 keys fit in the CPU caches, 1e6 keys do not, so the second
// measures the store's cache misses on every lookup, as a big public API
// sees. The store is filled with every key before the timer starts, and the
// benchmark reports how many keys the store held at the end ("keys"), so the
// fixture is what it claims.
//
// The "table-floor" case is the store's lookup alone: for the same keys in
// the token bucket's store, the two hashes, the shard lock and the probe
// for the key's slot. The distance between it and the token bucket's
// figure is what the state, the algorithm and the Decision cost.
func BenchmarkManyKeys(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1_000, 1_000_000} {
		keys := ipKeys(n)
		filled := func(b *testing.B, a Algorithm) *Memory {
			m := mustNew(b, Policy{Algorithm: a, Limit: 100, Window: time.Minute}, WithClock(NewManualClock(benchStart)))
			for _, k := range keys {
				m.AllowN(ctx, k, 1)
			}
			// Finish collecting the fill's garbage now, so that a GC
			// cycle the fill started is not charged to the lookups.
			runtime.GC()
			return m
		}
		for _, a := range Algorithms() {
			b.Run(a.String()+"/keys="+strconv.Itoa(n), func(b *testing.B) {
				m := filled(b, a)
				var walks atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					w := newKeyWalk(keys, &walks)
					for pb.Next() {
						m.AllowN(ctx, w.next(), 1)
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(m.Stats().Keys), "keys")
			})
		}
		// The token bucket on the system clock and on a CoarseClock: the
		// same walk plus the clock read a production decision pays
		// (system), or a cached one (coarse). At 1e6 keys the system
		// clock's read is ordered after the previous decision's cache
		// misses, so it costs more here than on a hot key.
		for _, c := range []struct {
			name  string
			clock func() Clock
		}{{"system", func() Clock { return SystemClock{} }}, {"coarse", func() Clock { return NewCoarseClock(time.Millisecond) }}} {
			b.Run("token-bucket-"+c.name+"-clock/keys="+strconv.Itoa(n), func(b *testing.B) {
				clock := c.clock()
				if cc, ok := clock.(*CoarseClock); ok {
					defer cc.Stop()
				}
				m := mustNew(b, Policy{Limit: 100, Window: time.Minute}, WithClock(clock))
				for _, k := range keys {
					m.AllowN(ctx, k, 1)
				}
				runtime.GC()
				var walks atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					w := newKeyWalk(keys, &walks)
					for pb.Next() {
						m.AllowN(ctx, w.next(), 1)
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(m.Stats().Keys), "keys")
			})
		}
		b.Run("table-floor/keys="+strconv.Itoa(n), func(b *testing.B) {
			s := filled(b, TokenBucket).eng.(*store[uint64, *gcra])
			var walks, missing atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := newKeyWalk(keys, &walks)
				lost := uint64(0)
				for pb.Next() {
					sh, h, check := s.locate(w.next())
					sh.mu.Lock()
					_, res := sh.find(h&tagHash|tagUsed, check)
					sh.mu.Unlock()
					if res != found {
						lost++
					}
				}
				missing.Add(lost)
			})
			b.StopTimer()
			if lost := missing.Load(); lost > 0 {
				b.Fatalf("%d lookups found no key", lost)
			}
		})
	}
}

// A keyWalk is one parallel goroutine's walk over the prepared keys: in
// order, from an offset of its own (the n-th walk started a third of the
// way further than the one before), wrapping at the end.
//
// The key's bytes are then in cache, as a real request's key is (it was
// just read from the request), and the store's lookups still land anywhere
// in its memory, since keys are placed by a seeded hash. A random walk over
// the key slice would add the fixture's own two cache misses (the string
// header and its bytes) to every operation and measure the benchmark, not
// the store.
type keyWalk struct {
	keys []string
	i    int
}

func newKeyWalk(keys []string, walks *atomic.Uint64) keyWalk {
	return keyWalk{keys: keys, i: int(walks.Add(1) * uint64(len(keys)) / 3 % uint64(len(keys)))}
}

func (w *keyWalk) next() string {
	if w.i++; w.i == len(w.keys) {
		w.i = 0
	}
	return w.keys[w.i]
}

// BenchmarkNewKeys measures a flood of keys the store has not seen (a scan,
// or a botnet's addresses) through a full store of 65,536 keys, at a limit no key reaches:
// each such request inserts its key and evicts another. One request in 8
// comes from one of 1,000 keys in steady use, which the evictions pass over
// (their reference bits are set), so the figure includes the second chances
// an insertion gives. The keys cycle through 1,048,576 prepared ones, each
// long evicted when it comes round again. It reports the steady keys whose
// state counts every request they made ("steady-kept", 1000 when none was
// ever evicted).
func BenchmarkNewKeys(b *testing.B) {
	ctx := context.Background()
	flood := ipKeys(1 << 20)
	steady := make([]string, 1000)
	for i := range steady {
		steady[i] = "steady-" + strconv.Itoa(i)
	}
	p := Policy{Limit: 1e9, Window: time.Minute}
	m := mustNew(b, p, WithClock(NewManualClock(benchStart)), WithMaxKeys(1<<16))
	for i := range 1 << 16 {
		m.AllowN(ctx, flood[len(flood)-1-i], 1) // full before timing
	}
	runtime.GC()
	b.ReportAllocs()
	made := make([]int64, len(steady)) // requests per steady key
	i, j := 0, 0
	for b.Loop() {
		if i%8 == 0 {
			m.AllowN(ctx, steady[j], 1)
			made[j]++
			if j++; j == len(steady) {
				j = 0
			}
		} else {
			m.AllowN(ctx, flood[i&(len(flood)-1)], 1)
		}
		i++
	}
	b.StopTimer()
	kept := 0
	for j, k := range steady {
		if d, _ := m.Peek(ctx, k, 1); made[j] > 0 && d.Remaining == p.Limit-made[j] {
			kept++
		}
	}
	b.ReportMetric(float64(kept), "steady-kept")
}

// BenchmarkMemoryPerKey reports the heap bytes the store holds per key with
// 1e6 keys in it, everything included (the slots, half of them empty at 1e6
// keys, and the sliding log's states and entries out of line). Keys are
// stored as a 128-bit hash, so the figure does not depend on key length.
// Run it with -benchtime=1x: each iteration builds the whole store.
func BenchmarkMemoryPerKey(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	for _, a := range Algorithms() {
		b.Run(a.String(), func(b *testing.B) {
			for b.Loop() {
				perKey := bytesPerKey(b, Policy{Algorithm: a, Limit: 100, Window: time.Minute}, n, func(m *Memory, k string) { m.AllowN(ctx, k, 1) })
				b.ReportMetric(perKey, "B/key")
			}
		})
	}
}

// bytesPerKey fills a fresh store with n keys and returns the heap growth
// per key. The key strings are built one at a time and dropped, as request
// keys are.
func bytesPerKey(tb testing.TB, p Policy, n int, add func(*Memory, string)) float64 {
	before := heapInUse()
	m, err := New(p, WithMaxKeys(n+n/4), WithClock(NewManualClock(benchStart)))
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		add(m, "10."+strconv.Itoa(i>>16&255)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255))
	}
	after := heapInUse()
	if k := m.Stats().Keys; k != n {
		tb.Fatalf("store holds %d keys, want %d", k, n)
	}
	runtime.KeepAlive(m)
	return float64(after-before) / float64(n)
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkSlidingLogLength measures one key's sliding log at 100 and at
// 100,000 entries, at 100,000 per hour: a decision's work must not grow
// with the log beyond O(log k). The log is filled with one-unit requests
// spaced W/k apart, so that the clock stepping by W/k lets exactly one
// entry leave before each allowed request and the log stays at k entries.
//
//   - denied-cost-L: a request of cost L, denied, which has to find when
//     enough units leave (RetryAfter);
//   - allowed: one unit allowed as one entry leaves;
//   - refund: one unit allowed and given back at once (a request that
//     count-only-failures does not count), then allowed again so that the
//     log stays at k entries: two allowed requests and a refund;
//   - refund-middle: one unit allowed, and one counted half a window ago
//     given back, which empties an entry in the middle of the log.
func BenchmarkSlidingLogLength(b *testing.B) {
	ctx := context.Background()
	const limit = 100_000
	p := Policy{Algorithm: SlidingLog, Limit: limit, Window: time.Hour}
	for _, k := range []int{100, 100_000} {
		step := p.Window / time.Duration(k)
		filled := func(b *testing.B) (*Memory, *ManualClock) {
			clock := NewManualClock(benchStart)
			m := mustNew(b, p, WithClock(clock))
			for i := range k {
				if i > 0 {
					clock.Advance(step)
				}
				if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
					b.Fatalf("fill: request %d denied", i)
				}
			}
			runtime.GC()
			return m, clock
		}
		name := "entries=" + strconv.Itoa(k) + "/"
		b.Run(name+"denied-cost-L", func(b *testing.B) {
			m, _ := filled(b)
			b.ReportAllocs()
			for b.Loop() {
				if d, _ := m.AllowN(ctx, "k", limit); d.Allowed {
					b.Fatal("a request of cost L allowed")
				}
			}
		})
		b.Run(name+"allowed", func(b *testing.B) {
			m, clock := filled(b)
			b.ReportAllocs()
			for b.Loop() {
				clock.Advance(step)
				if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
		b.Run(name+"refund", func(b *testing.B) {
			m, clock := filled(b)
			b.ReportAllocs()
			for b.Loop() {
				clock.Advance(step)
				if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
					b.Fatal("denied")
				}
				m.Refund(ctx, "k", 1, 0)
				if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
		b.Run(name+"refund-middle", func(b *testing.B) {
			m, clock := filled(b)
			b.ReportAllocs()
			for b.Loop() {
				clock.Advance(step)
				if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed {
					b.Fatal("denied")
				}
				m.Refund(ctx, "k", 1, p.Window/2)
			}
		})
	}
}
