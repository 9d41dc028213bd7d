package redisstore

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

// BenchmarkSlidingLogServer measures the Redis time of one sliding-log
// decision (INFO commandstats usec_per_call of EVALSHA, reported as
// server-µs/op) on a log of 100, 8,000 and 100,000 records of 1,000 units,
// spread over the window of 1,000,000,000 per hour:
//
//   - allowed: each request an interval later than the one before, so that
//     one record leaves the window as one arrives and the log keeps its
//     length (the cutting off of records that left is in the figure);
//   - denied: a request of cost L;
//   - given back: a request allowed and at once refunded, as WithCountIf
//     does (the figure is the mean of the two calls);
//   - refund, long request: a refund of one unit counted half a window ago,
//     taken from a record in the middle of the log;
//   - cut off: the one decision in many that cuts off the records that
//     left, when they are half the log (the log is written again before
//     each);
//   - rebuilt: the one refund in many that rebuilds a log half of whose
//     records were emptied by refunds.
//
// The log is written with SET beforehand (seedSlidingLog), so that the
// largest takes no time to build. Run it alone: CONFIG RESETSTAT clears the
// server's statistics.
//
//	go test -run '^$' -bench SlidingLogServer -benchtime 2000x
func BenchmarkSlidingLogServer(b *testing.B) {
	addr := singleNode(b)
	client := newClient(b, addr)
	p := core.Policy{Algorithm: core.SlidingLog, Limit: core.MaxLimit, Window: time.Hour}
	const units = 1000
	W := p.Window.Microseconds()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, k := range []int{100, 8000, 100_000} {
		gap := W / int64(k)
		// The log's records at start + j·gap, j < k; now is half a gap after
		// the last, so the first is still in the window.
		ats := make([]int64, k)
		for j := range ats {
			ats[j] = start.UnixMicro() + int64(j)*gap
		}
		now := start.Add(time.Duration(int64(k-1)*gap+gap/2) * time.Microsecond)
		setup := func(b *testing.B) (*Limiter, *core.ManualClock) {
			clock := core.NewManualClock(now)
			l := mustNew(b, client, p, WithClock(clock), WithBatching(1), WithPrefix(uniquePrefix(b.Name())))
			seedSlidingLog(b, client, l.key("k"), ats, units)
			if err := client.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			return l, clock
		}
		report := func(b *testing.B) {
			b.ReportMetric(evalshaMicros(b, client), "server-µs/op")
		}
		b.Run(fmt.Sprintf("records=%d/allowed", k), func(b *testing.B) {
			l, clock := setup(b)
			for b.Loop() {
				clock.Advance(time.Duration(gap) * time.Microsecond)
				if d, err := l.AllowN(ctx, "k", units); err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
			report(b)
		})
		b.Run(fmt.Sprintf("records=%d/denied", k), func(b *testing.B) {
			l, _ := setup(b)
			for b.Loop() {
				if d, err := l.AllowN(ctx, "k", p.Limit); err != nil || d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
			report(b)
		})
		b.Run(fmt.Sprintf("records=%d/given-back", k), func(b *testing.B) {
			l, clock := setup(b)
			for b.Loop() {
				clock.Advance(time.Microsecond)
				if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
				if err := l.Refund(ctx, "k", 1, 0); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(fmt.Sprintf("records=%d/refund-long", k), func(b *testing.B) {
			l, _ := setup(b)
			for b.Loop() {
				if err := l.Refund(ctx, "k", 1, p.Window/2); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(fmt.Sprintf("records=%d/cut-off", k), func(b *testing.B) {
			l, clock := setup(b)
			clock.Advance(p.Window/2 + 2*time.Duration(gap)*time.Microsecond)
			for b.Loop() {
				b.StopTimer()
				seedSlidingLog(b, client, l.key("k"), ats, units)
				b.StartTimer()
				if d, err := l.AllowN(ctx, "k", units); err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
			report(b)
			if s, _ := readSlidingLog(b, client, l.key("k")); s.base == 0 {
				b.Fatal("nothing was cut off")
			}
		})
		b.Run(fmt.Sprintf("records=%d/rebuilt", k), func(b *testing.B) {
			// Every other record empty.
			us := make([]int64, k)
			for i := range us {
				us[i] = units * int64(i%2)
			}
			raw := packSlidingLog(ats, us)
			binary.BigEndian.PutUint32(raw[16:], uint32(k/2)) // zeros
			binary.BigEndian.PutUint32(raw[20:], 1)           // from record 1
			l, _ := setup(b)
			for b.Loop() {
				b.StopTimer()
				if err := client.Set(ctx, l.key("k"), raw, time.Hour).Err(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := l.Refund(ctx, "k", 1, time.Duration(gap)*time.Microsecond); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
			if s, _ := readSlidingLog(b, client, l.key("k")); s.k != int64(k/2) {
				b.Fatalf("%d records after the rebuild, want %d", s.k, k/2)
			}
		})
	}
}

// evalshaMicros returns the server's usec_per_call of EVALSHA (or FCALL) since the
// last CONFIG RESETSTAT.
func evalshaMicros(b *testing.B, client *redis.Client) float64 {
	info, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.Replace(strings.TrimSpace(line), "cmdstat_fcall:", "cmdstat_evalsha:", 1) // on functions
		if _, rest, ok := strings.Cut(line, "cmdstat_evalsha:"); ok {
			_, v, _ := strings.Cut(rest, "usec_per_call=")
			v, _, _ = strings.Cut(v, ",")
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("commandstats %q: %v", line, err)
			}
			return f
		}
	}
	b.Fatalf("no EVALSHA in commandstats:\n%s", info)
	return 0
}

// seedSlidingLog writes key as the sliding log of one record of the given
// units at each of ats (µs, increasing), expiring in an hour.
func seedSlidingLog(b testing.TB, client *redis.Client, key string, ats []int64, units int64) {
	us := make([]int64, len(ats))
	for i := range us {
		us[i] = units
	}
	if err := client.Set(ctx, key, packSlidingLog(ats, us), time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
}
