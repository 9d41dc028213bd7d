package benchmarks

import (
	"context"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// In-memory comparison, every library through its adapter (adapters_test.go)
// at 100 per minute, burst 100, on the system clock. Run with
//
//	go test -run=^$ -bench='HotKey|ManyKeys' -benchmem -count=10 -cpu=1,2 .
//	go test -run=^$ -bench=BytesPerKey -benchtime=1x -count=3 .
//
// What each case measures:
//
//   - HotKey: one key, serial (the latency of one decision) and parallel
//     (RunParallel, GOMAXPROCS goroutines: contention on one key), in two
//     regimes. "flooded": hammered past its limit of 100 per minute, so
//     nearly every request is denied (a client flooding a route).
//     "allowed": at 1e9 per minute every request is allowed, so every
//     decision writes the key's state. The algorithm, the key lookup and
//     the locking, all in cache.
//   - ManyKeys: 1e6 distinct keys, all inserted before the timer starts,
//     parallel. The keys do not fit in the CPU caches, so this is the
//     store's lookup with a cache miss or more, as a big public API sees.
//     "in-order": each goroutine walks the prepared key slice sequentially
//     from its own offset, so the key string itself is in cache (as it is
//     in a real request, just parsed) and the miss measured is the store's.
//     "strided": each goroutine steps through the slice 7,919 keys at a
//     time (every key once per 1e6 steps), so the key's string header and
//     bytes are cache misses too, before the store's. The walks soon use
//     up every key's 100 per minute, so most decisions deny, for every
//     library alike. The "keys" metric is how many keys the library holds
//     at the end, where it can tell (ratekit, x/time/rate);
//     TestManyKeysFixture checks the fixture is 1e6 distinct keys and that
//     both walks reach every one of them.
//   - BytesPerKey: HeapInuse after GC, before and after inserting 1e6 keys
//     (each key string built, used once and dropped), divided by the keys
//     held (1e6 where the library cannot tell): what a library holds per
//     key, its copy of the key included. "scan-B/key" is the growth of the
//     heap the garbage collector scans (runtime/metrics
//     /gc/scan/heap:bytes) per key: the work each GC cycle does for the
//     library's store.

// comparedPeers are the libraries of the HotKey and ManyKeys cases:
// memoryPeers, with ratekit's token bucket on a CoarseClock after ratekit's
// own.
func comparedPeers() []peer {
	ps := memoryPeers()
	return append(ps[:1:1], append([]peer{ratekitCoarsePeer()}, ps[1:]...)...)
}

// ratekitCoarsePeer is ratekit's token bucket on core.NewCoarseClock with a
// resolution of 1 ms (the opt-in cached time; the other peers read the
// system clock on every decision, or time.Now at least).
func ratekitCoarsePeer() peer {
	return peer{name: "ratekit-token-bucket-coarse-clock", new: func(tb testing.TB, p policy) limiter {
		clock := core.NewCoarseClock(time.Millisecond)
		m, err := core.New(core.Policy{Limit: int64(p.limit), Window: p.window, Burst: int64(p.burst)}, core.WithClock(clock))
		if err != nil {
			tb.Fatal(err)
		}
		ctx := context.Background()
		return limiter{
			allow: func(key string) bool {
				d, err := m.AllowN(ctx, key, 1)
				return err == nil && d.Allowed
			},
			keys:  func() int { return m.Stats().Keys },
			close: clock.Stop,
		}
	}}
}

// hotKey is the key of the hot-key cases.
const hotKey = "203.0.113.7"

// manyKeys is the number of distinct keys of the ManyKeys and BytesPerKey cases.
const manyKeys = 1_000_000

// fixtureKey returns the i-th key of the many-keys fixture: a client IP,
// 10.x.y.z, distinct for i < 1<<24.
func fixtureKey(i int) string {
	return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
}

var (
	fixtureOnce sync.Once
	fixture     []string
)

// fixtureKeys returns the 1e6 keys, built once per process in order, so
// that consecutive keys are near each other in memory.
func fixtureKeys() []string {
	fixtureOnce.Do(func() {
		fixture = make([]string, manyKeys)
		for i := range fixture {
			fixture[i] = fixtureKey(i)
		}
	})
	return fixture
}

// TestManyKeysFixture checks that the many-keys fixture is what it claims:
// 1e6 distinct keys, and that the walk of BenchmarkManyKeys reaches all of
// them.
func TestManyKeysFixture(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 1e6 keys")
	}
	keys := fixtureKeys()
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		seen[k] = struct{}{}
	}
	if len(seen) != manyKeys {
		t.Fatalf("fixture has %d distinct keys, want %d", len(seen), manyKeys)
	}
	// Two walkers from their offsets, manyKeys steps in all, touch every key.
	touched := make([]bool, manyKeys)
	var next atomic.Uint64
	for range 2 {
		i := walkStart(&next)
		for range manyKeys / 2 {
			touched[i] = true
			i = walkNext(i)
		}
	}
	missed := 0
	for _, ok := range touched {
		if !ok {
			missed++
		}
	}
	if missed != 0 {
		t.Errorf("two walkers of %d steps missed %d keys", manyKeys/2, missed)
	}
	// The same for the strided walk.
	clear(touched)
	next.Store(0)
	for range 2 {
		w := newStrided(&next)
		for range manyKeys / 2 {
			touched[w.i] = true
			w.next()
		}
	}
	missed = 0
	for _, ok := range touched {
		if !ok {
			missed++
		}
	}
	if missed != 0 {
		t.Errorf("two strided walkers of %d steps missed %d keys", manyKeys/2, missed)
	}
}

// stride is the strided walk's step: coprime with manyKeys (a prime that
// divides neither 2 nor 5), so the walk reaches every key once per
// manyKeys steps, and 7,919 string headers (127 KB) apart, so that
// consecutive keys share no cache line or page.
const stride = 7919

// A strided is one goroutine's strided walk: key i = k·stride mod manyKeys
// at its k-th step, goroutine g starting at step g·manyKeys/2, so the first
// two split the cycle in halves.
type strided struct{ k, i int }

func newStrided(next *atomic.Uint64) strided {
	g := int(next.Add(1) - 1)
	k := (g*manyKeys/2 + (g/2)*manyKeys/4) % manyKeys
	return strided{k: k, i: k * stride % manyKeys}
}

func (w *strided) next() {
	if w.k++; w.k == manyKeys {
		w.k = 0
	}
	if w.i += stride; w.i >= manyKeys {
		w.i -= manyKeys
	}
}

// walkStart returns a goroutine's first index: goroutine g starts at
// g*manyKeys/2 (mod manyKeys), so the first two walkers split the keys in
// halves and further ones start in between.
func walkStart(next *atomic.Uint64) int {
	g := next.Add(1) - 1
	return int((g*manyKeys/2 + (g/2)*manyKeys/4) % manyKeys)
}

// walkNext is the next index of a sequential walk.
func walkNext(i int) int {
	i++
	if i == manyKeys {
		i = 0
	}
	return i
}

// allowAll is the policy of the "allowed" hot key: no request reaches it.
var allowAll = policy{limit: 1e9, window: time.Minute, burst: 1e9}

// BenchmarkHotKey compares one key, flooded past its limit and allowed,
// serially and in parallel, across every library.
func BenchmarkHotKey(b *testing.B) {
	for _, p := range comparedPeers() {
		for _, regime := range []struct {
			name string
			p    policy
		}{{"flooded", canonical}, {"allowed", allowAll}} {
			b.Run(p.name+"/"+regime.name+"-serial", func(b *testing.B) {
				l := p.new(b, regime.p)
				l.closeWith(b)
				b.ReportAllocs()
				for b.Loop() {
					l.allow(hotKey)
				}
			})
			b.Run(p.name+"/"+regime.name+"-parallel", func(b *testing.B) {
				l := p.new(b, regime.p)
				l.closeWith(b)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						l.allow(hotKey)
					}
				})
			})
		}
	}
}

// BenchmarkManyKeys compares 1e6 distinct keys in parallel across every
// library. The store is filled with every key once, before the first
// timed run, and kept across the runs of one sub-benchmark.
func BenchmarkManyKeys(b *testing.B) {
	keys := fixtureKeys()
	for _, p := range comparedPeers() {
		var l limiter
		filled := false
		for _, walk := range []string{"in-order", "strided"} {
			b.Run(p.name+"/"+walk, func(b *testing.B) {
				if !filled {
					l = p.new(b, canonical)
					for _, k := range keys {
						l.allow(k)
					}
					filled = true
				}
				var next atomic.Uint64
				// Finish collecting the fill's garbage first, for every
				// library alike: a GC cycle the fill started, running
				// beside the lookups, made runs of the same library
				// differ by half.
				runtime.GC()
				b.ReportAllocs()
				b.ResetTimer()
				if walk == "in-order" {
					b.RunParallel(func(pb *testing.PB) {
						i := walkStart(&next)
						for pb.Next() {
							l.allow(keys[i])
							i = walkNext(i)
						}
					})
				} else {
					b.RunParallel(func(pb *testing.PB) {
						w := newStrided(&next)
						for pb.Next() {
							l.allow(keys[w.i])
							w.next()
						}
					})
				}
				b.StopTimer()
				if l.keys != nil {
					b.ReportMetric(float64(l.keys()), "keys")
				}
			})
		}
		if l.close != nil {
			l.close()
		}
		l = limiter{} // let the store go before the next library's
	}
}

// BenchmarkBytesPerKey reports the heap each library holds per key with
// 1e6 keys in it. Run it with -benchtime=1x: each iteration builds the
// whole store.
func BenchmarkBytesPerKey(b *testing.B) {
	for _, p := range memoryPeers() {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				before, scanBefore := heapInuse()
				l := p.new(b, canonical)
				b.StartTimer()
				for i := range manyKeys {
					l.allow(fixtureKey(i))
				}
				b.StopTimer()
				after, scanAfter := heapInuse()
				held := manyKeys
				if l.keys != nil {
					held = l.keys()
					b.ReportMetric(float64(held), "keys")
				}
				runtime.KeepAlive(l)
				if l.close != nil {
					l.close()
				}
				b.ReportMetric(float64(int64(after)-int64(before))/float64(held), "B/key")
				b.ReportMetric(float64(int64(scanAfter)-int64(scanBefore))/float64(held), "scan-B/key")
				b.StartTimer()
			}
		})
	}
}

// heapInuse returns HeapInuse after two GCs (the second one sweeps what
// the first freed), and the scannable heap the last of them found
// (runtime/metrics /gc/scan/heap:bytes).
func heapInuse() (inuse, scan uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	sample := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		scan = sample[0].Value.Uint64()
	}
	return ms.HeapInuse, scan
}
