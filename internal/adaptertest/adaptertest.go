// Package adaptertest is the behaviour table that every framework adapter
// must pass: one set of cases, run through a thin [Driver] per framework.
// It is for tests only.
package adaptertest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/rules"
)

// Headers a test request may carry for the app's handler and the drivers.
const (
	// StatusHeader asks the app's handler to answer with this status.
	StatusHeader = "X-Test-Status"
	// PeerHeader carries the socket peer for drivers that cannot set it on
	// the request itself (fiber); they must remove it before the middleware.
	PeerHeader = "X-Test-Peer"
	// ContextHeader carries an ID for [App.Context], for drivers that cannot
	// pass the request's context through (fiber); they must remove it.
	ContextHeader = "X-Test-Context"
)

// Limit is one middleware: the adapter's New(Limiter, Options...).
type Limit struct {
	Limiter core.Limiter
	Options []httplimit.Option
}

// Route is a route of the app, its pattern in chi syntax ("/items/{id}"; see
// [ColonPattern]), behind its own middleware when Limit is set. Method
// [AnyMethod] registers the route for every method with the framework's
// own API for it: a ServeMux pattern without a method, chi's Handle, gin's
// and echo's Any, fiber's All.
type Route struct {
	Method, Pattern string
	Limit           *Limit
}

// AnyMethod is the [Route] Method of a route registered for every method.
const AnyMethod = "*"

// App describes the app a driver builds: middleware on every route (Use,
// r.Use in the framework) and routes, each served by [App.Handle].
//
// When CORSOrigin is set, a CORS middleware runs outside everything else,
// as docs/http.md says to put it: drivers of net/http routers wrap their
// handler with [Outer], the others do what [App.CORS] says first.
type App struct {
	Use        *Limit
	Routes     []Route
	CORSOrigin string

	calls  atomic.Int64
	ctxs   sync.Map // ID -> context.Context
	ctxID  atomic.Int64
	gate   chan struct{} // when not nil, Handle waits for it to close
	inside atomic.Int64  // handlers waiting at the gate
	// entered, when not nil, receives a value as each handler reaches
	// the gate.
	entered chan struct{}
}

// Handle is the app's handler: drivers call it with the request's
// StatusHeader value and body. It records the call and returns the status
// to answer with (200 by default) and a body echoing the request body.
// While a case holds the app's gate, Handle waits for it to open first, as
// a slow password check would.
func (a *App) Handle(statusHeader string, body []byte) (int, []byte) {
	a.calls.Add(1)
	if a.gate != nil {
		a.inside.Add(1)
		if a.entered != nil {
			a.entered <- struct{}{}
		}
		<-a.gate
	}
	status := http.StatusOK
	if n, err := strconv.Atoi(statusHeader); err == nil {
		status = n
	}
	return status, append([]byte("ok:"), body...)
}

// ServeHTTP is [App.Handle] as a net/http handler, for the drivers of
// net/http routers: it answers with Handle's status and body, as
// text/plain.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	status, out := a.Handle(r.Header.Get(StatusHeader), body)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	w.Write(out)
}

// CORSExposed is the Access-Control-Expose-Headers value the app's CORS
// middleware sets for its own header.
const CORSExposed = "X-Request-Id"

// CORS is what the app's CORS middleware does with a request of this
// method and these Origin and Access-Control-Request-Method values, as a
// CORS middleware does before it calls on: the response headers to set
// (none unless the origin is [App.CORSOrigin]), and whether the request is
// a preflight it answers itself with 204, calling nothing behind it.
func (a *App) CORS(method, origin, requestMethod string) (headers [][2]string, preflight bool) {
	if a.CORSOrigin == "" || origin != a.CORSOrigin {
		return nil, false
	}
	headers = [][2]string{{"Access-Control-Allow-Origin", origin}, {"Vary", "Origin"}}
	if method == http.MethodOptions && requestMethod != "" {
		return append(headers, [2]string{"Access-Control-Allow-Methods", "GET, POST"}), true
	}
	return append(headers, [2]string{"Access-Control-Expose-Headers", CORSExposed}), false
}

// Outer returns h behind the app's CORS middleware ([App.CORS]) when
// CORSOrigin is set, else h, for the drivers of net/http routers.
func Outer(app *App, h http.Handler) http.Handler {
	if app.CORSOrigin == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers, preflight := app.CORS(r.Method, r.Header.Get("Origin"), r.Header.Get("Access-Control-Request-Method"))
		for _, kv := range headers {
			w.Header().Set(kv[0], kv[1])
		}
		if preflight {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Context returns the context registered under the ContextHeader id, or nil.
func (a *App) Context(id string) context.Context {
	if v, ok := a.ctxs.Load(id); ok {
		return v.(context.Context)
	}
	return nil
}

// ColonPattern turns a chi pattern ("/items/{id}") into gin, echo and fiber
// syntax ("/items/:id").
func ColonPattern(p string) string {
	var b strings.Builder
	for p != "" {
		i := strings.IndexByte(p, '{')
		if i < 0 {
			b.WriteString(p)
			break
		}
		j := strings.IndexByte(p[i:], '}')
		b.WriteString(p[:i])
		b.WriteByte(':')
		b.WriteString(p[i+1 : i+j])
		p = p[i+j+1:]
	}
	return b.String()
}

// Driver runs apps in one framework.
type Driver struct {
	Name string
	// Serve builds app and returns a function that serves one request in
	// process. The request's RemoteAddr and Context must reach the
	// middleware (through PeerHeader and ContextHeader if need be).
	Serve func(t *testing.T, app *App) func(*http.Request) *http.Response
	// Listen serves app on a real listener on 127.0.0.1 until the test
	// ends and returns its base URL, such as "http://127.0.0.1:4242".
	Listen func(t *testing.T, app *App) string
}

// Recorder serves requests with h in process, for net/http frameworks.
func Recorder(h http.Handler) func(*http.Request) *http.Response {
	return func(r *http.Request) *http.Response {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Result()
	}
}

// Listen serves h on 127.0.0.1 until the test ends, for net/http frameworks.
func Listen(t *testing.T, h http.Handler) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// Env is what a case's app is built with: a manual clock and recording
// hooks.
type Env struct {
	Clock *core.ManualClock

	mu      sync.Mutex
	errs    []error
	dryRuns []core.Decision
}

// Start is the manual clock's start: 2026-01-01 12:00:00 UTC.
var Start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// Limiter returns an in-memory limiter of p on the manual clock.
func (e *Env) Limiter(t *testing.T, p core.Policy) core.Limiter {
	t.Helper()
	l, err := core.New(p, core.WithClock(e.Clock))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Layered returns an in-memory [core.Layered] limiter of ps, one layer
// each, on the manual clock.
func (e *Env) Layered(t *testing.T, ps ...core.Policy) core.Limiter {
	t.Helper()
	layers := make([]*core.Memory, len(ps))
	for i, p := range ps {
		m, err := core.New(p, core.WithClock(e.Clock))
		if err != nil {
			t.Fatal(err)
		}
		layers[i] = m
	}
	l, err := core.NewLayered(layers...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Rules returns a rule set's limiter of the YAML file src, on the manual
// clock.
func (e *Env) Rules(t *testing.T, src string) core.Limiter {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	l, err := rules.NewLimiter(set, core.WithClock(e.Clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Hooks returns options recording errors and dry-run denials.
func (e *Env) Hooks() []httplimit.Option {
	return []httplimit.Option{
		httplimit.WithErrorHook(func(_ keyfunc.Request, err error) {
			e.mu.Lock()
			e.errs = append(e.errs, err)
			e.mu.Unlock()
		}),
	}
}

// DryRun returns the dry-run option recording denials.
func (e *Env) DryRun() httplimit.Option {
	return httplimit.WithDryRun(func(_ keyfunc.Request, d core.Decision) {
		e.mu.Lock()
		e.dryRuns = append(e.dryRuns, d)
		e.mu.Unlock()
	})
}

func (e *Env) counts() (errs, dryRuns int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.errs), len(e.dryRuns)
}

// Secret is the text of the failing limiter's error: it must never reach a
// response.
const Secret = "redis://:hunter2@10.0.0.9"

// Failing is a limiter whose every call fails.
type Failing struct{}

func (Failing) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errFailing
}
func (Failing) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errFailing
}
func (Failing) Reset(context.Context, string) error { return errFailing }

var errFailing = &failingError{}

type failingError struct{}

func (*failingError) Error() string { return "dial " + Secret + ": connection refused" }

// Req is one request of a case.
type Req struct {
	Method string // default GET
	Path   string // default /items/1
	Header map[string]string
	Body   string // sent as JSON when it starts with '{'
	Peer   string // default 192.0.2.1:1234

	// Advance moves the manual clock before the request.
	Advance time.Duration
	// CancelAfter cancels the request's context after this long (in a
	// synctest bubble).
	CancelAfter time.Duration
}

// Rate is one member of the parsed RateLimit and RateLimit-Policy fields:
// one policy, or one layer of a layered limiter.
type Rate struct {
	Name       string
	Q, W, R, T int64
}

// Want is what a response must be. Every response is also checked for the
// invariants of the HTTP behaviour (see [checkInvariants]).
type Want struct {
	Status int
	Called bool   // the handler ran
	Body   string // exact, when set
	// Problem is the problem type of a refusal; "" for none.
	Problem string
	// Rate is the IETF fields expected, of one member; Rates those of a
	// layered limiter, every member in order; NoRate says no rate header
	// at all.
	Rate   *Rate
	Rates  []Rate
	NoRate bool
	// RetryAfter is the exact Retry-After value; "-" for absent.
	RetryAfter string
	// Header holds exact values of other headers; "" for absent.
	Header map[string]string
	// Errors and DryRuns are the hook calls so far, when not -1... checked
	// when Hooks is set.
	Hooks        bool
	Errors       int
	DryRuns      int
	MinElapsed   time.Duration // synctest cases: at least this long
	ExactElapsed bool
}

// Step is a request and what it must get.
type Step struct {
	Req  Req
	Want Want
}

// Case is one behaviour, run against every framework.
type Case struct {
	Name     string
	App      func(t *testing.T, env *Env) *App
	Steps    []Step
	Synctest bool // run in a synctest bubble (timers)
	// Run, when set, runs after Steps with the app's serve function, for
	// cases that are no sequence of requests (parallel requests).
	Run func(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response)
}

// Run runs every case of [Cases] and [AbuseCases] with d, and the body
// abuse cases of [RunBody].
func Run(t *testing.T, d Driver) {
	t.Run("abuse/bodies", func(t *testing.T) { RunBody(t, d) })
	for _, c := range append(Cases(), AbuseCases()...) {
		t.Run(c.Name, func(t *testing.T) {
			if c.Synctest {
				synctest.Test(t, func(t *testing.T) { runCase(t, d, c) })
				return
			}
			runCase(t, d, c)
		})
	}
}

func runCase(t *testing.T, d Driver, c Case) {
	env := &Env{Clock: core.NewManualClock(Start)}
	app := c.App(t, env)
	if app.Routes == nil {
		app.Routes = DefaultRoutes()
	}
	serve := d.Serve(t, app)
	for i, s := range c.Steps {
		env.Clock.Advance(s.Req.Advance)
		req, cancel := build(app, s.Req, "")
		if s.Req.CancelAfter > 0 {
			time.AfterFunc(s.Req.CancelAfter, cancel)
		}
		before := app.calls.Load()
		start := time.Now()
		resp := serve(req)
		elapsed := time.Since(start)
		cancel()
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		called := app.calls.Load() > before
		check(t, "step "+strconv.Itoa(i+1)+" "+req.Method+" "+req.URL.Path, env, resp, body, called, elapsed, s.Want)
	}
	if c.Run != nil {
		c.Run(t, env, app, serve)
	}
}

// DefaultRoutes are the routes of an App that names none, without
// per-route limits.
func DefaultRoutes() []Route {
	return []Route{
		{Method: "GET", Pattern: "/items/{id}"},
		{Method: "POST", Pattern: "/login"},
	}
}

func build(app *App, r Req, base string) (*http.Request, context.CancelFunc) {
	method, path := r.Method, r.Path
	if method == "" {
		method = "GET"
	}
	if path == "" {
		path = "/items/1"
	}
	var body io.Reader
	if r.Body != "" {
		body = strings.NewReader(r.Body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, method, base+path, body)
	if r.Body != "" {
		ct := "application/x-www-form-urlencoded"
		if r.Body[0] == '{' {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	req.RemoteAddr = "192.0.2.1:1234"
	if r.Peer != "" {
		req.RemoteAddr = r.Peer
	}
	req.Header.Set(PeerHeader, req.RemoteAddr)
	id := strconv.FormatInt(app.ctxID.Add(1), 10)
	app.ctxs.Store(id, ctx)
	req.Header.Set(ContextHeader, id)
	return req, cancel
}

func check(t *testing.T, step string, env *Env, resp *http.Response, body []byte, called bool, elapsed time.Duration, w Want) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: "+format, append([]any{step}, args...)...)
	}
	if resp.StatusCode != w.Status {
		fail("status %d, want %d (body %s)", resp.StatusCode, w.Status, body)
	}
	if called != w.Called {
		fail("handler called %v, want %v", called, w.Called)
	}
	if w.Body != "" && string(body) != w.Body {
		fail("body %q, want %q", body, w.Body)
	}
	if w.MinElapsed > 0 && elapsed < w.MinElapsed {
		fail("served after %v, want at least %v", elapsed, w.MinElapsed)
	}
	if w.ExactElapsed && elapsed != w.MinElapsed {
		fail("served after %v, want %v", elapsed, w.MinElapsed)
	}
	if w.RetryAfter != "" {
		got, ok := resp.Header["Retry-After"]
		switch {
		case w.RetryAfter == "-" && ok:
			fail("Retry-After %q, want none", got)
		case w.RetryAfter != "-" && (len(got) != 1 || got[0] != w.RetryAfter):
			fail("Retry-After %q, want %q", got, w.RetryAfter)
		}
	}
	for k, v := range w.Header {
		if got := strings.Join(resp.Header.Values(k), ", "); got != v {
			fail("%s: %q, want %q", k, got, v)
		}
	}
	rates := parseRates(t, step, resp.Header)
	if w.NoRate {
		for k := range resp.Header {
			if strings.Contains(strings.ToLower(k), "ratelimit") {
				fail("rate header %s: %q, want none", k, resp.Header[k])
			}
		}
	}
	if w.Rate != nil {
		switch {
		case len(rates) == 0:
			fail("no RateLimit fields, want %+v", *w.Rate)
		case len(rates) != 1 || rates[0] != *w.Rate:
			fail("RateLimit fields %+v, want %+v", rates, *w.Rate)
		}
	}
	if w.Rates != nil && !slices.Equal(rates, w.Rates) {
		fail("RateLimit fields %+v, want %+v", rates, w.Rates)
	}
	if w.Hooks {
		errs, dry := env.counts()
		if errs != w.Errors {
			fail("error hook called %d times, want %d (%v)", errs, w.Errors, env.errs)
		}
		if dry != w.DryRuns {
			fail("dry-run hook called %d times, want %d", dry, w.DryRuns)
		}
	}
	checkInvariants(t, step, resp, body, w, rates)
}

// checkInvariants checks what holds for every response: no error text in a
// body; r within [0, q]; a refusal is problem+json with the right fields;
// a 429 for the rate limit has Retry-After in whole seconds >= 1,
// Cache-Control: no-store, and for the policy that denied, named by the
// problem, r = 0 and t = Retry-After (with several layers, the others
// that denied have r = 0 and t at most Retry-After, and the ones that
// did not deny have r > 0).
func checkInvariants(t *testing.T, step string, resp *http.Response, body []byte, w Want, rates []Rate) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: "+format, append([]any{step}, args...)...)
	}
	if strings.Contains(string(body), Secret) || strings.Contains(string(body), "connection refused") {
		fail("body holds the error text: %s", body)
	}
	for _, rate := range rates {
		if rate.R < 0 || rate.R > rate.Q {
			fail("RateLimit %q: r=%d outside [0, q=%d]", rate.Name, rate.R, rate.Q)
		}
	}
	if w.Problem == "" {
		if ct := resp.Header.Get("Content-Type"); ct == httplimit.ContentTypeProblem {
			fail("Content-Type %s on a response that is no refusal", ct)
		}
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != httplimit.ContentTypeProblem {
		fail("Content-Type %q, want %s", ct, httplimit.ContentTypeProblem)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		fail("Cache-Control %q, want no-store", cc)
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		fail("problem body %s: %v", body, err)
		return
	}
	if p["type"] != w.Problem {
		fail("problem type %v, want %s", p["type"], w.Problem)
	}
	if p["status"] != float64(resp.StatusCode) {
		fail("problem status %v, want %d", p["status"], resp.StatusCode)
	}
	for _, f := range []string{"title", "detail"} {
		if s, _ := p[f].(string); s == "" {
			fail("problem %s missing in %s", f, body)
		}
	}
	ra := resp.Header.Values("Retry-After")
	switch w.Problem {
	case httplimit.ProblemRateLimited:
		if len(ra) != 1 {
			fail("Retry-After %q, want one value", ra)
			return
		}
		secs, err := strconv.ParseInt(ra[0], 10, 64)
		if err != nil || secs < 1 {
			fail("Retry-After %q, want whole seconds >= 1", ra[0])
		}
		unit := " seconds."
		if secs == 1 {
			unit = " second."
		}
		if want := "Try again in " + ra[0] + unit; p["detail"] != want {
			fail("problem detail %q, want %q", p["detail"], want)
		}
		if s, _ := p["policy"].(string); s == "" {
			fail("problem policy missing in %s", body)
		}
		if len(rates) == 0 {
			break
		}
		denier := false
		for _, rate := range rates {
			switch {
			case rate.Name == p["policy"]:
				denier = true
				if rate.R != 0 || rate.T != secs {
					fail("429 with RateLimit %q r=%d t=%d, want r=0 t=%d", rate.Name, rate.R, rate.T, secs)
				}
			case rate.R == 0 && rate.T > secs:
				fail("429 with RateLimit %q r=0 t=%d, after Retry-After %d", rate.Name, rate.T, secs)
			}
		}
		if !denier {
			fail("429 names policy %v, which is no RateLimit member of %+v", p["policy"], rates)
		}
	case httplimit.ProblemCostTooHigh:
		if len(ra) != 0 {
			fail("Retry-After %q on a cost that can never fit", ra)
		}
	}
}

// parseRates parses RateLimit-Policy and RateLimit with an RFC 9651
// parser, one Rate per List member; either present without the other,
// unparseable, with members whose names differ between the two fields or
// repeat, is an error.
func parseRates(t *testing.T, step string, h http.Header) []Rate {
	t.Helper()
	pol, lim := h.Values("RateLimit-Policy"), h.Values("RateLimit")
	if len(pol) == 0 && len(lim) == 0 {
		return nil
	}
	pl, err := httpsfv.UnmarshalList(pol)
	if err != nil || len(pl) == 0 {
		t.Errorf("%s: RateLimit-Policy %q: want a List (%v)", step, pol, err)
		return nil
	}
	ll, err := httpsfv.UnmarshalList(lim)
	if err != nil || len(ll) != len(pl) {
		t.Errorf("%s: RateLimit %q: want a List of %d members, as RateLimit-Policy %q (%v)", step, lim, len(pl), pol, err)
		return nil
	}
	rates := make([]Rate, len(pl))
	seen := map[string]bool{}
	for i := range pl {
		pi, ok1 := pl[i].(httpsfv.Item)
		li, ok2 := ll[i].(httpsfv.Item)
		if !ok1 || !ok2 {
			t.Errorf("%s: RateLimit fields %q %q: want items", step, pol, lim)
			return nil
		}
		name, _ := pi.Value.(string)
		if lname, _ := li.Value.(string); lname != name || name == "" {
			t.Errorf("%s: policy names %q and %q differ or are empty", step, pol, lim)
		}
		if seen[name] {
			t.Errorf("%s: policy name %q repeats in %q", step, name, pol)
		}
		seen[name] = true
		r := &rates[i]
		r.Name = name
		get := func(p *httpsfv.Params, k string, dst *int64, field string) {
			v, ok := p.Get(k)
			n, isInt := v.(int64)
			if !ok || !isInt {
				t.Errorf("%s: %s has no integer %s", step, field, k)
			}
			*dst = n
		}
		get(pi.Params, "q", &r.Q, "RateLimit-Policy")
		get(pi.Params, "w", &r.W, "RateLimit-Policy")
		get(li.Params, "r", &r.R, "RateLimit")
		get(li.Params, "t", &r.T, "RateLimit")
	}
	return rates
}

// RunEndToEnd serves an app limited to 2 requests per minute on a real
// listener and sends three requests with a net/http client: two are served
// with parseable rate headers, the third gets the full 429.
func RunEndToEnd(t *testing.T, d Driver) {
	env := &Env{Clock: core.NewManualClock(Start)}
	app := use(env.Limiter(t, api))
	app.Routes = DefaultRoutes()
	base := d.Listen(t, app)
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	wants := []Want{
		with(ok, rate("api", 2, 60, 1, 30)),
		with(ok, rate("api", 2, 60, 0, 60)),
		with(limited, func(w *Want) { w.RetryAfter = "30"; rate("api", 2, 60, 0, 30)(w) }),
	}
	for i, w := range wants {
		req, cancel := build(app, Req{Path: "/items/" + strconv.Itoa(i)}, base)
		req.RequestURI = ""
		req.Header.Del(PeerHeader)
		req.Header.Del(ContextHeader)
		before := app.calls.Load()
		resp, err := client.Do(req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		check(t, "request "+strconv.Itoa(i+1), env, resp, body, app.calls.Load() > before, 0, w)
	}
}

// EngineStep is one request through an [httplimit.Engine] and the rate
// headers it is answered with.
type EngineStep struct {
	Served    bool
	Policy    string // RateLimit-Policy
	RateLimit string // RateLimit
}

// CheckEngine sends request i, a GET of "/", to e and compares its answer
// with want.
func CheckEngine(t *testing.T, e *httplimit.Engine, i int, want EngineStep) {
	t.Helper()
	w := httptest.NewRecorder()
	res := e.Check(httpview.New(httptest.NewRequest("GET", "/", nil), "/"))
	served := res.WriteHTTP(w)
	got := EngineStep{served, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit")}
	if got != want {
		t.Errorf("request %d:\n got %+v\nwant %+v", i, got, want)
	}
}
