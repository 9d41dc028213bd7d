package echo5limit_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echo5limit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/internal/bodytest"
	"github.com/ratekit/ratekit/keyfunc"
)

func newApp(app *adaptertest.App) http.Handler {
	e := echo.New()
	if app.Use != nil {
		e.Use(echo5limit.New(app.Use.Limiter, app.Use.Options...))
	}
	handle := func(c *echo.Context) error {
		body, _ := io.ReadAll(c.Request().Body)
		status, out := app.Handle(c.Request().Header.Get(adaptertest.StatusHeader), body)
		return c.Blob(status, "text/plain", out)
	}
	for _, rt := range app.Routes {
		var mw []echo.MiddlewareFunc
		if rt.Limit != nil {
			mw = append(mw, echo5limit.New(rt.Limit.Limiter, rt.Limit.Options...))
		}
		if rt.Method == adaptertest.AnyMethod {
			e.Any(adaptertest.ColonPattern(rt.Pattern), handle, mw...)
		} else {
			e.Add(rt.Method, adaptertest.ColonPattern(rt.Pattern), handle, mw...)
		}
	}
	return adaptertest.Outer(app, e)
}

var driver = adaptertest.Driver{
	Name: "echo",
	Serve: func(t *testing.T, app *adaptertest.App) func(*http.Request) *http.Response {
		return adaptertest.Recorder(newApp(app))
	},
	Listen: func(t *testing.T, app *adaptertest.App) string { return adaptertest.Listen(t, newApp(app)) },
}

func TestBehaviour(t *testing.T) { adaptertest.Run(t, driver) }

func TestEndToEnd(t *testing.T) { adaptertest.RunEndToEnd(t, driver) }

// TestBodyAfterDecompress keys a gzip body that echo's Decompress has
// already decoded, leaving Content-Encoding: gzip in place, by its email;
// a gzip bomb is still refused within the bound.
func TestBodyAfterDecompress(t *testing.T) {
	l, err := core.New(core.Policy{Limit: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(middleware.Decompress())
	e.Use(echo5limit.New(l, httplimit.WithKey(keyfunc.Email("email"))))
	e.POST("/login", func(c *echo.Context) error {
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.Blob(http.StatusOK, "text/plain", body)
	})
	post := func(body []byte, encoding string) (int, []byte) {
		req := httptest.NewRequest("POST", "/login", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w.Code, w.Body.Bytes()
	}
	json := adaptertest.JSONBody("ana@example.com", 0)
	if status, got := post(bodytest.Encode(t, json, "gzip"), "gzip"); status != http.StatusOK || !bytes.Equal(got, json) {
		t.Fatalf("gzip body: %d %q, want 200 and the decoded body", status, got)
	}
	if status, _ := post(json, ""); status != http.StatusTooManyRequests {
		t.Errorf("same email again: %d, want 429", status)
	}
	if status, _ := post(bodytest.GzipBomb(t, 1), "gzip"); status != http.StatusBadRequest {
		t.Errorf("gzip bomb: %d, want 400", status)
	}
}

func newLimiter(t *testing.T, limit int64) core.Limiter {
	t.Helper()
	l, _ := newLimiterClock(t, limit)
	return l
}

func newLimiterClock(t *testing.T, limit int64) (core.Limiter, *core.ManualClock) {
	t.Helper()
	clock := core.NewManualClock(adaptertest.Start)
	l, err := core.New(core.Policy{Name: "api", Limit: limit, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func ok(c *echo.Context) error { return c.String(http.StatusOK, "ok") }

func get(h http.Handler, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/items/1", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// A user an authentication middleware stored with c.Set is the key: alice
// and bob, on one address, each get their own limit of 1; a request with no
// user is refused, not keyed by its address; the skipper, an echo
// middleware.Skipper, leaves root unlimited.
func TestNative(t *testing.T) {
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if u := c.Request().Header.Get("X-User"); u != "" {
				c.Set("user", u)
			}
			return next(c)
		}
	})
	var skipper middleware.Skipper = func(c *echo.Context) bool { return c.Get("user") == "root" }
	var extractor middleware.Extractor = func(c *echo.Context) (string, error) {
		if u, _ := c.Get("user").(string); u != "" {
			return u, nil
		}
		return "", keyfunc.ErrNoKey
	}
	e.Use(echo5limit.New(newLimiter(t, 2),
		echo5limit.WithKey(extractor),
		echo5limit.WithCost(func(c *echo.Context) (int64, error) {
			u, _ := c.Get("user").(string)
			return int64(len(u)) - 2, nil
		}),
		echo5limit.WithSkipper(skipper),
	))
	e.GET("/items/:id", ok)
	for _, tc := range []struct {
		user string
		want int
	}{{"alice", 429}, {"abcd", 200}, {"abcd", 429}, {"bob", 200}, {"bob", 200}, {"bob", 429}, {"", 400}, {"root", 200}, {"root", 200}} {
		if w := get(e, "X-User", tc.user); w.Code != tc.want {
			t.Errorf("user %q: %d, want %d (%s)", tc.user, w.Code, tc.want, w.Body)
		}
	}
}

// Outside echo5limit's middleware a native function is not called: a key or
// cost refuses the request with an echo5limit error to the hook, a skipper
// skips nothing.
func TestNativeOutside(t *testing.T) {
	called := false
	for _, tc := range []struct {
		name string
		opt  httplimit.Option
		want int
	}{
		{"key", echo5limit.WithKey(func(*echo.Context) (string, error) { called = true; return "k", nil }), 400},
		{"cost", echo5limit.WithCost(func(*echo.Context) (int64, error) { called = true; return 1, nil }), 400},
		{"skipper", echo5limit.WithSkipper(func(*echo.Context) bool { called = true; return true }), 200},
	} {
		var hooked error
		h := httplimit.Middleware(newLimiter(t, 1), tc.opt,
			httplimit.WithErrorHook(func(_ keyfunc.Request, err error) { hooked = err }))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		w := get(h)
		if called || w.Code != tc.want {
			t.Errorf("%s outside echo5limit: called %v, status %d; want not called, %d", tc.name, called, w.Code, tc.want)
		}
		if tc.want == 400 && (hooked == nil || !strings.Contains(hooked.Error(), "echo5limit")) {
			t.Errorf("%s outside echo5limit: hook got %v, want an echo5limit error", tc.name, hooked)
		}
		if tc.name == "skipper" && w.Header().Get("RateLimit") == "" {
			t.Errorf("skipper outside echo5limit: no RateLimit header, want the request limited")
		}
	}
}

// refusal is a way to be refused: the limiter and options of both
// middleware, and the requests it takes.
type refusal struct {
	name     string
	limiter  func(t *testing.T) core.Limiter
	opts     []httplimit.Option
	requests int
	problem  string
}

func refusals() []refusal {
	one := func(t *testing.T) core.Limiter { return newLimiter(t, 1) }
	return []refusal{
		{"denied", one, nil, 2, httplimit.ProblemRateLimited},
		{"cost too high", one, []httplimit.Option{httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 2, nil })}, 1, httplimit.ProblemCostTooHigh},
		{"no key", one, []httplimit.Option{httplimit.WithKey(func(keyfunc.Request) (string, error) { return "", keyfunc.ErrNoKey })}, 1, httplimit.ProblemInvalidKey},
		{"unavailable", func(*testing.T) core.Limiter { return adaptertest.Failing{} }, []httplimit.Option{httplimit.WithErrorPolicy(core.FailClosed())}, 1, httplimit.ProblemUnavailable},
	}
}

// Every refusal goes through echo's HTTPErrorHandler, once, as an error
// of its status (echo.StatusCode), and echo's default handler answers what
// httplimit writes directly: the same status, headers and problem body (to
// the newline echo's JSON encoder ends it with). echo's problem details
// handler answers the same problem, without its policy member.
func TestRefusalErrorHandler(t *testing.T) {
	for _, tc := range refusals() {
		t.Run(tc.name, func(t *testing.T) {
			e := echo.New()
			var errs []error
			def := echo.DefaultHTTPErrorHandler(false)
			e.HTTPErrorHandler = func(c *echo.Context, err error) {
				errs = append(errs, err)
				def(c, err)
			}
			e.Use(echo5limit.New(tc.limiter(t), tc.opts...))
			e.GET("/items/:id", ok)
			direct := httplimit.Middleware(tc.limiter(t), tc.opts...)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
			var got, want *httptest.ResponseRecorder
			for range tc.requests {
				got, want = get(e), get(direct)
			}
			if len(errs) != 1 || echo.StatusCode(errs[0]) != want.Code {
				t.Fatalf("error handler got %v, want one error of status %d", errs, want.Code)
			}
			var p httplimit.Problem
			if err := json.Unmarshal(want.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(errs[0].Error(), p.Title+": "+p.Detail) {
				t.Errorf("error text %q, want the problem's title and detail", errs[0])
			}
			if got.Code != want.Code {
				t.Errorf("status %d, want %d", got.Code, want.Code)
			}
			if g, w := got.Header(), want.Header(); !equalHeaders(g, w) {
				t.Errorf("headers\n got %v\nwant %v", g, w)
			}
			if g := bytes.TrimSuffix(got.Body.Bytes(), []byte("\n")); !bytes.Equal(g, want.Body.Bytes()) {
				t.Errorf("body\n got %s\nwant %s", got.Body, want.Body)
			}
			if !strings.Contains(want.Body.String(), tc.problem) {
				t.Errorf("direct body %s, want problem %s", want.Body, tc.problem)
			}

			e = echo.New()
			e.HTTPErrorHandler = echo.ProblemDetailsHTTPErrorHandler(false)
			e.Use(echo5limit.New(tc.limiter(t), tc.opts...))
			e.GET("/items/:id", ok)
			for range tc.requests {
				got = get(e)
			}
			var gp httplimit.Problem
			if err := json.Unmarshal(got.Body.Bytes(), &gp); err != nil {
				t.Fatal(err)
			}
			p.Policy = ""
			if gp != p || got.Code != want.Code || got.Header().Get("Content-Type") != httplimit.ContentTypeProblem {
				t.Errorf("problem details handler: %d %s %+v, want %d %s %+v", got.Code, got.Header().Get("Content-Type"), gp, want.Code, httplimit.ContentTypeProblem, p)
			}
		})
	}
}

// ErrorHandler writes a refusal exactly as the direct write, whatever the
// error handler it wraps does with other errors.
func TestErrorHandler(t *testing.T) {
	own := func(c *echo.Context, err error) { c.JSON(http.StatusTeapot, map[string]string{"error": "own"}) }
	for _, tc := range refusals() {
		t.Run(tc.name, func(t *testing.T) {
			e := echo.New()
			e.HTTPErrorHandler = echo5limit.ErrorHandler(own)
			e.Use(echo5limit.New(tc.limiter(t), tc.opts...))
			e.GET("/items/:id", ok)
			direct := httplimit.Middleware(tc.limiter(t), tc.opts...)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
			var got, want *httptest.ResponseRecorder
			for range tc.requests {
				got, want = get(e), get(direct)
			}
			if got.Code != want.Code || !equalHeaders(got.Header(), want.Header()) || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
				t.Errorf("got %d %v %s\nwant %d %v %s", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
			}
		})
	}
	e := echo.New()
	e.HTTPErrorHandler = echo5limit.ErrorHandler(own)
	e.GET("/items/:id", func(*echo.Context) error { return echo.ErrForbidden })
	if w := get(e); w.Code != http.StatusTeapot {
		t.Errorf("another error: %d, want the wrapped handler's %d", w.Code, http.StatusTeapot)
	}
	e.HTTPErrorHandler = echo5limit.ErrorHandler(nil)
	if w := get(e); w.Code != http.StatusForbidden {
		t.Errorf("another error, nil handler: %d, want echo's default %d", w.Code, http.StatusForbidden)
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, ",") != strings.Join(b[k], ",") {
			return false
		}
	}
	return true
}

// With WithCountIf, an error the handler returns is counted by the status
// echo's error handler answers it with, and the error handler runs once:
// a 200 is given back, a 401 from an error stays counted.
func TestCountIfHandlerError(t *testing.T) {
	e := echo.New()
	calls := 0
	def := echo.DefaultHTTPErrorHandler(false)
	e.HTTPErrorHandler = func(c *echo.Context, err error) { calls++; def(c, err) }
	l, clock := newLimiterClock(t, 1)
	e.Use(echo5limit.New(l, httplimit.WithCountIf(httplimit.Failures), httplimit.WithClock(clock)))
	e.GET("/items/:id", func(c *echo.Context) error {
		if c.Request().Header.Get("X-Fail") != "" {
			return echo.ErrUnauthorized
		}
		return ok(c)
	})
	for i, tc := range []struct {
		fail  string
		want  int
		calls int
	}{{"", 200, 0}, {"", 200, 0}, {"yes", 401, 1}, {"", 429, 2}} {
		if w := get(e, "X-Fail", tc.fail); w.Code != tc.want || calls != tc.calls {
			t.Errorf("request %d: %d with %d error handler calls, want %d with %d", i+1, w.Code, calls, tc.want, tc.calls)
		}
	}
}

// With httplimit.WithSettle, a handler reports its cost through
// c.Request()'s context, and the request is settled at it after the
// handler.
func TestSettle(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := core.New(core.Policy{Limit: 10, Window: 10 * time.Second}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(echo5limit.New(lim, httplimit.WithSettle(), httplimit.WithClock(clock),
		httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 2, nil })))
	found := false
	e.GET("/ai", func(c *echo.Context) error {
		found = httplimit.SetCost(c.Request().Context(), 5)
		return c.String(http.StatusOK, "ok")
	})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest("GET", "/ai", nil))
	if rec.Code != 200 || !found || rec.Header().Get("RateLimit") != `"default";r=8;t=2` {
		t.Fatalf("%d %q, SetCost found a settling limit: %v", rec.Code, rec.Header().Get("RateLimit"), found)
	}
	if d, _ := lim.Peek(t.Context(), "192.0.2.1", 1); d.Remaining != 5 {
		t.Fatalf("%d left after a request that cost 5, want 5", d.Remaining)
	}
}
