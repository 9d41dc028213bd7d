package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// One limit shared by every server: 100 requests a minute per client IP,
// counted in Redis, with a local quarter of the limit while Redis is down.
// (No Output: it needs a Redis server.)
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "redis.internal:6379",
		MaxRetries:            -1,   // a retried script could count twice
		ContextTimeoutEnabled: true, // honour the request's deadline
		ReadTimeout:           100 * time.Millisecond,
	})
	policy := core.Policy{Limit: 100, Window: time.Minute}
	remote, err := redisstore.New(client, policy, redisstore.WithTimeout(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	local, _ := core.New(core.Policy{Limit: policy.Limit / 4, Window: policy.Window})
	limiter, err := core.NewFailover(remote, core.WithErrorPolicy(core.Fallback(local)),
		core.WithErrorHook(func(err error) { log.Print(err) }))
	if err != nil {
		log.Fatal(err)
	}

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d, err := limiter.Allow(r.Context(), r.RemoteAddr)
		if err != nil || !d.Allowed {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("hello"))
	})
}

// Two limits on every request, 10 a second and 1,000 a day per API key,
// checked in one script: a request denied by either counts in neither.
// While Redis is down, a layered local fallback keeps both limits, each a
// quarter of the shared one. (No Output: it needs a Redis server.)
func ExampleNewLayered() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "redis.internal:6379",
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	burst := core.Policy{Name: "burst", Limit: 10, Window: time.Second}
	daily := core.Policy{Name: "daily", Algorithm: core.FixedWindow, Limit: 1000, Window: 24 * time.Hour}
	remote, err := redisstore.NewLayered(client, []core.Policy{burst, daily}, redisstore.WithTimeout(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	localBurst, _ := core.New(core.Policy{Name: "burst", Limit: burst.Limit / 4, Window: burst.Window})
	localDaily, _ := core.New(core.Policy{Name: "daily", Algorithm: core.FixedWindow, Limit: daily.Limit / 4, Window: daily.Window})
	local, _ := core.NewLayered(localBurst, localDaily)
	limiter, err := core.NewFailover(remote, core.WithErrorPolicy(core.Fallback(local)))
	if err != nil {
		log.Fatal(err)
	}

	d, err := limiter.AllowLayers(context.Background(), "api-key-1", 1)
	if err != nil {
		log.Fatal(err)
	}
	for _, layer := range d.Layers {
		fmt.Printf("%s: allowed %v, %d left\n", layer.Policy.Name, layer.Allowed, layer.Remaining)
	}
}
