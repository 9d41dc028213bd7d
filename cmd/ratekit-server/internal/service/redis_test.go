package service

import (
	"testing"

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
