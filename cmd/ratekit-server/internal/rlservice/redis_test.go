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
