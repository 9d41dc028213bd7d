package ginlimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/keyfunc"
)

func init() { gin.SetMode(gin.ReleaseMode) }

func newApp(app *adaptertest.App) http.Handler {
	r := gin.New()
	if app.Use != nil {
		r.Use(ginlimit.New(app.Use.Limiter, app.Use.Options...))
	}
	handle := func(c *gin.Context) {
		body, _ := io.ReadAll(c.Request.Body)
		status, out := app.Handle(c.GetHeader(adaptertest.StatusHeader), body)
		c.Data(status, "text/plain", out)
	}
	for _, rt := range app.Routes {
		var hs []gin.HandlerFunc
		if rt.Limit != nil {
			hs = append(hs, ginlimit.New(rt.Limit.Limiter, rt.Limit.Options...))
		}
		if rt.Method == adaptertest.AnyMethod {
			r.Any(adaptertest.ColonPattern(rt.Pattern), append(hs, handle)...)
		} else {
			r.Handle(rt.Method, adaptertest.ColonPattern(rt.Pattern), append(hs, handle)...)
		}
	}
	return adaptertest.Outer(app, r)
}

var driver = adaptertest.Driver{
	Name: "gin",
	Serve: func(t *testing.T, app *adaptertest.App) func(*http.Request) *http.Response {
		return adaptertest.Recorder(newApp(app))
	},
	Listen: func(t *testing.T, app *adaptertest.App) string { return adaptertest.Listen(t, newApp(app)) },
}

func TestBehaviour(t *testing.T) { adaptertest.Run(t, driver) }

func TestEndToEnd(t *testing.T) { adaptertest.RunEndToEnd(t, driver) }

// A user an authentication middleware stored with c.Set is the key: alice
// and bob, on one address, each get their own limit of 1; a request with no
// user is refused, not keyed by its address.
func TestNativeKey(t *testing.T) {
	l, err := core.New(core.Policy{Limit: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("user", u)
		}
	})
	r.Use(ginlimit.New(l,
		ginlimit.WithKey(func(c *gin.Context) (string, error) {
			if u := c.GetString("user"); u != "" {
				return u, nil
			}
			return "", keyfunc.ErrNoKey
		}),
		ginlimit.WithCost(func(c *gin.Context) (int64, error) { return 1, nil }),
		ginlimit.WithSkip(func(c *gin.Context) bool { return c.GetString("user") == "root" }),
	))
	r.GET("/", func(c *gin.Context) { c.String(200, "ok") })
	for _, tc := range []struct {
		user string
		want int
	}{{"alice", 200}, {"bob", 200}, {"alice", 429}, {"", 400}, {"root", 200}, {"root", 200}} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		if tc.user != "" {
			req.Header.Set("X-User", tc.user)
		}
		r.ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("user %q: %d, want %d", tc.user, w.Code, tc.want)
		}
	}
}

// Outside ginlimit's middleware a native key function is not called: the
// request is refused, not keyed by something else.
func TestNativeKeyOutside(t *testing.T) {
	l, err := core.New(core.Policy{Limit: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	called := false
	var hooked error
	h := httplimit.Middleware(l, ginlimit.WithKey(func(*gin.Context) (string, error) { called = true; return "k", nil }),
		httplimit.WithErrorHook(func(_ keyfunc.Request, err error) { hooked = err }))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if called || w.Code != 400 || hooked == nil || !strings.Contains(hooked.Error(), "ginlimit") {
		t.Errorf("outside ginlimit: called %v, status %d, hook %v; want not called, 400, a ginlimit error", called, w.Code, hooked)
	}
}

// With httplimit.WithSettle, a handler reports its cost through
// c.Request's context, and the request is settled at it after the
// handlers.
func TestSettle(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := core.New(core.Policy{Limit: 10, Window: 10 * time.Second}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(ginlimit.New(lim, httplimit.WithSettle(), httplimit.WithClock(clock),
		httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 2, nil })))
	found := false
	r.GET("/ai", func(c *gin.Context) {
		found = httplimit.SetCost(c.Request.Context(), 7)
		c.String(http.StatusOK, "ok")
	})
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/ai", nil))
	if rec.Code != 200 || !found || rec.Header().Get("RateLimit") != `"default";r=8;t=2` {
		t.Fatalf("%d %q, SetCost found a settling limit: %v", rec.Code, rec.Header().Get("RateLimit"), found)
	}
	if d, _ := lim.Peek(t.Context(), "192.0.2.1", 1); d.Remaining != 3 {
		t.Fatalf("%d left after a request that cost 7, want 3", d.Remaining)
	}
}
