package adaptertest

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// The abuse table's methods part: what a client gets that respells the
// method of a request (HEAD for GET, a method the route does not serve, a
// made-up one) on a route keyed by keyfunc.Route, and what a browser gets
// from a limit behind a CORS middleware.

func init() { abuseParts = append(abuseParts, methodCases) }

// keyRecorder is a limiter that records every key it is asked about.
type keyRecorder struct {
	core.Limiter
	mu   sync.Mutex
	keys map[string]bool
}

func (k *keyRecorder) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	k.mu.Lock()
	k.keys[key] = true
	k.mu.Unlock()
	return k.Limiter.AllowN(ctx, key, n)
}

// Unwrap returns the recorded limiter.
func (k *keyRecorder) Unwrap() core.Limiter { return k.Limiter }

func (k *keyRecorder) minted() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := make([]string, 0, len(k.keys))
	for key := range k.keys {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}

// madeUpMethods are the methods a client sends to mint buckets: every
// standard one, HEAD, the WebDAV ones echo's Any serves, a lower-case
// respelling, and made-up tokens.
func madeUpMethods() []string {
	ms := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE",
		"PROPFIND", "REPORT", "get", "Get", "BREW", "PURGE"}
	for i := range 40 {
		ms = append(ms, fmt.Sprintf("X%d", i))
	}
	return ms
}

// methodFlood returns a case that sends one request per method of methods
// through an app whose routes are routes and whose limit of 2 per minute,
// keyed by the peer and keyfunc.Route, is on the route (perRoute) or on
// every route: the handler runs at most twice and at most two keys are
// counted (the route's, and the fallback for a request no route matched).
func methodFlood(name string, methods []string, perRoute bool, routes ...Route) Case {
	const limit = 2
	var rec *keyRecorder
	return Case{
		Name: "abuse/" + name,
		App: func(t *testing.T, env *Env) *App {
			rec = &keyRecorder{Limiter: env.Limiter(t, core.Policy{Name: "api", Limit: limit, Window: time.Minute}), keys: map[string]bool{}}
			lim := &Limit{Limiter: rec, Options: []httplimit.Option{httplimit.WithKey(keyfunc.Join(keyfunc.PeerIP, keyfunc.Route))}}
			app := &App{Routes: routes}
			if perRoute {
				app.Routes = append([]Route(nil), routes...)
				for i := range app.Routes {
					app.Routes[i].Limit = lim
				}
			} else {
				app.Use = lim
			}
			return app
		},
		Run: func(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response) {
			statuses := map[string]int{}
			for _, m := range methods {
				req, cancel := build(app, Req{Method: m}, "")
				resp := serve(req)
				resp.Body.Close()
				cancel()
				statuses[m] = resp.StatusCode
			}
			if ran := app.calls.Load(); ran > limit {
				t.Errorf("%d methods on a limit of %d: the handler ran %d times; statuses %v", len(methods), limit, ran, statuses)
			}
			if keys := rec.minted(); len(keys) > 2 {
				t.Errorf("%d methods minted %d keys, want at most 2: %q", len(methods), len(keys), keys)
			}
		},
	}
}

func methodCases() []Case {
	getRoute := Route{Method: "GET", Pattern: "/items/{id}"}
	anyRoute := Route{Method: AnyMethod, Pattern: "/items/{id}"}
	headGet := []string{"GET", "HEAD", "GET", "HEAD", "GET", "HEAD", "HEAD", "GET"}
	origin := "https://app.example"
	fromBrowser := func(method string, h ...string) Req {
		r := Req{Method: method, Header: map[string]string{"Origin": origin}}
		for i := 0; i < len(h); i += 2 {
			r.Header[h[i]] = h[i+1]
		}
		return r
	}
	preflight := fromBrowser("OPTIONS", "Access-Control-Request-Method", "DELETE")
	noRate := func(w *Want) { w.NoRate = true }
	exposed := CORSExposed + ", Retry-After, RateLimit, RateLimit-Policy"
	return []Case{
		methodFlood("HEAD counts with GET on the route", headGet, true, getRoute),
		methodFlood("HEAD counts with GET on every route", headGet, false, getRoute),
		methodFlood("made-up methods mint no keys on an any-method route", madeUpMethods(), true, anyRoute),
		methodFlood("made-up methods mint no keys on every any-method route", madeUpMethods(), false, anyRoute),
		methodFlood("methods a route does not serve mint no keys", madeUpMethods(), false, getRoute),
		{
			// A CORS middleware behind the limit answers preflights (here
			// the route's OPTIONS handler): httplimit.Preflight leaves them
			// uncounted, and only them.
			Name: "abuse/CORS preflights uncounted with Preflight",
			App: func(t *testing.T, env *Env) *App {
				app := use(env.Limiter(t, core.Policy{Name: "api", Limit: 2, Window: time.Minute}), httplimit.WithSkip(httplimit.Preflight))
				app.Routes = []Route{getRoute, {Method: "OPTIONS", Pattern: "/items/{id}"}}
				return app
			},
			Steps: []Step{
				{Req: preflight, Want: with(ok, noRate)},
				{Req: preflight, Want: with(ok, noRate)},
				{Req: preflight, Want: with(ok, noRate)},
				{Req: fromBrowser("GET"), Want: with(ok, rate("api", 2, 60, 1, 30))},
				// OPTIONS without Access-Control-Request-Method, or without
				// Origin, is no preflight: counted.
				{Req: fromBrowser("OPTIONS"), Want: with(ok, rate("api", 2, 60, 0, 60))},
				{Req: Req{Method: "OPTIONS", Header: map[string]string{"Access-Control-Request-Method": "GET"}}, Want: limited},
				{Req: preflight, Want: with(ok, noRate)},
			},
		},
		{
			// The CORS middleware outside the limits, as docs/http.md says:
			// it answers preflights before any limit counts them, and a
			// denial carries its Access-Control-Allow-Origin and the rate
			// headers' names in Access-Control-Expose-Headers, once however
			// many limits wrote them, so that the browser shows the 429 and
			// its Retry-After.
			Name: "abuse/a denial a browser receives carries CORS headers",
			App: func(t *testing.T, env *Env) *App {
				app := use(env.Limiter(t, core.Policy{Name: "app", Limit: 10, Window: time.Minute}))
				app.CORSOrigin = origin
				app.Routes = []Route{
					{Method: "GET", Pattern: "/items/{id}", Limit: &Limit{Limiter: env.Limiter(t, core.Policy{Name: "route", Limit: 1, Window: time.Minute})}},
					{Method: "DELETE", Pattern: "/items/{id}"},
				}
				return app
			},
			Steps: []Step{
				{Req: preflight, Want: Want{Status: 204, NoRate: true, Header: map[string]string{"Access-Control-Allow-Origin": origin}}},
				{Req: fromBrowser("GET"), Want: with(ok, header("Access-Control-Allow-Origin", origin, "Access-Control-Expose-Headers", exposed))},
				{Req: preflight, Want: Want{Status: 204, NoRate: true}},
				{Req: fromBrowser("GET"), Want: with(limited, header("Access-Control-Allow-Origin", origin, "Access-Control-Expose-Headers", exposed, "Retry-After", "60"))},
				// No CORS request, no CORS header.
				{Req: Req{}, Want: with(limited, header("Access-Control-Allow-Origin", "", "Access-Control-Expose-Headers", ""))},
			},
		},
	}
}
