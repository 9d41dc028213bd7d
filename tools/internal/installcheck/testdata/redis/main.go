// A net/http server limited on Redis by redisstore, falling back to a
// memory limiter while Redis is down, with a global limit shared across
// regions by redisstore/region; built outside the repository.
//
// go get github.com/ratekit/ratekit/redisstore@latest
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/region"
)

func main() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	policy := core.Policy{Name: "api", Limit: 100, Window: time.Minute}
	remote, err := redisstore.New(client, policy, redisstore.WithTimeout(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	local, err := core.New(core.Policy{Name: "api", Limit: policy.Limit / 4, Window: policy.Window})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewFailover(remote, core.WithErrorPolicy(core.Fallback(local)))
	if err != nil {
		log.Fatal(err)
	}
	global, err := region.New(client, client, core.Policy{Name: "global", Limit: 1000, Window: time.Minute}, "eu", []string{"eu", "us"})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/hello", httplimit.Middleware(limiter)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("hello"))
	})))
	mux.Handle("/global", httplimit.Middleware(global)(http.NotFoundHandler()))
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
