package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/redis/go-redis/v9"
)

// scriptHook counts the scripts (EVALSHA and EVAL) a client sends.
type scriptHook struct{ n *atomic.Int64 }

func (h scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "fcall" || name == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// countedClient returns a client of the shared server and the count of
// scripts it sends.
func countedClient(t *testing.T) (*redis.Client, *atomic.Int64) {
	c := newClient(t, singleNode(t))
	var n atomic.Int64
	c.AddHook(scriptHook{&n})
	return c, &n
}

func mustLeased(t *testing.T, remote core.Limiter, batch int64, opts ...hotkey.LeaseOption) *hotkey.Leased {
	t.Helper()
	l, err := hotkey.NewLeased(remote, batch, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Redis calls per 10,000 allowed requests for a key at 20,000 a minute,
// 300 requests a second: one per request without leases, about one per
// batch with leases of 100.
func TestLeaseCalls(t *testing.T) {
	p := core.Policy{Limit: 20000, Window: time.Minute}
	run := func(t *testing.T, batch int64, allowedWant int) int64 {
		client, scripts := countedClient(t)
		clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		var l core.Limiter = mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())), WithClock(clock))
		if batch > 1 {
			l = mustLeased(t, l, batch, hotkey.WithClock(clock))
		}
		scripts.Store(0)
		for allowed := 0; allowed < allowedWant; {
			d, err := l.AllowN(ctx, "hot", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
			clock.Advance(time.Second / 300)
		}
		return scripts.Load()
	}
	without := run(t, 1, 10000)
	with := run(t, 100, 10000)
	t.Logf("Redis scripts per 10,000 allowed: %d without leases, %d with leases of 100 (%.0fx fewer)",
		without, with, float64(without)/float64(with))
	if without != 10000 {
		t.Errorf("without leases: %d scripts, want 10000", without)
	}
	if with*50 > without {
		t.Errorf("with leases of 100: %d scripts, want at most %d (50x fewer)", with, without/50)
	}
}

// Four instances, each with its own client and Leased limiter, hammer one
// key on Redis through phases below, above and far above its limit and a
// quiet spell, one goroutine each, on one manual clock: in no span of time
// is the key allowed more than the policy allows plus 4 × batch.
func TestLeaseOverAdmission(t *testing.T) {
	p := core.Policy{Limit: 6000, Window: time.Minute, Burst: 500} // 100/s
	const batch, instances, step = 100, 4, time.Millisecond
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	prefix := uniquePrefix(t.Name())
	var ls []*hotkey.Leased
	var scripts []*atomic.Int64
	for range instances {
		client, n := countedClient(t)
		scripts = append(scripts, n)
		ls = append(ls, mustLeased(t, mustNew(t, client, p, WithPrefix(prefix), WithClock(clock)), batch, hotkey.WithClock(clock)))
	}
	var admitted []int64
	var total, requests int64
	// Requests per ms per instance, and for how many ms: just below the
	// limit (leases grow), quiet (the bucket refills while leases last),
	// a burst, far above the limit, quiet, a burst.
	for _, phase := range []struct {
		perMs float64
		ms    int
	}{{0.024, 3000}, {0, 500}, {0.5, 500}, {0.1, 1000}, {0, 500}, {0.3, 500}} {
		perMs := phase.perMs
		acc := 0.0
		for range phase.ms {
			acc += perMs
			k := int(acc)
			acc -= float64(k)
			var a atomic.Int64
			if k > 0 {
				var wg sync.WaitGroup
				for _, l := range ls {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range k {
							d, err := l.Allow(ctx, "hot")
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								a.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				requests += int64(k * instances)
			}
			admitted = append(admitted, a.Load())
			total += a.Load()
			clock.Advance(step)
		}
	}
	over := limitercheck.OverAdmission(p, step, admitted)
	var calls int64
	var dropped uint64
	for i, l := range ls {
		calls += scripts[i].Load()
		dropped += l.Stats().Dropped
	}
	t.Logf("%d instances, batch %d: %d requests, %d allowed in 6 s, worst over-admission %d (bound %d), %d units dropped, %d Redis scripts",
		instances, batch, requests, total, over, instances*batch, dropped, calls)
	if over > instances*batch {
		t.Errorf("over-admitted by %d in some span, want at most %d", over, instances*batch)
	}
}

// After Redis denies a key, the denial cache answers its further requests
// with no script sent, and a RetryAfter that counts down exactly with the
// clock; at RetryAfter, Redis decides again.
func TestDenialCacheRedis(t *testing.T) {
	client, scripts := countedClient(t)
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := core.Policy{Limit: 10, Window: time.Second}
	remote := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())), WithClock(clock))
	c, err := hotkey.NewDenialCache(remote, hotkey.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if d, err := c.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	d, err := c.Allow(ctx, "k")
	if err != nil || d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("11th request: %+v, %v; want denied, RetryAfter 100ms", d, err)
	}
	before := scripts.Load()
	const further = 1000
	for i := range further {
		// 99µs apart: 1000 requests in 99ms, all before the 100ms.
		want := 100*time.Millisecond - time.Duration(i)*99*time.Microsecond
		d, err := c.Allow(ctx, "k")
		if err != nil || d.Allowed || d.RetryAfter != want || d.Limit != 10 || d.Policy != p {
			t.Fatalf("request %d: %+v, %v; want denied from memory, RetryAfter %v", i, d, err, want)
		}
		clock.Advance(99 * time.Microsecond)
	}
	if sent := scripts.Load() - before; sent != 0 {
		t.Errorf("%d further requests sent %d scripts, want 0", further, sent)
	}
	clock.Set(time.Date(2026, 1, 1, 0, 0, 0, int(100*time.Millisecond), time.UTC))
	if d, err := c.Allow(ctx, "k"); err != nil || !d.Allowed || scripts.Load()-before != 1 {
		t.Errorf("at RetryAfter: %+v, %v, %d scripts; want allowed by Redis", d, err, scripts.Load()-before)
	}
	t.Logf("denial cache: %d denied requests answered with 0 Redis scripts", further)
}
