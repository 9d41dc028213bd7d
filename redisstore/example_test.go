package redisstore_test

import (
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
	limiter, err := core.NewFailover(remote, core.Fallback(local),
		core.OnStoreError(func(err error) { log.Print(err) }))
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
