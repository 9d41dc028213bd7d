// Command gin serves a small gin API limited by ratekit, with its metrics:
//
//	go run ./examples/gin                        # listens on 127.0.0.1:8080
//	go run ./examples/gin -addr 127.0.0.1:9090 -log-level debug
//
// Every route is limited per client IP by the policy "api", 10 requests a
// minute, except two: /export has a stricter limiter of its own ("export",
// 2 a minute) and /metrics is not limited. Next to "api", a candidate
// policy "api-v2" (5 a minute) runs in shadow mode: it decides every
// request but enforces nothing, and /metrics counts what it would have
// denied. Try:
//
//	curl -i http://127.0.0.1:8080/hello          # RateLimit-Policy and RateLimit headers
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/hello; done
//	curl -i http://127.0.0.1:8080/export         # 429 with Retry-After on the third
//	curl -s http://127.0.0.1:8080/metrics | grep '^ratekit_'
//
// Denials are logged at debug, with the key hashed (observe.KeyHash; salt it
// with -log-salt), store errors and breaker transitions at warn.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/ratekitprom"
)

// The policies: "api" is enforced on every route but /export and /metrics,
// "api-v2" is its shadow candidate, "export" guards /export alone.
var (
	apiPolicy    = core.Policy{Name: "api", Limit: 10, Window: time.Minute}
	apiV2Policy  = core.Policy{Name: "api-v2", Limit: 5, Window: time.Minute}
	exportPolicy = core.Policy{Name: "export", Limit: 2, Window: time.Minute}
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	level := flag.String("log-level", "info", "log level: debug, info, warn or error")
	salt := flag.String("log-salt", "", "salt of the key hashes in the logs (default: none, a plain SHA-256)")
	flag.Parse()
	if err := run(*addr, *level, *salt); err != nil {
		fmt.Fprintln(os.Stderr, "gin example:", err)
		os.Exit(1)
	}
}

func run(addr, level, salt string) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	gin.SetMode(gin.ReleaseMode)
	h, err := newServer(config{clock: core.SystemClock{}, logger: logger, salt: []byte(salt)})
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	logger.Info("listening", "addr", "http://"+addr, "metrics", "http://"+addr+"/metrics")
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// config is what differs between main and the tests.
type config struct {
	clock  core.Clock
	logger *slog.Logger
	salt   []byte
}

// newServer returns the API with its limiters, observed by a Prometheus
// registry of its own (served at /metrics) and by the logger.
func newServer(c config) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	metrics, err := ratekitprom.New(reg)
	if err != nil {
		return nil, err
	}
	obs := observe.Observers(metrics, observe.NewSlog(c.logger, c.salt))
	// Events carry the raw key for the logger, which logs only its hash;
	// the metrics never see a key.
	obsOpts := []observe.Option{observe.WithClock(c.clock), observe.WithRawKey()}

	api, err := core.New(apiPolicy, core.WithClock(c.clock))
	if err != nil {
		return nil, err
	}
	apiV2, err := core.New(apiV2Policy, core.WithClock(c.clock))
	if err != nil {
		return nil, err
	}
	export, err := core.New(exportPolicy, core.WithClock(c.clock))
	if err != nil {
		return nil, err
	}
	// observe.New reports what "api" did; the shadow enforces it and reports
	// what "api-v2" would have done.
	observedAPI, err := observe.New(api, obs, obsOpts...)
	if err != nil {
		return nil, err
	}
	apiLimiter, err := observe.NewShadow(observedAPI, apiV2, obs, obsOpts...)
	if err != nil {
		return nil, err
	}
	exportLimiter, err := observe.New(export, obs, obsOpts...)
	if err != nil {
		return nil, err
	}
	for name, m := range map[string]*core.Memory{"api": api, "api-v2": apiV2, "export": export} {
		if err := metrics.WatchMemory(name, m); err != nil {
			return nil, err
		}
	}

	own := func(r keyfunc.Request) bool { return r.Route() == "/metrics" || r.Route() == "/export" }
	r := gin.New()
	r.Use(gin.Recovery(), ginlimit.New(apiLimiter, httplimit.WithSkip(own)))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	r.GET("/items/:id", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"id": c.Param("id")}) })
	r.GET("/export", ginlimit.New(exportLimiter), func(c *gin.Context) {
		c.String(http.StatusOK, "id,name\n1,ana\n")
	})
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	return r, nil
}
