package benchmarks

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	uluredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// TestServerCost logs the Redis CPU time per script call (INFO
// commandstats usec_per_call) for ratekit's scripts (unbatched: one call
// per decision, as a serial caller makes them), redis_rate's and ulule's: on a
// single-threaded Redis, the ceiling of throughput. Three rounds, the
// scripts interleaved, so that noise and warm-up hit them alike; the least
// and the median of each are logged.
func TestServerCost(t *testing.T) {
	needRedis(t)
	if testing.Short() {
		t.Skip("60,000 script calls per round")
	}
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer admin.Close()
	c := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1})
	defer c.Close()
	measure := func(decide func(key string)) float64 {
		decide("warm")
		admin.ConfigResetStat(ctx)
		for i := range 20000 {
			decide([]string{"a", "b", "c", "d"}[i%4])
		}
		info, _ := admin.Info(ctx, "commandstats").Result()
		for _, line := range strings.Split(info, "\n") {
			// ratekit's scripts by FCALL on Redis 7, the peers' by EVALSHA:
			// each library's calls are of one of them.
			line = strings.Replace(strings.TrimSpace(line), "cmdstat_fcall:", "cmdstat_evalsha:", 1)
			if _, rest, ok := strings.Cut(line, "cmdstat_evalsha:"); ok {
				_, v, _ := strings.Cut(rest, "usec_per_call=")
				v, _, _ = strings.Cut(v, ",")
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return 0
	}
	names := []string{}
	deciders := []func(string){}
	for _, a := range core.Algorithms() {
		p := open
		p.Algorithm = a
		if a == core.SlidingLog {
			p.Limit, p.Window = 1_000_000, 1e9
		}
		l, _ := redisstore.New(c, p, redisstore.WithPrefix("cost"))
		names = append(names, a.String())
		deciders = append(deciders, func(key string) { l.Allow(ctx, key) })
	}
	rr := redis_rate.NewLimiter(c)
	lim := redis_rate.Limit{Rate: int(open.Limit), Period: open.Window, Burst: int(open.Limit)}
	names = append(names, "redis_rate")
	deciders = append(deciders, func(key string) { rr.Allow(ctx, "cost-rr:"+key, lim) })
	store, err := uluredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "cost-ul"})
	if err != nil {
		t.Fatal(err)
	}
	ul := ulule.New(store, ulule.Rate{Period: open.Window, Limit: open.Limit})
	names = append(names, "ulule")
	deciders = append(deciders, func(key string) { ul.Get(ctx, key) })
	const rounds = 3
	costs := make([][]float64, len(names))
	for range rounds {
		for i, decide := range deciders {
			costs[i] = append(costs[i], measure(decide))
		}
	}
	for i, name := range names {
		slices.Sort(costs[i])
		t.Logf("%-16s usec_per_call min %.2f median %.2f", name, costs[i][0], costs[i][rounds/2])
	}
}
