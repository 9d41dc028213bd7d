package redisstore

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/guard/guardtest"
	"github.com/ratekit/ratekit/internal/guardcheck"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// The guard.Guard scenarios of guardtest.Run on Redis: the Guard's
// limiters are Redis limiters reading a manual clock, on a single node and
// on a Cluster, so that every server sharing the Redis shares the counts.

// newRedisGuard returns a Guard on Redis limiters with their own prefix.
func newRedisGuard(t *testing.T, client redis.UniversalClient, prefix string, clock *core.ManualClock, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(func(p core.Policy) (core.Limiter, error) {
		return New(client, p, WithClock(clock), WithPrefix(prefix))
	}, append([]guard.Option{guard.WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGuard(t *testing.T) {
	for _, store := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return newClient(t, singleNode(t)) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return newClusterClient(t, cluster(t)) }},
	} {
		t.Run(store.name, func(t *testing.T) {
			client := store.client(t)
			guardtest.Run(t, func(t *testing.T, clock *core.ManualClock, opts ...guard.Option) *guard.Guard {
				return newRedisGuard(t, client, uniquePrefix(t.Name()), clock, opts...)
			})
		})
	}
}

// Two servers, each with its own client and Guard on one Redis, fail one
// account concurrently: exactly Limit failures count, and exactly one of
// them starts a lockout, seen by both servers.
func TestGuardAcrossServers(t *testing.T) {
	addr := singleNode(t)
	prefix := uniquePrefix(t.Name())
	clock := core.NewManualClock(limitercheck.StartTime())
	shortWindow := guard.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 10 * time.Second})
	lockout := guard.WithLockout(time.Minute, time.Hour)
	guards := []*guard.Guard{
		newRedisGuard(t, newClient(t, addr), prefix, clock, shortWindow, lockout),
		newRedisGuard(t, newClient(t, addr), prefix, clock, shortWindow, lockout),
	}
	const workers = 16
	var start, done sync.WaitGroup
	start.Add(1)
	errs := make(chan error, workers)
	for i := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			g := guards[i%2]
			d, err := g.Check(ctx, "ana@example.com", fmt.Sprint("192.0.2.", i))
			if err == nil {
				err = g.Fail(ctx, d)
			}
			errs <- err
		}()
	}
	start.Done()
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	const ana, ipA = "ana@example.com", "203.0.113.7"
	locked := func(d time.Duration) guard.Decision {
		return guard.Decision{RetryAfter: d, BlockedBy: guard.ByLockout}
	}
	for _, g := range guards {
		guardcheck.RunSteps(t, clock, g, []guardcheck.Step{
			{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: locked(time.Minute)},
		})
	}
	guardcheck.RunSteps(t, clock, guards[1], []guardcheck.Step{
		{Advance: time.Minute, Op: guardcheck.Peek, Account: ana, IP: ipA, Want: guard.Decision{Allowed: true}},
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 3},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: locked(2 * time.Minute)},
		{Advance: 2 * time.Minute, Op: guardcheck.Peek, Account: ana, IP: ipA, Want: guard.Decision{Allowed: true}},
	})
}
