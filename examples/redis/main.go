// Command redis serves an API whose limit is counted in Redis, so that
// every server running it enforces one shared count: two servers with a
// limit of 100 a minute let a client through 100 times a minute in all, not
// 200.
//
//	go run ./examples/redis -addr 127.0.0.1:8081 &   # Redis at 127.0.0.1:6379 (-redis to change)
//	go run ./examples/redis -addr 127.0.0.1:8082 &
//	for i in $(seq 150); do
//		curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:808$((i % 2 + 1))/hello
//	done | sort | uniq -c
//
// prints 100 200s and 50 429s. Flags: -addr (default 127.0.0.1:8080), -redis,
// the Redis server's address (default 127.0.0.1:6379), and -policy (default
// "100/1m algorithm=sliding-log": at most 100 in any minute, exactly, as
// [core.ParsePolicy] reads it). Requests are limited per client
// IP (the socket peer). Time is Redis's own (its TIME command), so servers
// with skewed clocks still agree. While Redis is unreachable requests are
// refused with 503 (core.FailClosed) and the error is logged; the
// program does not start when Redis does not answer.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/chilimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch err := run(ctx, os.Args[1:], os.Stderr, nil); {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "redis:", err)
		os.Exit(1)
	}
}

// defaultPolicy is -policy's default: 100 a minute, as a sliding log, so
// that the demo's count is exact however long the curl loop takes (a
// token bucket would refill one request every 600ms meanwhile).
const defaultPolicy = "100/1m algorithm=sliding-log"

// settings are the command line's.
type settings struct {
	addr, redis string
	policy      core.Policy
}

func parseFlags(args []string, out io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("redis", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.addr, "addr", "127.0.0.1:8080", "listen `address`")
	fs.StringVar(&s.redis, "redis", "127.0.0.1:6379", "`address` of the Redis server holding the counts")
	policy := fs.String("policy", defaultPolicy, "the `policy` every server enforces together")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	p, err := core.ParsePolicy(*policy)
	if err != nil {
		return s, err
	}
	if p.Name == "" {
		p.Name = "api"
	}
	s.policy = p
	return s, nil
}

// newClient returns a Redis client with the settings the README
// recommends: no retries (a retried script could count a request twice),
// and the request's deadline bounding every call.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           200 * time.Millisecond,
		ReadTimeout:           200 * time.Millisecond,
		WriteTimeout:          200 * time.Millisecond,
	})
}

// run serves until ctx is done. It logs to logw, and calls ready, when not
// nil, with the address it listens on.
func run(ctx context.Context, args []string, logw io.Writer, ready func(addr string)) error {
	s, err := parseFlags(args, logw)
	if err != nil {
		return err
	}
	client := newClient(s.redis)
	defer client.Close()
	ping, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = client.Ping(ping).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("no Redis at %s (start one with redis-server, or pass -redis): %w", s.redis, err)
	}
	limiter, err := redisstore.New(client, s.policy, redisstore.WithTimeout(100*time.Millisecond))
	if err != nil {
		return err
	}
	logger := log.New(logw, "redis: ", log.LstdFlags|log.Lmsgprefix)
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newServer(limiter, ln.Addr().String(), logger.Printf), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	unnamed := s.policy
	unnamed.Name = ""
	logger.Printf("%v per client IP, counted in Redis at %s with every other server; listening on http://%s/hello", unnamed, s.redis, ln.Addr())
	if ready != nil {
		ready(ln.Addr().String())
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newServer returns the API limited by l: GET /hello answers which server
// served it, so that a client sees both servers share one count.
func newServer(l core.Limiter, name string, logf func(format string, args ...any)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", name)
	})
	return chilimit.New(l,
		httplimit.WithErrorPolicy(core.FailClosed()),
		httplimit.WithErrorHook(func(_ keyfunc.Request, err error) { logf("limiter: %v", err) }),
	)(mux)
}
