package redisstore

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// A core.Blocking whose limiter and lockout live on Redis: two servers, each
// with its own client, share the lock. Clients in parallel on both break
// the limit once: exactly the limit is let in, and the key is locked for
// the first step, a minute, on both servers; at the next violation, for
// the second step.
func TestBlockingAcrossServers(t *testing.T) {
	for _, store := range []struct {
		name   string
		client func(t *testing.T) (redis.UniversalClient, redis.UniversalClient)
	}{
		{"single", func(t *testing.T) (redis.UniversalClient, redis.UniversalClient) {
			addr := singleNode(t)
			return newClient(t, addr), newClient(t, addr)
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, redis.UniversalClient) {
			addrs := cluster(t)
			return newClusterClient(t, addrs), newClusterClient(t, addrs)
		}},
	} {
		t.Run(store.name, func(t *testing.T) {
			a, b := store.client(t)
			prefix := uniquePrefix(t.Name())
			clock := core.NewManualClock(limitercheck.StartTime())
			p := core.Policy{Algorithm: core.FixedWindow, Limit: 20, Window: time.Second}
			server := func(c redis.UniversalClient) *core.Blocking {
				newLimiter := func(p core.Policy) (core.Limiter, error) {
					return New(c, p, WithClock(clock), WithPrefix(prefix))
				}
				l, err := newLimiter(p)
				if err != nil {
					t.Fatal(err)
				}
				lo, err := core.NewLockout(core.Block{For: time.Minute, Max: time.Hour}, clock, newLimiter)
				if err != nil {
					t.Fatal(err)
				}
				bl, err := core.NewBlocking(l, lo)
				if err != nil {
					t.Fatal(err)
				}
				return bl
			}
			servers := []*core.Blocking{server(a), server(b)}
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for range 10 {
						d, err := servers[w%2].AllowN(ctx, "k", 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if allowed.Load() != p.Limit {
				t.Errorf("allowed %d, want the limit, %d", allowed.Load(), p.Limit)
			}
			for i, s := range servers {
				d, err := s.AllowN(ctx, "k", 1)
				if err != nil || d.Allowed || d.RetryAfter != time.Minute {
					t.Errorf("server %d after the flood: %+v, %v; want locked for a minute", i, d, err)
				}
			}
			clock.Advance(time.Minute)
			for range p.Limit {
				if d, err := servers[1].AllowN(ctx, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("after the lock: %+v, %v", d, err)
				}
			}
			d, err := servers[0].AllowN(ctx, "k", 1)
			if err != nil || d.Allowed || d.RetryAfter != 2*time.Minute {
				t.Errorf("the second violation: %+v, %v; want locked for 2 minutes", d, err)
			}
			if d, _ := servers[1].Peek(ctx, "k", 1); d.Allowed || d.RetryAfter != 2*time.Minute {
				t.Errorf("the other server after the second violation: %+v", d)
			}
		})
	}
}
