package adaptertest

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// use returns a case's App: one middleware on every route.
func use(l core.Limiter, opts ...httplimit.Option) *App {
	return &App{Use: &Limit{Limiter: l, Options: opts}}
}

func opts(env *Env, more ...httplimit.Option) []httplimit.Option {
	return append(env.Hooks(), more...)
}

var (
	ok      = Want{Status: 200, Called: true}
	limited = Want{Status: 429, Problem: httplimit.ProblemRateLimited}
)

func with(w Want, f func(*Want)) Want { f(&w); return w }

func rate(name string, q, w, r, t int64) func(*Want) {
	return func(x *Want) { x.Rate = &Rate{Name: name, Q: q, W: w, R: r, T: t} }
}

func steps(ws ...Want) []Step {
	s := make([]Step, len(ws))
	for i, w := range ws {
		s[i].Want = w
	}
	return s
}

func hooks(errs, dry int) func(*Want) {
	return func(w *Want) { w.Hooks, w.Errors, w.DryRuns = true, errs, dry }
}

func header(kv ...string) func(*Want) {
	return func(w *Want) {
		w.Header = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			w.Header[kv[i]] = kv[i+1]
		}
	}
}

var api = core.Policy{Name: "api", Limit: 2, Window: time.Minute}

// The layers of the layered cases: 2 per second, and 5 per calendar day
// (a fixed window, so it resets at midnight, 12 hours after Start).
var (
	burst = core.Policy{Name: "burst", Limit: 2, Window: time.Second}
	daily = core.Policy{Name: "daily", Algorithm: core.FixedWindow, Limit: 5, Window: 24 * time.Hour}
)

// rates expects the IETF fields of a layered limiter: one member per
// layer, each given as name, q, w, r, t.
func rates(members ...Rate) func(*Want) {
	return func(w *Want) { w.Rates = members }
}

func burstRate(r, t int64) Rate { return Rate{Name: "burst", Q: 2, W: 1, R: r, T: t} }
func dailyRate(r, t int64) Rate { return Rate{Name: "daily", Q: 5, W: 86400, R: r, T: t} }

// Cases returns the behaviour table.
func Cases() []Case {
	login := func(email, status string) Req {
		return Req{Method: "POST", Path: "/login", Body: `{"email":"` + email + `","password":"x"}`, Header: map[string]string{StatusHeader: status}}
	}
	items := func(peer string, h ...string) Req {
		r := Req{Peer: peer, Header: map[string]string{}}
		for i := 0; i < len(h); i += 2 {
			r.Header[h[i]] = h[i+1]
		}
		return r
	}
	return []Case{
		{
			Name: "allowed/IETF headers",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Name: "api", Limit: 100, Window: time.Minute}))
			},
			// 100 per minute: one token back every 600 ms.
			Steps: steps(
				with(ok, func(w *Want) { w.Body = "ok:"; w.RetryAfter = "-" }),
				with(ok, rate("api", 100, 60, 98, 2)),
			),
		},
		{
			Name: "allowed/unnamed policy is default",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 10, Window: 90 * time.Second}))
			},
			Steps: steps(with(ok, rate("default", 10, 90, 9, 9))),
		},
		{
			Name:  "denied/limit reached",
			App:   func(t *testing.T, env *Env) *App { return use(env.Limiter(t, api)) },
			Steps: append(steps(with(ok, rate("api", 2, 60, 1, 30)), with(ok, rate("api", 2, 60, 0, 60)), with(limited, rate("api", 2, 60, 0, 30)), with(limited, func(w *Want) { w.RetryAfter = "30" })), Step{Req: Req{Advance: 30 * time.Second}, Want: with(ok, rate("api", 2, 60, 0, 60))}),
		},
		{
			Name: "denied/Retry-After rounds up",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 2, Window: 3 * time.Second}))
			},
			Steps: steps(ok, ok, with(limited, func(w *Want) { w.RetryAfter = "2" })),
		},
		{
			Name: "denied/Retry-After never 0",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 10, Window: time.Second}))
			},
			Steps: append(steps(ok, ok, ok, ok, ok, ok, ok, ok, ok, ok), Step{Req: Req{Advance: 99 * time.Millisecond}, Want: with(limited, func(w *Want) { w.RetryAfter = "1"; w.Rate = &Rate{Name: "default", Q: 10, W: 1, R: 0, T: 1} })}),
		},
		{
			Name: "denied/custom response",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, api), httplimit.WithDenied(func(r keyfunc.Request, d core.Decision) httplimit.Response {
					return httplimit.Response{Header: http.Header{"content-type": {"text/plain"}}, Body: []byte("slow down, " + strconv.Itoa(int(d.RetryAfter/time.Second)) + "s")}
				}))
			},
			Steps: steps(ok, ok, Want{Status: 429, Body: "slow down, 30s", RetryAfter: "30", Rate: &Rate{Name: "api", Q: 2, W: 60, R: 0, T: 30}, Header: map[string]string{"Content-Type": "text/plain", "Cache-Control": "no-store"}}),
		},
		{
			Name: "error/fail open by default",
			App:  func(t *testing.T, env *Env) *App { return use(Failing{}, opts(env)...) },
			Steps: steps(
				with(ok, func(w *Want) { w.NoRate = true; hooks(1, 0)(w) }),
				with(ok, func(w *Want) { w.NoRate = true; hooks(2, 0)(w) }),
			),
		},
		{
			Name: "error/fail closed",
			App: func(t *testing.T, env *Env) *App {
				return use(Failing{}, opts(env, httplimit.WithErrorPolicy(core.FailClosed()))...)
			},
			Steps: steps(Want{Status: 503, Problem: httplimit.ProblemUnavailable, RetryAfter: "1", NoRate: true, Hooks: true, Errors: 1}),
		},
		{
			Name: "error/fallback limiter",
			App: func(t *testing.T, env *Env) *App {
				local := env.Limiter(t, core.Policy{Name: "local", Limit: 1, Window: time.Minute})
				return use(Failing{}, opts(env, httplimit.WithErrorPolicy(core.Fallback(local)))...)
			},
			Steps: steps(
				with(ok, func(w *Want) { rate("local", 1, 60, 0, 60)(w); hooks(1, 0)(w) }),
				with(limited, func(w *Want) { w.RetryAfter = "60"; hooks(2, 0)(w) }),
			),
		},
		{
			Name: "error/fallback fails too",
			App: func(t *testing.T, env *Env) *App {
				return use(Failing{}, opts(env, httplimit.WithErrorPolicy(core.Fallback(Failing{})))...)
			},
			Steps: steps(Want{Status: 503, Problem: httplimit.ProblemUnavailable, RetryAfter: "1", Hooks: true, Errors: 2}),
		},
		{
			Name: "dry run never blocks",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 1, Window: time.Minute}), opts(env, env.DryRun())...)
			},
			Steps: steps(
				with(ok, func(w *Want) { rate("default", 1, 60, 0, 60)(w); hooks(0, 0)(w) }),
				with(ok, func(w *Want) { rate("default", 1, 60, 0, 60)(w); hooks(0, 1)(w); w.RetryAfter = "-" }),
				with(ok, func(w *Want) { hooks(0, 2)(w) }),
			),
		},
		{
			Name: "skip",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 1, Window: time.Minute}), httplimit.WithSkip(func(r keyfunc.Request) bool {
					return len(r.Header("X-Internal")) > 0
				}))
			},
			Steps: []Step{
				{Req: items("", "X-Internal", "1"), Want: with(ok, func(w *Want) { w.NoRate = true })},
				{Req: items("", "X-Internal", "1"), Want: with(ok, func(w *Want) { w.NoRate = true })},
				{Want: with(ok, rate("default", 1, 60, 0, 60))},
				{Want: limited},
				{Req: items("", "X-Internal", "1"), Want: with(ok, func(w *Want) { w.NoRate = true })},
			},
		},
		{
			Name: "cost/50 of 100",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 100, Window: time.Minute}), httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 50, nil }))
			},
			Steps: steps(with(ok, rate("default", 100, 60, 50, 30)), with(ok, rate("default", 100, 60, 0, 60)), with(limited, func(w *Want) { w.RetryAfter = "30" })),
		},
		{
			Name: "cost/too high for the policy",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 100, Window: time.Minute}), opts(env, httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 150, nil }))...)
			},
			// The refusal carries the key's rate headers as it is: nothing
			// was counted.
			Steps: steps(with(Want{Status: 429, Problem: httplimit.ProblemCostTooHigh, RetryAfter: "-", Hooks: true, Errors: 1}, rate("default", 100, 60, 100, 0))),
		},
		{
			Name: "cost/error refused whatever the error policy",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, api), opts(env, httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 0, errors.New(Secret) }), httplimit.WithErrorPolicy(core.FailClosed()))...)
			},
			Steps: steps(Want{Status: 400, Problem: httplimit.ProblemInvalidCost, RetryAfter: "-", NoRate: true, Hooks: true, Errors: 1}),
		},
		{
			Name: "count only failures/login",
			App: func(t *testing.T, env *Env) *App {
				l := env.Limiter(t, core.Policy{Name: "login", Algorithm: core.SlidingLog, Limit: 5, Window: 15 * time.Minute})
				return &App{Routes: []Route{{Method: "POST", Pattern: "/login", Limit: &Limit{Limiter: l, Options: []httplimit.Option{
					httplimit.WithKey(keyfunc.Email("email")),
					httplimit.WithCountIf(httplimit.Failures),
					httplimit.WithClock(env.Clock),
				}}}}}
			},
			Steps: func() []Step {
				var s []Step
				for range 8 { // successes never count
					s = append(s, Step{Req: login("ana@example.com", "200"), Want: with(ok, rate("login", 5, 900, 4, 900))})
				}
				for i := range 5 {
					s = append(s, Step{Req: login("Ana@Example.com", "401"), Want: with(ok, func(w *Want) { w.Status = 401 })})
					_ = i
				}
				// Denied up front, even with the right password.
				s = append(s, Step{Req: login("ana@example.com", "200"), Want: with(limited, func(w *Want) { w.RetryAfter = "900" })})
				s = append(s, Step{Req: login("bob@example.com", "200"), Want: with(ok, func(w *Want) { w.Body = "ok:" + `{"email":"bob@example.com","password":"x"}` })})
				return s
			}(),
		},
		{
			Name: "headers/legacy triple",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, api), httplimit.WithHeaders(httplimit.LegacyHeaders))
			},
			Steps: steps(
				with(ok, header("RateLimit-Limit", "2", "RateLimit-Remaining", "1", "RateLimit-Reset", "30", "RateLimit", "", "RateLimit-Policy", "", "X-RateLimit-Limit", "")),
				with(ok, header("RateLimit-Remaining", "0", "RateLimit-Reset", "60")),
				with(limited, header("RateLimit-Limit", "2", "RateLimit-Remaining", "0", "RateLimit-Reset", "30")),
			),
		},
		{
			Name: "headers/X-RateLimit epoch",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, api), httplimit.WithHeaders(httplimit.XRateLimitHeaders), httplimit.WithClock(env.Clock))
			},
			Steps: steps(
				with(ok, header("X-RateLimit-Limit", "2", "X-RateLimit-Remaining", "1", "X-RateLimit-Reset", epoch(30*time.Second), "RateLimit", "", "RateLimit-Limit", "")),
				ok,
				with(limited, header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(30*time.Second))),
			),
		},
		{
			Name: "headers/several",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, api), httplimit.WithHeaders(httplimit.IETFHeaders, httplimit.LegacyHeaders|httplimit.XRateLimitHeaders), httplimit.WithClock(env.Clock))
			},
			Steps: steps(with(ok, func(w *Want) {
				rate("api", 2, 60, 1, 30)(w)
				header("RateLimit-Remaining", "1", "X-RateLimit-Remaining", "1", "X-RateLimit-Reset", epoch(30*time.Second))(w)
			})),
		},
		{
			Name: "headers/none",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, api), httplimit.WithHeaders(httplimit.NoHeaders))
			},
			Steps: steps(with(ok, func(w *Want) { w.NoRate = true }), ok, with(limited, func(w *Want) { w.NoRate = true; w.RetryAfter = "30" })),
		},
		{
			// Every layer in the IETF fields; the denying layer named by
			// the problem, with r=0 and t its Retry-After; the other
			// layer shows what it has left, the denied request not
			// counted.
			Name: "layered/every layer in the headers",
			App:  func(t *testing.T, env *Env) *App { return use(env.Layered(t, burst, daily)) },
			Steps: []Step{
				{Want: with(ok, rates(burstRate(1, 1), dailyRate(4, 43200)))},
				{Want: with(ok, rates(burstRate(0, 1), dailyRate(3, 43200)))},
				{Want: with(limited, func(w *Want) {
					w.RetryAfter = "1"
					rates(burstRate(0, 1), dailyRate(3, 43200))(w)
				})},
				{Req: Req{Advance: time.Second}, Want: with(ok, rates(burstRate(1, 1), dailyRate(2, 43199)))},
				{Want: with(ok, rates(burstRate(0, 1), dailyRate(1, 43199)))},
				{Req: Req{Advance: time.Second}, Want: with(ok, rates(burstRate(1, 1), dailyRate(0, 43198)))},
				{Want: with(limited, func(w *Want) {
					w.RetryAfter = "43198"
					rates(burstRate(1, 1), dailyRate(0, 43198))(w)
				})},
			},
		},
		{
			// Two unnamed layers: "default" and "default-2", and the
			// problem names the second when it denies.
			Name: "layered/same names made unique",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Layered(t,
					core.Policy{Limit: 3, Window: time.Minute},
					core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}))
			},
			Steps: steps(
				with(ok, rates(Rate{"default", 3, 60, 2, 20}, Rate{"default-2", 1, 3600, 0, 3600})),
				with(limited, func(w *Want) {
					// The denial counted nothing: "default" is as the
					// first request left it.
					w.RetryAfter = "3600"
					rates(Rate{"default", 3, 60, 2, 20}, Rate{"default-2", 1, 3600, 0, 3600})(w)
				}),
			),
		},
		{
			// The triples stay single-valued, for the most restrictive
			// layer, beside the layered IETF fields.
			Name: "layered/triples describe the most restrictive layer",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Layered(t, burst, daily), httplimit.WithHeaders(httplimit.IETFHeaders|httplimit.LegacyHeaders))
			},
			Steps: []Step{
				{Want: with(ok, func(w *Want) {
					rates(burstRate(1, 1), dailyRate(4, 43200))(w)
					header("RateLimit-Limit", "2", "RateLimit-Remaining", "1", "RateLimit-Reset", "1")(w)
				})},
				{Req: Req{Advance: time.Second}, Want: ok},
				{Req: Req{Advance: time.Second}, Want: ok},
				{Req: Req{Advance: time.Second}, Want: with(ok, func(w *Want) {
					rates(burstRate(1, 1), dailyRate(1, 43197))(w)
					header("RateLimit-Limit", "2", "RateLimit-Remaining", "1", "RateLimit-Reset", "1")(w)
				})},
				{Req: Req{Advance: time.Second}, Want: with(ok, header("RateLimit-Limit", "5", "RateLimit-Remaining", "0", "RateLimit-Reset", "43196"))},
				{Want: with(limited, header("RateLimit-Limit", "5", "RateLimit-Remaining", "0", "RateLimit-Reset", "43196"))},
			},
		},
		{
			Name: "key/default is the peer, X-Forwarded-For ignored",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 1, Window: time.Minute}))
			},
			Steps: []Step{
				{Req: items("198.51.100.1:1000", "X-Forwarded-For", "203.0.113.1"), Want: ok},
				{Req: items("198.51.100.1:2000", "X-Forwarded-For", "203.0.113.2"), Want: limited},
				{Req: items("198.51.100.1:3000", "X-Real-IP", "203.0.113.3"), Want: limited},
				{Req: items("198.51.100.2:1000", "X-Forwarded-For", "203.0.113.1"), Want: ok},
			},
		},
		{
			Name: "key/missing falls back to the peer when asked, reported",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 1, Window: time.Minute}), opts(env, httplimit.WithKey(keyfunc.Header("X-API-Key", nil)),
					httplimit.WithNoKey(httplimit.FallbackKey(keyfunc.PeerIP)))...)
			},
			Steps: []Step{
				{Req: items("198.51.100.1:1"), Want: with(ok, hooks(1, 0))},
				{Req: items("198.51.100.1:1"), Want: with(limited, hooks(2, 0))},
				{Req: items("198.51.100.2:1"), Want: with(ok, hooks(3, 0))},
				{Req: items("198.51.100.1:1", "X-API-Key", "k1"), Want: with(ok, hooks(3, 0))},
				{Req: items("198.51.100.1:1", "X-API-Key", "k1"), Want: limited},
			},
		},
		{
			Name: "key/missing refused",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, api), httplimit.WithKey(keyfunc.Header("X-API-Key", nil)), httplimit.WithNoKey(httplimit.RefuseKey()))
			},
			Steps: []Step{
				{Want: Want{Status: 400, Problem: httplimit.ProblemInvalidKey, NoRate: true, RetryAfter: "-"}},
				{Req: items("", "X-API-Key", "k1"), Want: ok},
			},
		},
		{
			Name: "key/invalid refused",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Limit: 1, Window: time.Minute}), opts(env, httplimit.WithKey(keyfunc.Email("email")))...)
			},
			Steps: []Step{
				{Req: login("ana\u200b@example.com", "200"), Want: Want{Status: 400, Problem: httplimit.ProblemInvalidKey, NoRate: true, Hooks: true, Errors: 1}},
				{Req: Req{Method: "POST", Path: "/login", Body: "email=ana%40example.com&email=bob%40example.com"}, Want: Want{Status: 400, Problem: httplimit.ProblemInvalidKey, Hooks: true, Errors: 2}},
				{Req: Req{Method: "POST", Path: "/login", Body: "email=ana%40example.com"}, Want: with(ok, func(w *Want) { w.Body = "ok:email=ana%40example.com" })},
				{Req: Req{Method: "POST", Path: "/login?email=ANA@example.com"}, Want: limited},
			},
		},
		{
			Name: "key/route pattern, never the raw path",
			App: func(t *testing.T, env *Env) *App {
				l := env.Limiter(t, core.Policy{Limit: 1, Window: time.Minute})
				return &App{Routes: []Route{{Method: "GET", Pattern: "/items/{id}", Limit: &Limit{Limiter: l, Options: []httplimit.Option{httplimit.WithKey(keyfunc.Route)}}}}}
			},
			Steps: []Step{
				{Req: Req{Path: "/items/1"}, Want: ok},
				{Req: Req{Path: "/items/2", Peer: "198.51.100.9:1"}, Want: limited},
			},
		},
		{
			Name: "per-route limits are independent",
			App: func(t *testing.T, env *Env) *App {
				one := core.Policy{Limit: 1, Window: time.Minute}
				return &App{Routes: []Route{
					{Method: "GET", Pattern: "/a", Limit: &Limit{Limiter: env.Limiter(t, one)}},
					{Method: "GET", Pattern: "/b/{id}", Limit: &Limit{Limiter: env.Limiter(t, core.Policy{Name: "b", Limit: 2, Window: time.Minute})}},
					{Method: "GET", Pattern: "/open"},
				}}
			},
			Steps: []Step{
				{Req: Req{Path: "/a"}, Want: with(ok, rate("default", 1, 60, 0, 60))},
				{Req: Req{Path: "/b/1"}, Want: with(ok, rate("b", 2, 60, 1, 30))},
				{Req: Req{Path: "/a"}, Want: limited},
				{Req: Req{Path: "/b/2"}, Want: ok},
				{Req: Req{Path: "/b/1"}, Want: limited},
				{Req: Req{Path: "/open"}, Want: with(ok, func(w *Want) { w.NoRate = true })},
			},
		},
		{
			// A rule set (rules.Limiter, an httplimit.RequestLimiter)
			// as the app's limiter: each request decided by the rule
			// its route and method match, a login's two limits all or
			// nothing (a denial by the account's counts nothing on the
			// IP's), the headers and the 429 naming them, a route in the
			// framework's own parameter syntax matching the file's, a
			// login without its key refused, a request no rule matches
			// served without headers.
			Name: "rule set/each request by its rule",
			App: func(t *testing.T, env *Env) *App {
				// On the routes, where every framework knows the route
				// (fiber's app.Use does not: there a rule with routes
				// refuses, see rules.Set.Match).
				l := &Limit{Limiter: env.Rules(t, loginRules), Options: opts(env, httplimit.WithClock(env.Clock))}
				return &App{Routes: []Route{
					{Method: "GET", Pattern: "/items/{id}", Limit: l},
					{Method: "POST", Pattern: "/login", Limit: l},
				}}
			},
			Steps: []Step{
				{Req: accountLogin("a"), Want: with(ok, rates(accountRate(1), ipRate(2)))},
				{Req: accountLogin("a"), Want: with(ok, rates(accountRate(0), ipRate(1)))},
				{Req: accountLogin("a"), Want: with(limited, func(w *Want) {
					w.RetryAfter = "3600"
					rates(accountRate(0), ipRate(1))(w)
				})},
				{Req: accountLogin("b"), Want: with(ok, rates(accountRate(1), ipRate(0)))},
				{Req: accountLogin("c"), Want: with(limited, func(w *Want) {
					w.RetryAfter = "3600"
					// carol's account holds nothing: no reset to wait for.
					rates(Rate{Name: "account", Q: 2, W: 3600, R: 2, T: 0}, ipRate(0))(w)
				})},
				{Req: Req{Path: "/items/1"}, Want: with(ok, rate("reads", 100, 60, 99, 60))},
				{Req: Req{Method: "POST", Path: "/login"}, Want: Want{Status: 400, Problem: httplimit.ProblemInvalidKey, RetryAfter: "-", Hooks: true, Errors: 1, NoRate: true}},
			},
		},
		{
			// An app-wide limit and a route's limit stacked on one
			// request decide together: a request the route's limit
			// refuses (429, or 400 for a missing key) is counted by
			// neither, so the app's quota is spent by served requests
			// only. The refusal carries both members, the app's as it
			// was with the request counted.
			Name: "stacked limits/a refusal counts in no limit",
			App: func(t *testing.T, env *Env) *App {
				app := &Limit{Limiter: env.Limiter(t, core.Policy{Name: "app", Limit: 3, Window: time.Hour}), Options: opts(env, httplimit.WithClock(env.Clock))}
				return &App{Use: app, Routes: []Route{
					{Method: "GET", Pattern: "/route", Limit: &Limit{Limiter: env.Limiter(t, core.Policy{Name: "route", Limit: 1, Window: time.Hour}), Options: opts(env, httplimit.WithClock(env.Clock))}},
					{Method: "GET", Pattern: "/keyed", Limit: &Limit{Limiter: env.Limiter(t, core.Policy{Name: "keyed", Limit: 1, Window: time.Hour}),
						Options: opts(env, httplimit.WithClock(env.Clock), httplimit.WithKey(keyfunc.Header("X-Key", nil)))}},
					{Method: "GET", Pattern: "/open"},
				}}
			},
			Steps: []Step{
				{Req: Req{Path: "/route"}, Want: with(ok, rates(Rate{Name: "app", Q: 3, W: 3600, R: 2, T: 1200}, Rate{Name: "route", Q: 1, W: 3600, R: 0, T: 3600}))},
				{Req: Req{Path: "/route"}, Want: with(limited, rates(Rate{Name: "app", Q: 3, W: 3600, R: 1, T: 2400}, Rate{Name: "route", Q: 1, W: 3600, R: 0, T: 3600}))},
				{Req: Req{Path: "/route"}, Want: with(limited, rates(Rate{Name: "app", Q: 3, W: 3600, R: 1, T: 2400}, Rate{Name: "route", Q: 1, W: 3600, R: 0, T: 3600}))},
				{Req: Req{Path: "/keyed"}, Want: with(Want{Status: 400, Problem: httplimit.ProblemInvalidKey, RetryAfter: "-", Hooks: true, Errors: 1}, rates(Rate{Name: "app", Q: 3, W: 3600, R: 1, T: 2400}))},
				{Req: Req{Path: "/open"}, Want: with(ok, rate("app", 3, 3600, 1, 2400))},
				{Req: Req{Path: "/open"}, Want: with(ok, rate("app", 3, 3600, 0, 3600))},
				{Req: Req{Path: "/open"}, Want: with(limited, func(w *Want) { w.RetryAfter = "1200" })},
			},
		},
		{
			Name:     "leaky bucket/delay honoured",
			Synctest: true,
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3}))
			},
			Steps: steps(
				with(ok, func(w *Want) { w.ExactElapsed = true }),
				with(ok, func(w *Want) { w.MinElapsed, w.ExactElapsed = 100*time.Millisecond, true }),
				with(ok, func(w *Want) { w.MinElapsed, w.ExactElapsed = 200*time.Millisecond, true }),
				limited,
			),
		},
		{
			Name:     "leaky bucket/canceled wait",
			Synctest: true,
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Algorithm: core.LeakyBucket, Limit: 1, Window: time.Second, Burst: 3}))
			},
			Steps: []Step{
				{Want: ok},
				{Req: Req{CancelAfter: 300 * time.Millisecond}, Want: Want{Status: 503, Problem: httplimit.ProblemCanceled, MinElapsed: 300 * time.Millisecond, ExactElapsed: true}},
			},
		},
	}
}

// epoch returns the X-RateLimit-Reset value d after Start.
func epoch(d time.Duration) string { return strconv.FormatInt(Start.Add(d).Unix(), 10) }

// loginRules is the rule set of the rule-set case: logins limited per
// account and per IP, reads per IP; nothing else.
const loginRules = `
rules:
  - name: login
    match: {routes: [/login], methods: [POST]}
    limits:
      - {name: account, rate: 2/1h algorithm=fixed-window, key: "header:X-Account"}
      - {name: ip, rate: 3/1h algorithm=fixed-window, key: ip}
  - name: reads
    match: {routes: ["/items/{id}"], methods: [GET]}
    limits:
      - {name: reads, rate: 100/1m algorithm=fixed-window, key: ip}
`

func accountLogin(account string) Req {
	return Req{Method: "POST", Path: "/login", Header: map[string]string{"X-Account": account}}
}

func accountRate(r int64) Rate { return Rate{Name: "account", Q: 2, W: 3600, R: r, T: 3600} }
func ipRate(r int64) Rate      { return Rate{Name: "ip", Q: 3, W: 3600, R: r, T: 3600} }
