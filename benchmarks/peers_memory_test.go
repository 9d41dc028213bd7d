package benchmarks

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// In-memory comparison, every library through its adapter (adapters_test.go)
// at 100 per minute, burst 100, on the system clock. Run with
//
//	go test -run=^$ -bench='HotKey|ManyKeys' -benchmem -count=10 -cpu=1,2 .
//	go test -run=^$ -bench=BytesPerKey -benchtime=1x -count=3 .
//
// What each case measures:
//
//   - HotKey: one key hammered past its limit, so nearly every request is
//     denied (a client flooding a route): the algorithm, the key lookup and
//     the locking, all in cache. Serial is the latency of one decision;
//     parallel (RunParallel, GOMAXPROCS goroutines) adds contention on one
//     key.
//   - ManyKeys: 1e6 distinct keys, all inserted before the timer starts,
//     parallel. The keys do not fit in the CPU caches, so this is the
//     store's lookup with a cache miss or more, as a big public API sees.
//     Each goroutine walks the prepared key slice sequentially from its own
//     offset, so the key string itself is in cache (as it is in a real
//     request, just parsed) and the miss measured is the store's. The
//     "keys" metric is how many keys the library holds at the end, where it
//     can tell (ratekit, x/time/rate); TestManyKeysFixture checks the
//     fixture is 1e6 distinct keys. ratekit holds fewer: on every insert
//     it drops up to two least recently used keys that have become fresh
//     (a full bucket: 600 ms after one request at 100/min), as they decide
//     as a new key would; filling 1e6 keys takes longer than that, so it
//     holds the recent ones and the timed loop mixes lookups with
//     re-inserts. That is its real cost on this traffic, reported as is.
//   - BytesPerKey: HeapInuse after GC, before and after inserting 1e6 keys
//     (each key string built, used once and dropped), divided by the keys
//     held (1e6 where the library cannot tell; ratekit reports fewer, see
//     ManyKeys): what a library holds per key, its copy of the key
//     included.

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

// BenchmarkHotKey compares one key hammered past its limit, serially and
// in parallel, across every library.
func BenchmarkHotKey(b *testing.B) {
	for _, p := range memoryPeers() {
		b.Run(p.name+"/serial", func(b *testing.B) {
			l := p.new(b, canonical)
			l.closeWith(b)
			b.ReportAllocs()
			for b.Loop() {
				l.allow(hotKey)
			}
		})
		b.Run(p.name+"/parallel", func(b *testing.B) {
			l := p.new(b, canonical)
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

// BenchmarkManyKeys compares 1e6 distinct keys in parallel across every
// library. The store is filled with every key once, before the first
// timed run, and kept across the runs of one sub-benchmark.
func BenchmarkManyKeys(b *testing.B) {
	keys := fixtureKeys()
	for _, p := range memoryPeers() {
		var l limiter
		filled := false
		b.Run(p.name, func(b *testing.B) {
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
			// beside the lookups, made runs of the same library differ
			// by half.
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := walkStart(&next)
				for pb.Next() {
					l.allow(keys[i])
					i = walkNext(i)
				}
			})
			b.StopTimer()
			if l.keys != nil {
				b.ReportMetric(float64(l.keys()), "keys")
			}
		})
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
				before := heapInuse()
				l := p.new(b, canonical)
				b.StartTimer()
				for i := range manyKeys {
					l.allow(fixtureKey(i))
				}
				b.StopTimer()
				after := heapInuse()
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
				b.StartTimer()
			}
		})
	}
}

// heapInuse returns HeapInuse after two GCs (the second one sweeps what
// the first freed).
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
