package benchmarks

import (
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// BenchmarkClock measures the time sources a limiter can read once per
// decision, serially and in parallel:
//
//   - time-now: time.Now, the wall and the monotonic clock (what most
//     peers read);
//   - time-since: time.Since a base, the monotonic clock alone (what
//     ratekit's default, core.SystemClock, costs a decision);
//   - coarse: a core.CoarseClock of 1 ms read through its Now (a
//     limiter reads the cached nanoseconds directly, cheaper still).
//
// On a hot key the read costs what it costs here. At 1e6 keys it costs
// more: the vDSO's clock read is ordered (the TSC read is fenced), so it
// waits for the previous decision's cache misses (see ManyKeys, ratekit
// with and without the coarse clock).
func BenchmarkClock(b *testing.B) {
	base := time.Now()
	coarse := core.NewCoarseClock(time.Millisecond)
	defer coarse.Stop()
	var sink int64
	cases := []struct {
		name string
		read func() int64
	}{
		{"time-now", func() int64 { return time.Now().UnixNano() }},
		{"time-since", func() int64 { return int64(time.Since(base)) }},
		{"coarse", func() int64 { return coarse.Now().UnixNano() }},
	}
	for _, c := range cases {
		b.Run(c.name+"/serial", func(b *testing.B) {
			var s int64
			for b.Loop() {
				s += c.read()
			}
			sink += s
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				var s int64
				for pb.Next() {
					s += c.read()
				}
				_ = s
			})
		})
	}
	_ = sink
}
