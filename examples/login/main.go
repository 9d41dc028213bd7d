// Command login serves POST /login protected by a [guard.Guard]: every
// attempt is counted per account and per client IP before its password is
// checked (so parallel guesses cannot all pass), a success gives its
// attempt back and clears the account's count, and an account that keeps
// failing is locked for longer each time.
//
//	go run ./examples/login                        # counts in this process
//	go run ./examples/login -redis 127.0.0.1:6379  # counts in Redis (or RATEKIT_REDIS=...)
//
// Then, with a demo user (the program lists them when it starts):
//
//	curl -i -d 'email=ana@example.com&password=wrong' http://127.0.0.1:8080/login
//	curl -i -H 'Content-Type: application/json' \
//		-d '{"email":"Ana@Example.com","password":"ana-secret"}' http://127.0.0.1:8080/login
//
// The body is read as a form or as JSON whatever its Content-Type claims
// (keyfunc.Email and Request.Field), so a JSON login sent as text/plain is
// the same account's attempt.
//
// Responses: 200 on success; 401 with one body for a wrong password and for
// an unknown email alike; 429 with Retry-After and a problem+json body
// while a limit blocks the attempt; 400 for a missing or malformed email or
// a missing password. The per-account counts never appear in a response
// header: they are another user's business.
//
// The client IP is the socket peer (keyfunc.PeerIP). Behind a proxy or
// load balancer use keyfunc.ClientIP with keyfunc.TrustProxies instead, or
// every client shares the proxy's count.
package main

import (
	"bytes"
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/redisstore"
)

// demoUsers are the accounts the program knows, by email and password.
var demoUsers = map[string]string{
	"ana@example.com":   "ana-secret",
	"bob@example.com":   "bob-secret",
	"carol@example.com": "carol-secret",
}

// iterations is the PBKDF2-HMAC-SHA256 work factor OWASP recommends
// (2023): about 0.1 s per login on a small server. The Guard refuses a
// blocked attempt before any hashing, so a flood of guesses costs no CPU.
// Tests lower it.
var iterations = 600_000

// maxBodyBytes bounds the login body read.
const maxBodyBytes = 4 << 10

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "login:", err)
		os.Exit(1)
	}
}

// settings are the command line's.
type settings struct {
	addr  string // listen address
	redis string // Redis address, or "" for the memory store
}

// parseFlags reads -addr and -redis; -redis defaults to $RATEKIT_REDIS.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("login", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.addr, "addr", "127.0.0.1:8080", "listen `address`")
	fs.StringVar(&s.redis, "redis", getenv("RATEKIT_REDIS"), "Redis `address` holding the counts (default $RATEKIT_REDIS; none: in memory)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return s, nil
}

// run serves until ctx is done.
func run(ctx context.Context, args []string, getenv func(string) string, logw io.Writer) error {
	s, err := parseFlags(args, getenv, logw)
	if err != nil {
		return err
	}
	logger := log.New(logw, "login: ", log.LstdFlags)
	cfg := config{users: demoUsers, iterations: iterations, logf: logger.Printf}
	store := "memory"
	if s.redis != "" {
		client := redis.NewClient(&redis.Options{
			Addr:                  s.redis,
			MaxRetries:            -1, // a retried script could count a failure twice
			ContextTimeoutEnabled: true,
			DialTimeout:           200 * time.Millisecond,
		})
		defer client.Close()
		cfg.newLimiter = redisLimiters(client, logger.Printf)
		store = "Redis at " + s.redis
	}
	h, err := newServer(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	logger.Printf("counts in %s; demo users: %s", store, userList(demoUsers))
	logger.Printf("listening on http://%s/login", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// redisLimiters builds the Guard's limiters on Redis, shared by every
// server. A login fails closed: while Redis is unreachable, attempts are
// refused (503) rather than let through uncounted.
func redisLimiters(client redis.UniversalClient, logf func(format string, args ...any)) func(core.Policy) (core.Limiter, error) {
	return func(p core.Policy) (core.Limiter, error) {
		l, err := redisstore.New(client, p, redisstore.WithPrefix("login-example"), redisstore.WithTimeout(100*time.Millisecond))
		if err != nil {
			return nil, err
		}
		return core.NewFailover(l, core.WithErrorPolicy(core.FailClosed()), core.WithErrorHook(func(err error) { logf("%s: %v", p.Name, err) }))
	}
}

func userList(users map[string]string) string {
	var b bytes.Buffer
	for i, email := range slices.Sorted(maps.Keys(users)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s / %s", email, users[email])
	}
	return b.String()
}

// config is what newServer needs; tests pass a manual clock through
// newLimiter and a low work factor.
type config struct {
	// newLimiter builds the Guard's limiters. Default: memory limiters on
	// the system clock.
	newLimiter func(core.Policy) (core.Limiter, error)
	// users maps emails to passwords.
	users map[string]string
	// iterations is the PBKDF2 work factor.
	iterations int
	// logf logs store errors. Default: none.
	logf func(format string, args ...any)
	// clock is the limiters' clock, which the Guard reads to give back a
	// successful attempt exactly. Default: the system clock.
	clock core.Clock
}

type server struct {
	guard      *guard.Guard
	users      map[string]credential // by normalized email
	unknown    credential            // checked for unknown emails, so they take as long
	iterations int
	email      keyfunc.Func
	logf       func(format string, args ...any)
}

// credential is a salted PBKDF2 hash of a password.
type credential struct {
	salt []byte
	hash []byte
}

func newCredential(password string, iterations int) (credential, error) {
	c := credential{salt: make([]byte, 16)}
	rand.Read(c.salt)
	var err error
	c.hash, err = pbkdf2.Key(sha256.New, password, c.salt, iterations, sha256.Size)
	return c, err
}

// matches reports whether password is the credential's, taking the same
// time whatever the answer.
func (c credential) matches(password string, iterations int) bool {
	h, err := pbkdf2.Key(sha256.New, password, c.salt, iterations, sha256.Size)
	return err == nil && subtle.ConstantTimeCompare(h, c.hash) == 1
}

// newServer returns the login handler: POST /login.
func newServer(cfg config) (http.Handler, error) {
	if cfg.newLimiter == nil {
		cfg.newLimiter = func(p core.Policy) (core.Limiter, error) { return core.New(p) }
	}
	if cfg.logf == nil {
		cfg.logf = func(string, ...any) {}
	}
	if cfg.clock == nil {
		cfg.clock = core.SystemClock{}
	}
	g, err := guard.New(cfg.newLimiter,
		guard.WithLockout(time.Minute, time.Hour), // 5 failures per 15 minutes, then 1m, 2m, 4m … 1h locks
		guard.WithClock(cfg.clock),
	)
	if err != nil {
		return nil, err
	}
	s := &server{
		guard:      g,
		users:      make(map[string]credential, len(cfg.users)),
		iterations: cfg.iterations,
		email:      keyfunc.Email("email"),
		logf:       cfg.logf,
	}
	for email, password := range cfg.users {
		account, err := keyfunc.NormalizeEmail(email)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", email, err)
		}
		if s.users[account], err = newCredential(password, cfg.iterations); err != nil {
			return nil, err
		}
	}
	random := make([]byte, 16)
	rand.Read(random)
	if s.unknown, err = newCredential(string(random), cfg.iterations); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", s.login)
	return mux, nil
}

// Response bodies. A wrong password and an unknown email get the same one.
var (
	bodyOK          = func(account string) any { return map[string]string{"signed_in": account} }
	bodyBadRequest  = map[string]string{"error": "a valid email and a password are required"}
	bodyInvalid     = map[string]string{"error": "invalid email or password"}
	bodyUnavailable = map[string]string{"error": "login is unavailable, try again later"}
)

// loginPolicy names the refusal in the 429 body, whichever limit refused:
// which one it was is the Guard's business.
var loginPolicy = core.Policy{Name: "login"}

func (s *server) login(w http.ResponseWriter, r *http.Request) {
	req := keyfunc.FromHTTP(r, keyfunc.MaxBodyBytes(maxBodyBytes))
	account, err := s.email(req) // " Ana@Example.COM " is "ana@example.com"
	if err != nil {
		writeJSON(w, http.StatusBadRequest, bodyBadRequest)
		return
	}
	password, err := req.Field("password")
	if err != nil || password == "" {
		writeJSON(w, http.StatusBadRequest, bodyBadRequest)
		return
	}
	ip, err := keyfunc.PeerIP(req)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, bodyBadRequest)
		return
	}

	d, err := s.guard.Check(r.Context(), account, ip) // counts the attempt
	if err != nil {
		s.logf("check: %v", err)
		writeJSON(w, http.StatusServiceUnavailable, bodyUnavailable)
		return
	}
	if !d.Allowed {
		httplimit.WriteDenied(w, core.Decision{RetryAfter: d.RetryAfter, Policy: loginPolicy})
		return
	}

	// The outcome is recorded even if the client hangs up meanwhile.
	ctx := context.WithoutCancel(r.Context())
	c, known := s.users[account]
	if !known {
		c = s.unknown // the same work, and never a match
	}
	if !c.matches(password, s.iterations) || !known {
		if err := s.guard.Fail(ctx, d); err != nil {
			s.logf("fail: %v", err)
		}
		writeJSON(w, http.StatusUnauthorized, bodyInvalid)
		return
	}
	if err := s.guard.Succeed(ctx, d); err != nil {
		s.logf("succeed: %v", err)
	}
	// A real application starts a session here.
	writeJSON(w, http.StatusOK, bodyOK(account))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
