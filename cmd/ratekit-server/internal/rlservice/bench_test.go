package rlservice

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlconfig"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redisserver"
	"github.com/redis/go-redis/v9"
)

// BenchmarkShouldRateLimit: the fixture, a fixed window of 100 per
// minute over 1,000 descriptor values, callers in parallel, on memory, the
// call itself (no gRPC). The clock never moves, so past the first 100,000
// calls most are denials: what a limiter under attack meets. "two" decides
// two descriptors of two limits together.
func BenchmarkShouldRateLimit(b *testing.B) { benchShouldRateLimit(b, nil) }

// BenchmarkShouldRateLimitRedis is BenchmarkShouldRateLimit on a
// redis-server of its own: "two" is one script of two layers.
func BenchmarkShouldRateLimitRedis(b *testing.B) {
	redisserver.Need(b)
	c := redis.NewClient(&redis.Options{Addr: redisserver.StartT(b), MaxRetries: -1})
	defer c.Close()
	benchShouldRateLimit(b, c)
}

func benchShouldRateLimit(b *testing.B, rc redis.UniversalClient) {
	const yaml = `domain: bench
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
`
	for _, tc := range []struct{ name, desc string }{{"one", "client=%d"}, {"two", "client=%d;route=r"}} {
		b.Run(tc.name, func(b *testing.B) {
			f, err := rlconfig.Parse("bench.yaml", []byte(yaml))
			if err != nil {
				b.Fatal(err)
			}
			c, err := rlconfig.Build(false, f)
			if err != nil {
				b.Fatal(err)
			}
			l, err := New(c, Options{Clock: core.NewManualClock(start), NoHeaders: true, Redis: rc, RedisPrefix: fmt.Sprint("bench:", b.N, ":", b.Name())})
			if err != nil {
				b.Fatal(err)
			}
			reqs := make([]*pb.RateLimitRequest, 1000)
			for i := range reqs {
				reqs[i] = req("bench", fmt.Sprintf(tc.desc, i), 0)
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				for p.Next() {
					if _, err := l.ShouldRateLimit(context.Background(), reqs[next.Add(1)%int64(len(reqs))]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
