package adaptertest

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// The abuse table: what a client gets that sends requests in parallel,
// mints keys, picks its own cost or lies in a header. Every adapter runs it
// with the behaviour table ([Run]); README's security claims point here.

// invalidKey and invalidCost are the 400 refusals of caller errors.
var (
	invalidKey  = Want{Status: 400, Problem: httplimit.ProblemInvalidKey, NoRate: true}
	invalidCost = Want{Status: 400, Problem: httplimit.ProblemInvalidCost, NoRate: true}
)

// queryCost is a cost function that reads the "n" query parameter, as a
// careless API might: a client picks its own cost.
func queryCost(r keyfunc.Request) (int64, error) {
	s, err := r.Field("n")
	if err != nil || s == "" {
		return 1, err
	}
	return strconv.ParseInt(s, 10, 64)
}

// abuseParts are the abuse table's parts kept in files of their own, one
// attack family each; each file adds its part in an init function.
var abuseParts []func() []Case

// AbuseCases returns the abuse table, run by [Run] after [Cases]: the cases
// below and those of every part in abuseParts.
func AbuseCases() []Case {
	cases := abuseCases()
	for _, part := range abuseParts {
		cases = append(cases, part()...)
	}
	return cases
}

func abuseCases() []Case {
	cost := func(n string) Step {
		return Step{Req: Req{Path: "/items/1?n=" + n}}
	}
	withWant := func(s Step, w Want) Step { s.Want = w; return s }
	callerErrors := func(name string, f func(keyfunc.Request) (int64, error), ws ...Step) Case {
		return Case{
			Name: "abuse/" + name,
			App: func(t *testing.T, env *Env) *App {
				// Fail open, the default for an outage: a caller error must
				// still never be served.
				return use(env.Limiter(t, core.Policy{Name: "api", Limit: 1, Window: time.Minute}),
					opts(env, httplimit.WithCost(f))...)
			},
			Steps: ws,
		}
	}
	var emptyKey []Step
	for i := range 20 {
		emptyKey = append(emptyKey, Step{Want: with(invalidKey, hooks(i+1, 0))})
	}
	return []Case{
		{
			Name: "abuse/parallel guesses on a failures-only login",
			App: func(t *testing.T, env *Env) *App {
				l := env.Limiter(t, core.Policy{Name: "login", Algorithm: core.SlidingLog, Limit: 5, Window: 15 * time.Minute})
				return &App{Routes: []Route{{Method: "POST", Pattern: "/login", Limit: &Limit{Limiter: l, Options: []httplimit.Option{
					httplimit.WithKey(keyfunc.Email("email")),
					httplimit.WithCountIf(httplimit.Failures),
					httplimit.WithClock(env.Clock),
				}}}}}
			},
			Run: parallelGuesses,
		},
		{
			Name: "abuse/empty key refused, never served",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Name: "api", Limit: 1, Window: time.Minute}),
					opts(env, httplimit.WithKey(func(keyfunc.Request) (string, error) { return "", nil }))...)
			},
			Steps: emptyKey,
		},
		callerErrors("cost 0 refused", queryCost,
			withWant(cost("0"), with(invalidCost, hooks(1, 0))),
			withWant(cost("0"), with(invalidCost, hooks(2, 0))),
			withWant(cost("1"), with(ok, rate("api", 1, 60, 0, 60))),
			withWant(cost("0"), with(invalidCost, hooks(3, 0)))),
		callerErrors("negative cost refused", queryCost,
			withWant(cost("-1"), with(invalidCost, hooks(1, 0))),
			withWant(cost("1"), ok),
			withWant(cost("-1"), with(invalidCost, hooks(2, 0))),
			withWant(cost("1"), limited)),
		callerErrors("unparsable cost refused", queryCost,
			withWant(cost("1e3"), with(invalidCost, hooks(1, 0))),
			withWant(cost("%00"), with(invalidCost, hooks(2, 0)))),
		callerErrors("huge cost is too high, never served", queryCost,
			withWant(cost("9223372036854775807"), with(Want{Status: 429, Problem: httplimit.ProblemCostTooHigh, RetryAfter: "-", Hooks: true, Errors: 1}, rate("api", 1, 60, 1, 0))),
			withWant(cost("2"), with(Want{Status: 429, Problem: httplimit.ProblemCostTooHigh, RetryAfter: "-", Hooks: true, Errors: 2}, rate("api", 1, 60, 1, 0))),
			withWant(cost("1"), ok)),
		{
			Name: "abuse/cost function error refused under fail open",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, api), opts(env, httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 0, fmt.Errorf("%s", Secret) }))...)
			},
			Steps: steps(with(invalidCost, hooks(1, 0)), with(invalidCost, hooks(2, 0))),
		},
		{
			Name: "abuse/a key flood does not reset an exhausted key",
			App: func(t *testing.T, env *Env) *App {
				l, err := core.New(core.Policy{Name: "api", Limit: 100, Window: time.Minute},
					core.WithClock(env.Clock), core.WithMaxKeys(1000))
				if err != nil {
					t.Fatal(err)
				}
				ip, err := keyfunc.ClientIP(keyfunc.TrustProxies(netip.MustParsePrefix("192.0.2.0/24")))
				if err != nil {
					t.Fatal(err)
				}
				return use(l, httplimit.WithKey(ip), httplimit.WithCost(queryCost))
			},
			Run: keyFlood,
		},
		{
			Name: "abuse/stacked limiters list both policies",
			App: func(t *testing.T, env *Env) *App {
				app := use(env.Limiter(t, core.Policy{Name: "app", Limit: 10, Window: time.Minute}))
				app.Routes = []Route{{Method: "GET", Pattern: "/items/{id}", Limit: &Limit{
					Limiter: env.Limiter(t, core.Policy{Name: "route", Limit: 2, Window: time.Minute}),
				}}}
				return app
			},
			Steps: steps(
				with(ok, rates(Rate{"app", 10, 60, 9, 6}, Rate{"route", 2, 60, 1, 30})),
				with(ok, rates(Rate{"app", 10, 60, 8, 12}, Rate{"route", 2, 60, 0, 60})),
				with(limited, func(w *Want) {
					w.RetryAfter = "30"
					rates(Rate{"app", 10, 60, 7, 18}, Rate{"route", 2, 60, 0, 30})(w)
				}),
			),
		},
		{
			Name: "abuse/body bound set by WithMaxBodyBytes",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Name: "api", Limit: 1, Window: time.Minute}),
					httplimit.WithKey(keyfunc.Email("email")), httplimit.WithMaxBodyBytes(64))
			},
			Steps: []Step{
				{Req: Req{Method: "POST", Path: "/login", Body: `{"email":"ana@example.com","pad":"` + strings.Repeat("x", 40) + `"}`}, Want: with(invalidKey, func(w *Want) { w.NoRate = true })},
				{Req: Req{Method: "POST", Path: "/login", Body: `{"email":"ana@example.com"}`}, Want: ok},
				{Req: Req{Method: "POST", Path: "/login", Body: `{"email":"ana@example.com"}`}, Want: limited},
			},
		},
		{
			Name: "abuse/spoofed X-Forwarded-For from an untrusted peer is ignored",
			App: func(t *testing.T, env *Env) *App {
				ip, err := keyfunc.ClientIP(keyfunc.TrustProxies(netip.MustParsePrefix("192.0.2.0/24")))
				if err != nil {
					t.Fatal(err)
				}
				return use(env.Limiter(t, core.Policy{Name: "api", Limit: 1, Window: time.Minute}), httplimit.WithKey(ip))
			},
			Steps: []Step{
				// Through the trusted proxy, the rightmost untrusted address
				// is the client: what it prepends is ignored.
				{Req: Req{Peer: "192.0.2.9:1000", Header: map[string]string{"X-Forwarded-For": "203.0.113.1, 198.51.100.7"}}, Want: ok},
				{Req: Req{Peer: "192.0.2.9:1000", Header: map[string]string{"X-Forwarded-For": "203.0.113.2, 198.51.100.7"}}, Want: limited},
				// A client that is no proxy cannot name another client.
				{Req: Req{Peer: "198.51.100.8:1000", Header: map[string]string{"X-Forwarded-For": "203.0.113.3"}}, Want: ok},
				{Req: Req{Peer: "198.51.100.8:1000", Header: map[string]string{"X-Forwarded-For": "203.0.113.4"}}, Want: limited},
			},
		},
	}
}

// parallelGuesses sends 40 logins for one account at once, 39 with a wrong
// password and one right, while the handler is held as a slow password
// check would be: at most the limit's 5 may reach it, and every other one
// is refused with 429, the right password included.
func parallelGuesses(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response) {
	const guesses = 40
	app.gate = make(chan struct{})
	var answered sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var refused int64
	var done sync.Map
	for i := range guesses {
		status := "401"
		if i == guesses-1 {
			status = "200"
		}
		req, cancel := build(app, Req{Method: "POST", Path: "/login", Body: `{"email":"ana@example.com","password":"` + status + `"}`,
			Header: map[string]string{StatusHeader: status}}, "")
		answered.Go(func() {
			defer cancel()
			resp := serve(req)
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			if resp.StatusCode == http.StatusTooManyRequests {
				refused++
			}
			mu.Unlock()
			done.Store(i, true)
		})
	}
	// Wait until every guess is either answered or held in the handler,
	// then let the held ones finish.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := refused
		mu.Unlock()
		if n+app.inside.Load() >= guesses || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(app.gate)
	answered.Wait()
	if ran := app.calls.Load(); ran > 5 || statuses[http.StatusTooManyRequests] != guesses-int(ran) {
		t.Errorf("40 parallel guesses: the handler ran %d times (want at most 5), statuses %v", ran, statuses)
	}
}

// keyFlood: behind a trusted proxy, one client spends its whole bucket; 500
// others make one request each; a second later, when their buckets are full
// again, 700 new addresses arrive through a store of 1,000 keys. The
// exhausted client must still be refused.
func keyFlood(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response) {
	send := func(client string, n int) int {
		req, cancel := build(app, Req{Path: "/items/1?n=" + strconv.Itoa(n), Peer: "192.0.2.9:1000",
			Header: map[string]string{"X-Forwarded-For": client}}, "")
		defer cancel()
		resp := serve(req)
		resp.Body.Close()
		return resp.StatusCode
	}
	minted := func(i int) string { return fmt.Sprintf("198.18.%d.%d", i/250, i%250+1) }
	const abuser = "203.0.113.66"
	if s := send(abuser, 100); s != http.StatusOK {
		t.Fatalf("the abuser's first 100 units: status %d", s)
	}
	for i := range 500 {
		send(minted(i), 1)
	}
	env.Clock.Advance(time.Second)
	for i := 500; i < 1200; i++ {
		send(minted(i), 1)
	}
	if s := send(abuser, 90); s != http.StatusTooManyRequests {
		t.Errorf("after a flood of 1,200 new keys, the exhausted client spent 90 units again (status %d)", s)
	}
}
