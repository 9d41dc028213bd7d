package rlservice

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redisserver"
)

// testRedis, when set, makes newLimiter's limiters keep their counts in
// Redis.
var testRedis redis.UniversalClient

// The memory tests, on a redis-server of the test's own: the decisions and
// responses are the same.
func TestRedis(t *testing.T) {
	redisserver.Need(t)
	addr := redisserver.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	runOnRedis(t, c)
}

// The memory tests on a Redis Cluster of three masters: a request's
// descriptors whose keys lie in different slots are decided slot by slot,
// with the same decisions and responses.
func TestRedisCluster(t *testing.T) {
	c := newCluster(t)
	runOnRedis(t, c)
}

// The memory tests through Sentinel: the same decisions and responses.
func TestRedisSentinel(t *testing.T) {
	s := redisserver.StartSentinelT(t, redisserver.SentinelConfig{})
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.Addrs, MaxRetries: -1})
	defer c.Close()
	runOnRedis(t, c)
}

// runOnRedis runs the memory tests with their counts in c.
func runOnRedis(t *testing.T, c redis.UniversalClient) {
	testRedis = c
	defer func() { testRedis = nil }()
	for name, f := range map[string]func(*testing.T){
		"FixedWindow":      TestFixedWindow,
		"AllOrNothing":     TestAllOrNothing,
		"HitsAddend":       TestHitsAddend,
		"UnlimitedAndZero": TestUnlimitedUnknownAndZero,
		"ShadowMode":       TestShadowMode,
		"Replaces":         TestReplaces,
		"OneLimitTwice":    TestOneLimitTwice,
		"Override":         TestOverride,
		"MixedCosts":       TestMixedCosts,
	} {
		t.Run(name, f)
	}
}

// newCluster starts a Redis Cluster of three masters for t and returns a
// client of it, closed when t ends.
func newCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	cl := redisserver.StartClusterT(t, redisserver.ClusterConfig{Masters: 3})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// On a Cluster, concurrent requests whose descriptors' keys lie in
// different slots never admit more than the tightest limit, and a refused
// request leaves nothing counted in any slot.
func TestRedisClusterNeverOverAdmits(t *testing.T) {
	c := newCluster(t)
	l, err := New(mustConfig(t, `domain: c
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: org
    rate_limit: {unit: minute, requests_per_unit: 25}
`), Options{Redis: c, RedisPrefix: "test:" + t.Name(), Clock: core.NewManualClock(start)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				resp, err := l.ShouldRateLimit(ctx, req("c", "user=alice;ip=203.0.113.7;org=acme", 0))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	n := admitted.Load()
	if n > 20 || n == 0 {
		t.Fatalf("%d admitted, want 1 to the limit, 20", n)
	}
	// The keys lie in more than one slot: the request spanned slots.
	slots := map[int]bool{}
	var mu sync.Mutex
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, "test:"+t.Name()+"*").Result()
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			slots[redisserver.KeySlot(k)] = true
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(slots) < 2 {
		t.Fatalf("the keys lie in %d slot, want several", len(slots))
	}
	// Only what was admitted is counted: ip has 30-n left, org 25-n.
	resp, err := l.ShouldRateLimit(ctx, req("c", "ip=203.0.113.7;org=acme", 0))
	if err != nil {
		t.Fatal(err)
	}
	for i, limit := range []int64{30, 25} {
		if got, want := int64(resp.Statuses[i].LimitRemaining), limit-n-1; got != want {
			t.Errorf("descriptor %d: %d remaining after %d admitted, want %d", i, got, n, want)
		}
	}
}

// A Redis that cannot be reached is Unavailable, for Envoy's
// failure_mode_deny to decide.
func TestRedisDown(t *testing.T) {
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	l, err := New(mustConfig(t, testConfig), Options{Redis: c, RedisTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ShouldRateLimit(context.Background(), req("d", "a=1;b=1", 0)); status.Code(err) != codes.Unavailable {
		t.Errorf("Redis down: %v, want Unavailable", err)
	}
}

// A domain's failure policy decides its requests while Redis is down.
func TestRedisDownFailure(t *testing.T) {
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	newDown := func(head string) *Limiter {
		l, err := New(mustConfig(t, head+testConfig[len("domain: d\n"):]), Options{Redis: c, Clock: core.NewManualClock(start), RedisTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	open := newDown("domain: d\nfailure: open\n")
	for range 3 {
		expect(t, open, req("d", "b=1", 0), ok, want{ok, 0, 0})
	}
	// Fallback: each of 2 instances decides by half of each limit, 3 of a's 5.
	fb := newDown("domain: d\nfailure: fallback\ninstances: 2\n")
	for i := range 3 {
		resp := expect(t, fb, req("d", "a=1", 0), ok, want{ok, uint32(2 - i), time.Minute})
		if got := resp.Statuses[0].CurrentLimit.RequestsPerUnit; got != 5 {
			t.Errorf("current limit %d, want the file's 5", got)
		}
	}
	expect(t, fb, req("d", "a=1", 0), over, want{over, 0, time.Minute})
}

// callCounter counts the commands a client sends.
type callCounter struct{ n *atomic.Int64 }

func (h callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// While Redis is down, the breaker opens after its outages in a row: the
// requests are then decided by the domain's failure policy without calling
// Redis (none waits for its timeout), until, after each cool-down, one
// request probes it; the probe that finds it closes the breaker.
func TestRedisBreaker(t *testing.T) {
	redisserver.Need(t)
	srv, err := redisserver.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	var calls atomic.Int64
	c.AddHook(callCounter{&calls})
	clk := core.NewManualClock(start)
	var mu sync.Mutex
	var transitions []bool
	l, err := New(mustConfig(t, "domain: d\nfailure: open\n"+testConfig[len("domain: d\n"):]), Options{
		Redis: c, RedisPrefix: "test:" + t.Name(), Clock: clk, RedisTimeout: 50 * time.Millisecond,
		BreakerFailures: 3, BreakerCoolDown: 5 * time.Second,
		OnBreaker: func(open bool) { mu.Lock(); transitions = append(transitions, open); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, l, req("d", "a=1", 0), ok, want{ok, 4, time.Minute})

	srv.Stop()
	sent := func(f func()) int64 {
		before := calls.Load()
		f()
		return calls.Load() - before
	}
	// Three outages, each asking Redis, open the breaker.
	for i := range 3 {
		if n := sent(func() { expect(t, l, req("d", "a=1", 0), ok, want{ok, 0, 0}) }); n == 0 {
			t.Errorf("outage %d: Redis not asked", i+1)
		}
	}
	// Open: decided by the failure policy, Redis not asked.
	for i := range 5 {
		if n := sent(func() { expect(t, l, req("d", "a=1;b=1", 0), ok, want{ok, 0, 0}, want{ok, 0, 0}) }); n != 0 {
			t.Errorf("breaker open, request %d: %d commands sent, want none", i+1, n)
		}
	}
	// After the cool-down one request probes, finds Redis down: open again.
	clk.Advance(5 * time.Second)
	if n := sent(func() { expect(t, l, req("d", "a=1", 0), ok, want{ok, 0, 0}) }); n == 0 {
		t.Error("after the cool-down: no probe")
	}
	if n := sent(func() { expect(t, l, req("d", "a=1", 0), ok, want{ok, 0, 0}) }); n != 0 {
		t.Errorf("after a failed probe: %d commands sent, want none", n)
	}
	// Redis back (empty: no persistence): the next probe closes the
	// breaker, and Redis decides again.
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	expect(t, l, req("d", "a=1", 0), ok, want{ok, 4, 50 * time.Second})
	expect(t, l, req("d", "a=1", 0), ok, want{ok, 3, 50 * time.Second})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(transitions) != "[true false]" {
		t.Errorf("breaker transitions %v, want [true false]", transitions)
	}
}
