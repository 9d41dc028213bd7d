package inflight_test

import (
	"strconv"
	"testing"

	"github.com/ratekit/ratekit/inflight"
)

// BenchmarkMemoryAcquireRelease is one request's lease on memory: an
// Acquire and its Release, over 1 key (every goroutine on one shard) and
// 1,000 keys.
func BenchmarkMemoryAcquireRelease(b *testing.B) {
	for _, keys := range []int{1, 1000} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			m, err := inflight.New(1 << 30)
			if err != nil {
				b.Fatal(err)
			}
			names := make([]string, keys)
			for i := range names {
				names[i] = "key-" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					d, _ := m.Acquire(ctx, names[i%keys])
					m.Release(ctx, d.Lease)
					i++
				}
			})
		})
	}
}
