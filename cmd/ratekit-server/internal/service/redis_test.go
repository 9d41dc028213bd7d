package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redis/go-redis/v9"

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
	l, err := New(mustConfig(t, testConfig), Options{Redis: c})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ShouldRateLimit(context.Background(), req("d", "a=1;b=1", 0)); status.Code(err) != codes.Unavailable {
		t.Errorf("Redis down: %v, want Unavailable", err)
	}
}
