// Command rules serves a small API whose limits are configuration: the
// rules in rules.yaml, beside this file, reloaded while the server runs.
//
//	cd examples/rules && go run .    # serve on 127.0.0.1:8080 (-addr to change)
//	go run ./examples/rules -rules examples/rules/rules.yaml   # the same, from the repository
//
// The file holds four rules; the first that matches a request applies:
//
//   - POST /login: 5 per minute per account (the form's username, an
//     email: "Ana@Example.com " is "ana@example.com"), as a sliding log,
//     and 20 per minute per client IP, both at once.
//   - /api/*: per API key (X-Api-Key), by the key's plan: free 60 and pro
//     1,000 per minute. The demo keys are demo-free and demo-pro.
//   - anything else, an unknown API key included: 100 per minute per IP.
//
// Try it:
//
//	for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code} ' -d 'username=ana@example.com&password=x' http://127.0.0.1:8080/login; done
//	curl -i -H 'X-Api-Key: demo-free' http://127.0.0.1:8080/api/items
//
// The sixth login gets 429, with Retry-After, the RateLimit headers and a
// problem+json body naming per-account. Edit rules.yaml (raise free to
// 120/1m, say) and save it, or send the process SIGHUP: the server logs the
// reload, and every key keeps what it has used. A file that does not
// validate is logged with its line and column, and the rules in force stay.
//
// The client IP is the socket peer. Behind a proxy or load balancer, list
// it in the file's trusted_proxies.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/rules"
)

// apiKeys are the demo API keys and their plans. A real server finds a
// key's plan in its account store: never in a header the client writes.
var apiKeys = map[string]string{
	"demo-free": "free",
	"demo-pro":  "pro",
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch err := run(ctx, os.Args[1:], os.Stderr); {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, err) // the rules package's errors name it
		os.Exit(1)
	}
}

// run serves until ctx is done.
func run(ctx context.Context, args []string, logw io.Writer) error {
	flags := flag.NewFlagSet("rules", flag.ContinueOnError)
	flags.SetOutput(logw)
	addr := flags.String("addr", "127.0.0.1:8080", "listen `address`")
	path := flags.String("rules", "rules.yaml", "the rule `file`")
	if err := flags.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx) // the watch ends with run
	defer cancel()
	logger := log.New(logw, "", log.LstdFlags)
	s, err := newServer(*path, core.SystemClock{}, func(err error) {
		logger.Printf("%v (the rules in force stay)", err)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (run it in examples/rules, or give -rules)", err)
	}
	if err != nil {
		return err // names the file, line, column and field
	}
	defer s.limiter.Close()
	s.source.OnReload(func(_, _ *rules.Set) {
		if err := s.limiter.Err(); err != nil {
			logger.Printf("%s: %v", *path, err)
			return
		}
		logger.Printf("%s reloaded", *path)
	})
	go func() {
		if err := s.source.Watch(ctx); err != nil {
			logger.Printf("%v (no more reloads)", err)
		}
	}()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	logger.Printf("listening on http://%s (rules: %s; API keys: demo-free, demo-pro)", ln.Addr(), *path)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// server is the API behind the limiter that enforces the rule file.
type server struct {
	http.Handler
	source  *rules.Source  // the file's rules; run its Watch to reload them
	limiter *rules.Limiter // enforces the source's rules, following its reloads
}

// newServer reads the rule file at path and returns the API limited by
// it, its limiters reading clock; a reload that fails goes to onError.
func newServer(path string, clock core.Clock, onError func(error)) (*server, error) {
	src, err := rules.Open(path,
		rules.WithPlan(plan),
		rules.WithSignal(syscall.SIGHUP),
		rules.WithErrorHook(onError),
	)
	if err != nil {
		return nil, err
	}
	lim, err := rules.NewLimiter(src, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", login)
	mux.HandleFunc("GET /api/items", items)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") })
	// Around the mux, the limiter sees the route the mux will match.
	h := httplimit.Middleware(lim,
		httplimit.WithClock(clock),
		httplimit.WithMaxBodyBytes(4<<10), // a login form is small
	)(mux)
	return &server{Handler: h, source: src, limiter: lim}, nil
}

// plan returns the plan of the request's API key, which the rules' match
// plans compare; "" for a missing or unknown key, which no plan matches.
func plan(r keyfunc.Request) (string, error) {
	if key := r.Header("X-Api-Key"); len(key) > 0 {
		return apiKeys[key[0]], nil
	}
	return "", nil
}

// login stands for a real login handler, which checks the password here
// (examples/login shows one that counts failures only).
func login(w http.ResponseWriter, r *http.Request) {
	if r.PostFormValue("username") == "" || r.PostFormValue("password") == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "username and password are required"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "checked"})
}

func items(w http.ResponseWriter, r *http.Request) {
	plan, ok := apiKeys[r.Header.Get("X-Api-Key")]
	if !ok {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a valid X-Api-Key is required"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"plan": plan, "items": []string{"first", "second"}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("write: %v", err)
	}
}
