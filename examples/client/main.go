// Command client calls a rate-limited API from several workers that share
// one quota through Redis, the way a fleet of processes calling GitHub,
// Stripe or an LLM provider would, and prints what each waited:
//
//	go run ./examples/client   # Redis at 127.0.0.1:6379 (-redis to change)
//
// Without -url it starts a demo API on 127.0.0.1 limited by ratekit's
// middleware to -policy (default "10/1s": 10 a second, a burst of 10) and
// calls that. Each worker has its own Redis connection and
// clientlimit.Transport, as separate processes would; their limiters, on
// one Redis key with the server's policy, take a unit before each request,
// so the fleet stays within the server's limit and sees no 429s. Flags:
// -workers (default 4), -requests per worker (default 10), -url.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/clientlimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch err := run(ctx, os.Args[1:], os.Stdout); {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}

type settings struct {
	redis, url        string
	workers, requests int
	policy            core.Policy
}

func parseFlags(args []string, out io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.redis, "redis", "127.0.0.1:6379", "`address` of the Redis server holding the shared quota")
	fs.StringVar(&s.url, "url", "", "`URL` to call (default: a demo API started here, limited to -policy)")
	fs.IntVar(&s.workers, "workers", 4, "number of workers")
	fs.IntVar(&s.requests, "requests", 10, "requests per worker")
	policy := fs.String("policy", "10/1s", "the shared quota (and the demo API's limit)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if s.workers < 1 || s.requests < 1 {
		return s, fmt.Errorf("-workers and -requests must be at least 1")
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

func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1, // a retried script could count a unit twice
		ContextTimeoutEnabled: true,
		DialTimeout:           200 * time.Millisecond,
	})
}

// run calls the API from the workers and prints a line per worker and a
// total.
func run(ctx context.Context, args []string, out io.Writer) error {
	s, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	probe := newClient(s.redis)
	ping, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = probe.Ping(ping).Err()
	cancel()
	probe.Close()
	if err != nil {
		return fmt.Errorf("no Redis at %s (start one with redis-server, or pass -redis): %w", s.redis, err)
	}
	url := s.url
	if url == "" {
		stop, addr, err := serveDemo(s.policy)
		if err != nil {
			return err
		}
		defer stop()
		url = "http://" + addr + "/"
		fmt.Fprintf(out, "demo API on %s, limited to %v\n", url, s.policy)
	}
	var wg sync.WaitGroup
	var denied atomic.Int64
	lines := make([]string, s.workers)
	errs := make([]error, s.workers)
	start := time.Now()
	for w := range s.workers {
		rc := newClient(s.redis)
		defer rc.Close()
		quota, err := redisstore.New(rc, s.policy, redisstore.WithPrefix("example-client"))
		if err != nil {
			return err
		}
		tr, err := clientlimit.New(nil, clientlimit.WithLimiter(quota))
		if err != nil {
			return err
		}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: time.Minute}
		wg.Go(func() {
			statuses := map[int]int{}
			for range s.requests {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				res, err := client.Do(req)
				if err != nil {
					errs[w] = err
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				statuses[res.StatusCode]++
			}
			st := tr.Stats()
			denied.Add(int64(statuses[http.StatusTooManyRequests]))
			lines[w] = fmt.Sprintf("worker %d: %d requests, %d OK, %d refused; waited %d times, %v in all",
				w+1, s.requests, statuses[http.StatusOK], statuses[http.StatusTooManyRequests], st.Waits, st.WaitTime.Round(time.Millisecond))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
	fmt.Fprintf(out, "%d requests in %v, %d answered 429\n", s.workers*s.requests, time.Since(start).Round(100*time.Millisecond), denied.Load())
	return nil
}

// serveDemo starts an API on a free 127.0.0.1 port limited to p by
// ratekit's middleware, in memory: the server's own count, apart from the
// clients' quota in Redis.
func serveDemo(p core.Policy) (stop func(), addr string, err error) {
	limiter, err := core.New(p)
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") })
	srv := &http.Server{Handler: httplimit.Middleware(limiter)(hello), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return func() { srv.Close() }, ln.Addr().String(), nil
}
