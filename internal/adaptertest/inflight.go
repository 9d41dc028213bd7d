package adaptertest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
)

func init() { abuseParts = append(abuseParts, inFlightCases) }

// leases is an in-flight limiter that counts the leases it gives and gets
// back, and records the key of the last.
type leases struct {
	inflight.Limiter
	acquired, released atomic.Int64
	key                atomic.Pointer[string]
}

func (l *leases) Acquire(ctx context.Context, key string) (inflight.Decision, error) {
	d, err := l.Limiter.Acquire(ctx, key)
	if d.Allowed {
		l.acquired.Add(1)
		l.key.Store(&key)
	}
	return d, err
}

func (l *leases) Release(ctx context.Context, lease inflight.Lease) error {
	l.released.Add(1)
	return l.Limiter.Release(ctx, lease)
}

// balanced fails t unless every lease given was given back, and want were
// given.
func (l *leases) balanced(t *testing.T, want int64) {
	t.Helper()
	if a, r := l.acquired.Load(), l.released.Load(); a != want || r != a {
		t.Errorf("leases: %d acquired, %d released; want %d and %d", a, r, want, want)
	}
}

func newLeases(t *testing.T, env *Env, n int64) *leases {
	t.Helper()
	m, err := inflight.New(n, inflight.WithClock(env.Clock))
	if err != nil {
		t.Fatal(err)
	}
	return &leases{Limiter: m}
}

// failingInFlight is an in-flight limiter whose store is down.
type failingInFlight struct{}

func (failingInFlight) Acquire(context.Context, string) (inflight.Decision, error) {
	return inflight.Decision{}, errFailing
}
func (failingInFlight) Release(context.Context, inflight.Lease) error { return errFailing }

// inFlightCap is the cap of the concurrent case.
const inFlightCap = 3

func inFlightCases() []Case {
	var (
		held     *leases // the case's leases, set by its App
		rateLim  core.Limiter
		ok       = Want{Status: 200, Called: true}
		rateDeny = Want{Status: 429, Problem: httplimit.ProblemRateLimited}
	)
	minute := func(n int64) core.Policy { return core.Policy{Limit: n, Window: time.Minute} }
	return []Case{
		{
			// N+1 requests of one key at once, the handler held: exactly N
			// run, the other gets 429 ProblemInFlight with Retry-After 1,
			// and the held limit counted the N only.
			Name: "inflight/n+1 concurrent requests get n",
			App: func(t *testing.T, env *Env) *App {
				held, rateLim = newLeases(t, env, inFlightCap), env.Limiter(t, minute(100))
				return &App{Use: &Limit{Limiter: rateLim, Options: []httplimit.Option{httplimit.WithInFlight(held)}}}
			},
			Run: func(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response) {
				app.gate = make(chan struct{})
				app.entered = make(chan struct{}, inFlightCap+1)
				type answer struct {
					status  int
					retry   string
					body    []byte
					problem bool
				}
				answers := make(chan answer, inFlightCap+1)
				var wg sync.WaitGroup
				for range inFlightCap + 1 {
					req, cancel := build(app, Req{}, "")
					wg.Go(func() {
						defer cancel()
						resp := serve(req)
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), body, resp.Header.Get("Content-Type") == httplimit.ContentTypeProblem}
					})
				}
				// Every request either reaches the handler or is answered
				// while the others are held there.
				entered, early := 0, []answer{}
				for entered+len(early) < inFlightCap+1 {
					select {
					case <-app.entered:
						entered++
					case a := <-answers:
						early = append(early, a)
					}
				}
				close(app.gate)
				wg.Wait()
				close(answers)
				if entered != inFlightCap || len(early) != 1 {
					t.Fatalf("%d of %d concurrent requests reached the handler, %d answered while they ran; want %d and 1", entered, inFlightCap+1, len(early), inFlightCap)
				}
				if a := early[0]; a.status != 429 || a.retry != "1" || !a.problem || !strings.Contains(string(a.body), httplimit.ProblemInFlight) {
					t.Errorf("refused request: %d, Retry-After %q, body %s; want 429 %s, Retry-After 1", a.status, a.retry, a.body, httplimit.ProblemInFlight)
				}
				for a := range answers {
					if a.status != 200 {
						t.Errorf("held request answered %d, want 200", a.status)
					}
				}
				held.balanced(t, inFlightCap)
				if d, err := rateLim.Peek(context.Background(), *held.key.Load(), 1); err != nil || d.Remaining != 100-inFlightCap {
					t.Errorf("held limit: %d remaining (%v), want %d: the refused request counted nothing", d.Remaining, err, 100-inFlightCap)
				}
			},
		},
		{
			// A request the held limit refuses gives its lease back.
			Name: "inflight/rate-limited request holds no lease",
			App: func(t *testing.T, env *Env) *App {
				held = newLeases(t, env, 1)
				return &App{Use: &Limit{Limiter: env.Limiter(t, minute(1)), Options: []httplimit.Option{httplimit.WithInFlight(held)}}}
			},
			Steps: []Step{{Want: ok}, {Want: rateDeny}, {Want: rateDeny}},
			Run: func(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response) {
				held.balanced(t, 3)
			},
		},
		{
			// A limit further down that refuses the request gives back the
			// lease of the limit around it.
			Name: "inflight/inner limit refuses: outer lease given back",
			App: func(t *testing.T, env *Env) *App {
				held = newLeases(t, env, 1)
				routes := DefaultRoutes()
				route := minute(1)
				route.Name = "route"
				routes[0].Limit = &Limit{Limiter: env.Limiter(t, route)}
				return &App{
					Use:    &Limit{Limiter: env.Limiter(t, core.Policy{Name: "app", Limit: 100, Window: time.Minute}), Options: []httplimit.Option{httplimit.WithInFlight(held)}},
					Routes: routes,
				}
			},
			Steps: []Step{{Want: ok}, {Want: rateDeny}},
			Run: func(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response) {
				held.balanced(t, 2)
			},
		},
		{
			Name: "inflight/store down, fail open: served",
			App: func(t *testing.T, env *Env) *App {
				opts := append(env.Hooks(), httplimit.WithInFlight(failingInFlight{}))
				return &App{Use: &Limit{Limiter: env.Limiter(t, minute(100)), Options: opts}}
			},
			Steps: []Step{{Want: Want{Status: 200, Called: true, Hooks: true, Errors: 1}}},
		},
		{
			Name: "inflight/store down, fail closed: 503",
			App: func(t *testing.T, env *Env) *App {
				opts := append(env.Hooks(), httplimit.WithInFlight(failingInFlight{}), httplimit.WithErrorPolicy(core.FailClosed()))
				return &App{Use: &Limit{Limiter: env.Limiter(t, minute(100)), Options: opts}}
			},
			Steps: []Step{{Want: Want{Status: 503, Problem: httplimit.ProblemUnavailable, RetryAfter: "1", NoRate: true, Hooks: true, Errors: 1}}},
		},
	}
}
