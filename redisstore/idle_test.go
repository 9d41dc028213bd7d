package redisstore

import (
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/redis/go-redis/v9"
)

// Batching is on by default, and costs an idle caller nothing: a decision,
// a Peek or a refund made while the limiter has no round trip in flight is
// one command in one round trip, never a pipeline, as with WithBatching(1);
// so is every call of two callers at a time; a Layered limiter's too. The
// server (on a Redis of its own, so that no other test's commands are
// counted) and the client agree.
func TestBatchingIdleCallerOneRoundTrip(t *testing.T) {
	needRedis(t)
	s, err := servers.Start()
	if err != nil {
		t.Fatal(err)
	}
	admin := newClient(t, s.Addr)
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 1_000_000, Window: time.Minute}, func(t *testing.T, p core.Policy) {
		limiter := func(t testing.TB, c redis.UniversalClient, opts ...Option) core.Refunder {
			return mustNew(t, c, p, opts...)
		}
		layered := func(t testing.TB, c redis.UniversalClient, opts ...Option) core.Refunder {
			daily := core.Policy{Name: "daily", Limit: core.MaxLimit, Window: 24 * time.Hour}
			return mustLayered(t, c, []core.Policy{p, daily}, opts...)
		}
		for _, c := range []struct {
			name    string
			new     func(testing.TB, redis.UniversalClient, ...Option) core.Refunder
			opts    []Option
			callers int
		}{
			{"default", limiter, nil, 1},
			{"default/two-callers", limiter, nil, 2},
			{"unbatched", limiter, []Option{WithBatching(1)}, 1},
			{"layered", layered, nil, 1},
			{"layered/two-callers", layered, nil, 2},
		} {
			t.Run(c.name, func(t *testing.T) {
				client := newClient(t, s.Addr)
				hook := &pipeHook{}
				client.AddHook(hook)
				l := c.new(t, client, append(c.opts, WithPrefix(uniquePrefix(t.Name())))...)
				if _, err := l.AllowN(ctx, "warm", 1); err != nil { // the connections dialled
					t.Fatal(err)
				}
				if err := admin.ConfigResetStat(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				hook.scripts.Store(0)
				hook.pipelined.Store(0)
				const each = 30 // per caller: 10 AllowN, 10 Peek, 10 Refund
				var wg sync.WaitGroup
				for g := range c.callers {
					wg.Go(func() {
						key := string(rune('a' + g))
						for range each / 3 {
							if _, err := l.AllowN(ctx, key, 2); err != nil {
								t.Error(err)
								return
							}
							if _, err := l.Peek(ctx, key, 1); err != nil {
								t.Error(err)
								return
							}
							if err := l.Refund(ctx, key, 1, time.Millisecond); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				calls := int64(c.callers * each)
				stats := commandStats(t, admin)
				if stats["evalsha"]+stats["fcall"] != calls || stats["eval"] != 0 {
					t.Errorf("server saw %d EVALSHA or FCALL and %d EVAL for %d calls, want %d and 0", stats["evalsha"]+stats["fcall"], stats["eval"], calls, calls)
				}
				if got := hook.scripts.Load(); got != calls {
					t.Errorf("client sent %d scripts for %d calls", got, calls)
				}
				if got := hook.pipelined.Load(); got != 0 {
					t.Errorf("client sent %d scripts in pipelines: a call waited for another's round trip", got)
				}
			})
		}
	})
}
