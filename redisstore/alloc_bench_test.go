package redisstore

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// BenchmarkAllow measures one token-bucket decision on the server's TIME
// and what it allocates, serially and with 32 goroutines each on its own
// key, unbatched (WithBatching(1)) and batched (the default), and a
// calendar fixed window, which is never batched. Throughput
// beside other libraries is measured in benchmarks/; this one is for
// allocations and profiles.
func BenchmarkAllow(b *testing.B) {
	addr := singleNode(b)
	p := core.Policy{Limit: core.MaxLimit, Window: time.Minute}
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"unbatched", []Option{WithBatching(1)}},
		{"batched", nil},
		{"calendar", nil}, // a fixed window per Berlin day: never batched
	} {
		client := newClient(b, addr)
		client.Options().PoolSize = 64
		p := p
		if c.name == "calendar" {
			p = core.Policy{Algorithm: core.FixedWindow, Limit: core.MaxLimit, Window: core.CalendarDay.Window(), Calendar: core.CalendarDay, Zone: "Europe/Berlin"}
		}
		l := mustNew(b, client, p, append(c.opts, WithPrefix(uniquePrefix(b.Name())))...)
		ctx := context.Background()
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Allow(ctx, "serial"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel32", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				key := "p" + strconv.FormatInt(seq.Add(1), 10)
				for pb.Next() {
					if _, err := l.Allow(ctx, key); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
