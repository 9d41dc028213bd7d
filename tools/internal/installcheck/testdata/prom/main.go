// A limiter whose decisions are counted in Prometheus metrics by
// ratekitprom and served on /metrics; built outside the repository.
//
// go get github.com/ratekit/ratekit/ratekitprom@latest
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/ratekitprom"
)

func main() {
	metrics, err := ratekitprom.New(prometheus.DefaultRegisterer)
	if err != nil {
		log.Fatal(err)
	}
	api, err := core.New(core.Policy{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := observe.New(api, metrics)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	mux.Handle("/hello", httplimit.Middleware(limiter)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("hello"))
	})))
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
