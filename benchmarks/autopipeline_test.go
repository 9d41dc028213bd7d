package benchmarks

import (
	"context"
	"testing"

	"github.com/ratekit/ratekit/redisstore"
	"github.com/redis/go-redis/v9"
)

var _ redis.UniversalClient = (*redis.AutoPipeliner)(nil)

// BenchmarkRedisRatekitAutoPipeline is the token bucket, its own batching
// off, through go-redis's (experimental) AutoPipeliner, which
// is a redis.UniversalClient: concurrent decisions share one write and one
// read. Measured for information only; the package documentation does not
// recommend it until its replay-after-error behaviour is shown never to run
// a script twice.
func BenchmarkRedisRatekitAutoPipeline(b *testing.B) {
	ap, err := newClient(b).AutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
	l, err := redisstore.New(ap, open, redisstore.WithPrefix("bench-ap"), redisstore.WithBatching(1))
	if err != nil {
		b.Fatal(err)
	}
	run(b, func(ctx context.Context, key string) error {
		_, err := l.Allow(ctx, key)
		return err
	})
}
