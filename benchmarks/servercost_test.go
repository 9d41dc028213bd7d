package benchmarks

import (
	"context"
	"strings"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// TestServerCost logs the Redis CPU time per script call (INFO
// commandstats usec_per_call) for ratekit's scripts and redis_rate's: on a
// single-threaded Redis, the ceiling of throughput.
func TestServerCost(t *testing.T) {
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer admin.Close()
	c := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1})
	defer c.Close()
	measure := func(name string, decide func(key string)) {
		decide("warm")
		admin.ConfigResetStat(ctx)
		for i := range 20000 {
			decide([]string{"a", "b", "c", "d"}[i%4])
		}
		info, _ := admin.Info(ctx, "commandstats").Result()
		for _, line := range strings.Split(info, "\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") {
				t.Logf("%-16s %s", name, strings.TrimSpace(line))
			}
		}
	}
	for _, a := range core.Algorithms {
		p := open
		p.Algorithm = a
		if a == core.SlidingLog {
			p.Limit, p.Window = 1_000_000, 1e9
		}
		l, _ := redisstore.New(c, p, redisstore.WithPrefix("cost"))
		measure(a.String(), func(key string) { l.Allow(ctx, key) })
	}
	rr := redis_rate.NewLimiter(c)
	lim := redis_rate.Limit{Rate: int(open.Limit), Period: open.Window, Burst: int(open.Limit)}
	measure("redis_rate", func(key string) { rr.Allow(ctx, "cost-rr:"+key, lim) })
}
