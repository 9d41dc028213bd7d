package benchmarks

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	uluredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// The Redis peers: ratekit's redisstore (token bucket), go-redis/redis_rate
// v10 (GCRA) and ulule/limiter's Redis store (fixed window), all on the one
// redis-server TestMain starts and the same go-redis v9 client (ulule's
// Redis driver takes a go-redis v9 client since v3.11; this module builds
// it against the same v9.23.0 ratekit uses). The speed cases are run()'s in
// redis_test.go: serial latency and 32-goroutine throughput on distinct
// keys and on one hot key, every request allowed; the probes use
// redisPeers ("ratekit-redisstore" with batching off, "-batched" as New
// makes it).

// BenchmarkRedisUlule is ulule/limiter's Redis store at the same open
// policy as BenchmarkRedisRatekit and BenchmarkRedisRate.
func BenchmarkRedisUlule(b *testing.B) {
	c := newClient(b)
	store, err := uluredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "bench-ulule"})
	if err != nil {
		b.Fatal(err)
	}
	l := ulule.New(store, ulule.Rate{Period: open.Window, Limit: open.Limit})
	run(b, func(ctx context.Context, key string) error {
		_, err := l.Get(ctx, key)
		return err
	})
}

// namespace makes every Redis limiter a probe builds count in keys of its
// own, so runs in one redis-server never see each other's state.
var namespace atomic.Int64

func nextPrefix(name string) string {
	return "probe-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(namespace.Add(1), 10)
}

// redisClient returns a client to the test redis-server, closed with tb.
func redisClient(tb testing.TB) *redis.Client {
	needRedis(tb)
	c := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, PoolSize: 64})
	tb.Cleanup(func() { c.Close() })
	return c
}

// redisPeers lists the Redis libraries behind the common adapter shape. A
// store error counts as a denial (and fails the probe's count, visibly).
func redisPeers() []peer {
	return []peer{
		{name: "ratekit-redisstore", new: ratekitRedis("rk", redisstore.WithBatching(1))},
		{name: "ratekit-redisstore-batched", new: ratekitRedis("rkb")},
		{name: "redis_rate", new: func(tb testing.TB, p policy) limiter {
			l := redis_rate.NewLimiter(redisClient(tb))
			lim := redis_rate.Limit{Rate: p.limit, Period: p.window, Burst: p.burst}
			prefix := nextPrefix("rr") + ":"
			ctx := context.Background()
			return limiter{allow: func(key string) bool {
				res, err := l.Allow(ctx, prefix+key, lim)
				return err == nil && res.Allowed > 0
			}}
		}},
		{name: "ulule-redis", new: func(tb testing.TB, p policy) limiter {
			store, err := uluredis.NewStoreWithOptions(redisClient(tb), ulule.StoreOptions{Prefix: nextPrefix("ul")})
			if err != nil {
				tb.Fatal(err)
			}
			l := ulule.New(store, ulule.Rate{Period: p.window, Limit: int64(p.limit)})
			ctx := context.Background()
			return limiter{allow: func(key string) bool {
				c, err := l.Get(ctx, key)
				return err == nil && !c.Reached
			}}
		}},
	}
}

// ratekitRedis returns the constructor of ratekit's Redis store with opts,
// its keys under a fresh prefix starting with prefix.
func ratekitRedis(prefix string, opts ...redisstore.Option) func(testing.TB, policy) limiter {
	return func(tb testing.TB, p policy) limiter {
		opts := append([]redisstore.Option{redisstore.WithPrefix(nextPrefix(prefix))}, opts...)
		l, err := redisstore.New(redisClient(tb), core.Policy{Limit: int64(p.limit), Window: p.window, Burst: int64(p.burst)}, opts...)
		if err != nil {
			tb.Fatal(err)
		}
		ctx := context.Background()
		return limiter{allow: func(key string) bool {
			d, err := l.Allow(ctx, key)
			return err == nil && d.Allowed
		}}
	}
}
