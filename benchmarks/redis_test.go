package benchmarks

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redisserver"
	"github.com/ratekit/ratekit/redisstore"
)

// The Redis benchmarks run against a redis-server they start on a free
// loopback port (persistence off), never an existing one.
//
// Each case is a decision with a limit high enough that every request is
// allowed, so every library writes on every call. Serial cases measure
// latency per decision; parallel cases run 32 goroutines
// (b.SetParallelism) and measure throughput, reported as decisions/s:
// parallel32 over 1,000 distinct keys (goroutine g takes keys g, g+32,
// g+64, ... modulo 1,000 in turn: every key is touched, and two goroutines
// seldom meet on one), hotkey32 with all 32 on one key. BenchmarkRedisPing is
// the floor: one bare PING round trip on the same client. With -cpu=1 the
// client runs on one core (GOMAXPROCS=1), still 32 goroutines: the regime
// where the client, not Redis, is the bottleneck.

// redisAddr is the address of the redis-server TestMain started, or empty
// when redis-server is not installed (the Redis cases then skip).
var redisAddr string

// TestMain starts a redis-server on a free loopback port for the Redis
// cases, runs the tests and stops it; with gwFloorEnv set it is
// TestGateway's floor server instead. Without the redis-server binary the
// Redis cases skip, except under CI (CI set), where that is a failure.
func TestMain(m *testing.M) {
	if os.Getenv(gwFloorEnv) != "" { // started by TestGateway as its floor
		if err := serveGatewayFloor(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if msg := redisserver.Missing(); msg != "" {
		if os.Getenv("CI") != "" {
			fmt.Println(msg + " (CI is set, so the Redis cases fail)")
			os.Exit(1)
		}
		fmt.Println(msg + ": the Redis cases skip")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ratekit-bench-")
	if err != nil {
		panic(err)
	}
	srv, err := redisserver.Start(dir)
	if err != nil {
		panic(err)
	}
	redisAddr = srv.Addr
	code := m.Run()
	srv.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needRedis skips tb when no redis-server was started.
func needRedis(tb testing.TB) {
	tb.Helper()
	if redisAddr == "" {
		tb.Skip("redis-server not installed")
	}
}

func newClient(b *testing.B) *redis.Client {
	needRedis(b)
	c := redis.NewClient(&redis.Options{
		Addr:                  redisAddr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		PoolSize:              64,
	})
	b.Cleanup(func() { c.Close() })
	return c
}

// run runs decide serially, with 32 goroutines each on its own key, and
// with 32 goroutines on one key.
func run(b *testing.B, decide func(ctx context.Context, key string) error) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := decide(ctx, "serial"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
	parallel := func(name string, keys []string) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			// RunParallel starts SetParallelism × GOMAXPROCS goroutines.
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				g := int(seq.Add(1) - 1)
				for i := g % len(keys); pb.Next(); i = (i + 32) % len(keys) {
					if err := decide(ctx, keys[i]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
	distinct := make([]string, distinctKeys)
	for i := range distinct {
		distinct[i] = "p" + strconv.Itoa(i)
	}
	parallel("parallel32", distinct)
	parallel("hotkey32", []string{"hot"})
}

// distinctKeys is the number of keys the parallel32 cases spread over.
const distinctKeys = 1000

// A policy that allows every request of the benchmark: 1e9 a minute.
var open = core.Policy{Limit: core.MaxLimit, Window: time.Minute}

// BenchmarkRedisPing is the floor: one bare PING round trip.
func BenchmarkRedisPing(b *testing.B) {
	c := newClient(b)
	run(b, func(ctx context.Context, _ string) error { return c.Ping(ctx).Err() })
}

// BenchmarkRedisRatekit is ratekit's redisstore, each algorithm, with
// batching off (redisstore.WithBatching(1)): every decision its own round
// trip, as redis_rate's.
func BenchmarkRedisRatekit(b *testing.B) { benchRatekit(b, redisstore.WithBatching(1)) }

// BenchmarkRedisRatekitBatched is ratekit's redisstore as New makes it,
// batching on: decisions made while two round trips are in flight share
// the next one, one EVALSHA each.
func BenchmarkRedisRatekitBatched(b *testing.B) { benchRatekit(b) }

func benchRatekit(b *testing.B, opts ...redisstore.Option) {
	for _, a := range core.Algorithms() {
		p := open
		p.Algorithm = a
		if a == core.SlidingLog {
			p.Limit = 1_000_000 // one member per distinct µs: keep the log small
			p.Window = time.Second
		}
		b.Run(a.String(), func(b *testing.B) {
			l, err := redisstore.New(newClient(b), p, append(opts, redisstore.WithPrefix("bench-"+a.String()))...)
			if err != nil {
				b.Fatal(err)
			}
			run(b, func(ctx context.Context, key string) error {
				_, err := l.Allow(ctx, key)
				return err
			})
		})
	}
}

// BenchmarkRedisRate is redis_rate's GCRA with the same rate and burst as ratekit's token bucket.
func BenchmarkRedisRate(b *testing.B) {
	l := redis_rate.NewLimiter(newClient(b))
	lim := redis_rate.Limit{Rate: int(open.Limit), Period: open.Window, Burst: int(open.Limit)}
	run(b, func(ctx context.Context, key string) error {
		_, err := l.Allow(ctx, "bench-redis-rate:"+key, lim)
		return err
	})
}

// TestRoundTrips counts the script calls the server sees per decision:
// one each without batching; with batching (32 goroutines), at most one,
// as a batch's decisions share one call of the batch script, and every
// decision counted once.
func TestRoundTrips(t *testing.T) {
	needRedis(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer admin.Close()
	c := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1})
	defer c.Close()
	scriptCalls := func() int64 {
		info, _ := admin.Info(ctx, "commandstats").Result()
		var top int64
		for _, line := range strings.Split(info, "\n") {
			for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_fcall:", "cmdstat_eval:"} {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd+"calls="); ok {
					n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
					top += n
				}
			}
		}
		return top
	}
	const decisions = 1024
	for _, batched := range []bool{false, true} {
		for _, a := range core.Algorithms() {
			p := open
			p.Algorithm = a
			opts := []redisstore.Option{redisstore.WithPrefix(fmt.Sprintf("rt-%v-%d", batched, time.Now().UnixNano())), redisstore.WithBatching(1)}
			goroutines := 1
			if batched {
				opts = opts[:1] // the default: batching
				goroutines = 32
			}
			l, err := redisstore.New(c, p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			l.Allow(ctx, "warm")
			admin.ConfigResetStat(ctx)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range decisions / goroutines {
						if _, err := l.Allow(ctx, "k"+strconv.Itoa((g+i)%4)); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			top := scriptCalls()
			t.Logf("%v batched=%v: %d script calls for %d decisions: %.2f calls per decision", a, batched, top, decisions, float64(top)/decisions)
			if top != decisions && !batched || top > decisions {
				t.Errorf("%v batched=%v: %d script calls for %d decisions", a, batched, top, decisions)
			}
			if !a.Burstable() { // the buckets refill meanwhile
				var counted int64
				for k := range 4 {
					d, err := l.Peek(ctx, "k"+strconv.Itoa(k), 1)
					if err != nil {
						t.Fatal(err)
					}
					counted += p.Limit - d.Remaining
				}
				if counted != decisions {
					t.Errorf("%v batched=%v: %d units counted for %d decisions", a, batched, counted, decisions)
				}
			}
		}
	}
}
