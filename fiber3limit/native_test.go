package fiber3limit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiber3limit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/keyfunc"
)

// limiter returns a limiter of limit requests per minute on a manual
// clock.
func limiter(t *testing.T, limit int64) core.Limiter {
	t.Helper()
	l, err := core.New(core.Policy{Name: "api", Limit: limit, Window: time.Minute}, core.WithClock(core.NewManualClock(adaptertest.Start)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// errorLog is a WithErrorHook hook recording the errors it receives.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) hook() httplimit.Option {
	return httplimit.WithErrorHook(func(_ keyfunc.Request, err error) {
		l.mu.Lock()
		l.errs = append(l.errs, err)
		l.mu.Unlock()
	})
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

type answer struct {
	status int
	body   string
	header http.Header
}

func send(t *testing.T, app *fiber.App, method, path string, header ...string) answer {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := app.Test(req, fiber.TestConfig{Timeout: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, string(body), resp.Header}
}

func statuses(t *testing.T, app *fiber.App, method, path string, n int, header ...string) []int {
	t.Helper()
	var got []int
	for range n {
		got = append(got, send(t, app, method, path, header...).status)
	}
	return got
}

func checkStatuses(t *testing.T, what string, got []int, want ...int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: statuses %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: statuses %v, want %v", what, got, want)
			return
		}
	}
}

func newFiber(cfg ...fiber.Config) *fiber.App { return fiber.New(cfg...) }

func hello(c fiber.Ctx) error { return c.SendString("hello") }

// auth is an app's authentication middleware: it stores the user of the
// X-User header with c.Locals.
func auth(c fiber.Ctx) error {
	if u := c.Get("X-User"); u != "" {
		c.Locals("user", u)
	}
	return c.Next()
}

// A key set by earlier middleware with c.Locals is a key: alice's limit is
// hers, bob's his, on one address.
func TestKeyGeneratorReadsLocals(t *testing.T) {
	app := newFiber()
	app.Use(auth)
	app.Use(fiber3limit.New(limiter(t, 1), fiber3limit.WithKeyGenerator(func(c fiber.Ctx) (string, error) {
		u, _ := c.Locals("user").(string)
		if u == "" {
			return "", keyfunc.ErrNoKey
		}
		return "user:" + u, nil
	})))
	app.Get("/hello", hello)
	checkStatuses(t, "alice", statuses(t, app, "GET", "/hello", 2, "X-User", "alice"), 200, 429)
	checkStatuses(t, "bob", statuses(t, app, "GET", "/hello", 2, "X-User", "bob"), 200, 429)
	checkStatuses(t, "no user", statuses(t, app, "GET", "/hello", 1), 400)
}

func TestNativeCostAndNext(t *testing.T) {
	app := newFiber()
	app.Use(fiber3limit.New(limiter(t, 10),
		fiber3limit.WithCost(func(c fiber.Ctx) (int64, error) {
			if c.Path() == "/export" {
				return 10, nil
			}
			return 1, nil
		}),
		fiber3limit.WithNext(func(c fiber.Ctx) bool { return c.Path() == "/health" }),
	))
	app.Get("/hello", hello)
	app.Get("/export", hello)
	app.Get("/health", hello)
	health := send(t, app, "GET", "/health")
	if health.status != 200 || health.header.Get("RateLimit") != "" {
		t.Errorf("skipped by Next: status %d, RateLimit %q; want 200 without rate headers", health.status, health.header.Get("RateLimit"))
	}
	checkStatuses(t, "hello, then an export of 10", []int{send(t, app, "GET", "/hello").status, send(t, app, "GET", "/export").status}, 200, 429)
	if got := send(t, app, "GET", "/hello").header.Get("RateLimit"); got != `"api";r=8;t=12` {
		t.Errorf("after two of 10 units: RateLimit %q, want %q", got, `"api";r=8;t=12`)
	}
}

// A native function given to another adapter, or called outside the
// middleware, refuses the request with a reported error; it never panics.
func TestNativeOutsideFiber(t *testing.T) {
	var log errorLog
	h := httplimit.Middleware(limiter(t, 10), log.hook(),
		fiber3limit.WithKeyGenerator(func(c fiber.Ctx) (string, error) { return c.IP(), nil }),
		fiber3limit.WithNext(func(c fiber.Ctx) bool { return true }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 400 {
		t.Errorf("status %d, want 400", w.Code)
	}
	errs := log.all()
	if len(errs) != 1 || !errors.Is(errs[0], keyfunc.ErrInvalidKey) || !strings.Contains(errs[0].Error(), "fiber3limit.New only") {
		t.Errorf("errors reported %v, want one naming fiber3limit.New, wrapping keyfunc.ErrInvalidKey", errs)
	}

	c := httplimit.Middleware(limiter(t, 10), fiber3limit.WithCost(func(fiber.Ctx) (int64, error) { return 1, nil }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	w = httptest.NewRecorder()
	c.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 400 {
		t.Errorf("native cost outside fiber: status %d, want 400", w.Code)
	}
}

// A nil function is what the httplimit option's nil is.
func TestNativeNil(t *testing.T) {
	for _, tc := range []struct {
		name         string
		native, http httplimit.Option
	}{
		{"WithKeyGenerator(nil)", fiber3limit.WithKeyGenerator(nil), httplimit.WithKey(nil)},
		{"WithCost(nil)", fiber3limit.WithCost(nil), httplimit.WithCost(nil)},
		{"WithNext(nil)", fiber3limit.WithNext(nil), httplimit.WithSkip(nil)},
		{"WithLimitReached(nil)", fiber3limit.WithLimitReached(nil), httplimit.WithDenied(nil)},
	} {
		_, got := httplimit.New(limiter(t, 1), tc.native)
		_, want := httplimit.New(limiter(t, 1), tc.http)
		if (got == nil) != (want == nil) {
			t.Errorf("%s: New error %v, want as its httplimit option's: %v", tc.name, got, want)
		}
	}
}

// The LimitReached handler answers a denial with the rate headers and
// Retry-After already set; the other refusals are the middleware's.
func TestLimitReached(t *testing.T) {
	app := newFiber()
	app.Use(fiber3limit.New(limiter(t, 1), fiber3limit.WithLimitReached(func(c fiber.Ctx) error {
		return c.SendString("slow down, retry in " + string(c.Response().Header.Peek("Retry-After")) + "s")
	})))
	app.Get("/hello", hello)
	send(t, app, "GET", "/hello")
	got := send(t, app, "GET", "/hello")
	if got.status != 429 || got.body != "slow down, retry in 60s" {
		t.Errorf("denied: %d %q, want 429 %q", got.status, got.body, "slow down, retry in 60s")
	}
	if rl, ra := got.header.Get("RateLimit"), got.header.Get("Retry-After"); rl != `"api";r=0;t=60` || ra != "60" {
		t.Errorf("denied: RateLimit %q, Retry-After %q; want %q, 60", rl, ra, `"api";r=0;t=60`)
	}
}

// A route key under app.Use or a group's Use finds no key, reported and
// refused, instead of counting every route under the Use's prefix; on the
// route it is the route's pattern.
func TestRouteKeyUnderUse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		register func(app *fiber.App, mw fiber.Handler)
		want     []int
	}{
		{"app.Use", func(app *fiber.App, mw fiber.Handler) {
			app.Use(mw)
			app.Get("/a/:id", hello)
			app.Get("/b/:id", hello)
		}, []int{400, 400}},
		{"group Use", func(app *fiber.App, mw fiber.Handler) {
			g := app.Group("/api")
			g.Use(mw)
			g.Get("/a/:id", hello)
			g.Get("/b/:id", hello)
		}, []int{400, 400}},
		{"app.Use with a prefix", func(app *fiber.App, mw fiber.Handler) {
			app.Use("/api", mw)
			app.Get("/api/a/:id", hello)
			app.Get("/api/b/:id", hello)
		}, []int{400, 400}},
		{"on the route", func(app *fiber.App, mw fiber.Handler) {
			app.Get("/api/a/:id", mw, hello)
			app.Get("/api/b/:id", mw, hello)
		}, []int{200, 200}},
		{"on a group's route", func(app *fiber.App, mw fiber.Handler) {
			g := app.Group("/api")
			g.Get("/a/:id", mw, hello)
			g.Get("/b/:id", mw, hello)
		}, []int{200, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log errorLog
			app := newFiber()
			tc.register(app, fiber3limit.New(limiter(t, 1), httplimit.WithKey(keyfunc.Route), log.hook()))
			prefix := ""
			if tc.name != "app.Use" {
				prefix = "/api"
			}
			got := []int{send(t, app, "GET", prefix+"/a/1").status, send(t, app, "GET", prefix+"/b/2").status}
			checkStatuses(t, "one request to each of two routes", got, tc.want...)
			errs := log.all()
			if tc.want[0] == 400 {
				if len(errs) != 2 || !errors.Is(errs[0], keyfunc.ErrNoKey) {
					t.Errorf("errors reported %v, want 2 wrapping keyfunc.ErrNoKey", errs)
				}
				return
			}
			if len(errs) != 0 {
				t.Errorf("errors reported %v, want none", errs)
			}
			// The route's pattern is the key: another ID counts with it.
			if s := send(t, app, "GET", prefix+"/a/3").status; s != 429 {
				t.Errorf("second request to /a/:id: status %d, want 429", s)
			}
		})
	}
}
