package rlservice

import (
	"context"
	"fmt"
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
