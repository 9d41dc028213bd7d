package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// An app-wide limit and a route's limit stacked on one request decide
// together: a request the route's limit refuses (429, or 400 for a missing
// key) is counted by neither, so the app's quota is not spent by requests
// the route turns away; the app's RateLimit member stays on the refusal. A
// writer between the two limits that unwraps (as http.ResponseController
// expects) keeps them linked.
func TestStackedLimitsDecideTogether(t *testing.T) {
	clock := core.NewManualClock(start)
	for name, between := range map[string]func(http.Handler) http.Handler{
		"adjacent": func(h http.Handler) http.Handler { return h },
		"a wrapping writer between": func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(&unwrapping{w}, r) })
		},
	} {
		t.Run(name, func(t *testing.T) {
			app, err := core.New(core.Policy{Name: "app", Limit: 3, Window: time.Hour}, core.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			route, err := core.New(core.Policy{Name: "route", Limit: 1, Window: time.Hour}, core.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
			mux := http.NewServeMux()
			mux.Handle("/limited", between(httplimit.Middleware(route, httplimit.WithClock(clock))(ok)))
			mux.Handle("/keyed", between(httplimit.Middleware(route, httplimit.WithClock(clock), httplimit.WithKey(keyfunc.Header("X-Key", nil)))(ok)))
			mux.Handle("/open", ok)
			h := httplimit.Middleware(app, httplimit.WithClock(clock))(mux)
			send := func(path string) *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				r := httptest.NewRequest("GET", path, nil)
				r.RemoteAddr = "192.0.2.1:1234"
				h.ServeHTTP(w, r)
				return w
			}
			if w := send("/limited"); w.Code != 200 {
				t.Fatalf("first: %d", w.Code)
			}
			for range 5 {
				w := send("/limited")
				if w.Code != 429 {
					t.Fatalf("the route's limit let a second request through: %d", w.Code)
				}
				if got := w.Header().Values("RateLimit"); len(got) != 2 || got[0] != `"app";r=1;t=2400` {
					t.Errorf("refusal's RateLimit %q, want the app's member, as it was with the request counted, then the route's", got)
				}
			}
			if w := send("/keyed"); w.Code != 400 {
				t.Fatalf("no key: %d", w.Code)
			}
			// The app counted the first request only: two units left.
			for i, want := range []int{200, 200, 429} {
				if w := send("/open"); w.Code != want {
					t.Errorf("open request %d: %d, want %d (app remaining %q)", i+1, w.Code, want, w.Header().Get("RateLimit"))
				}
			}
		})
	}
}

// unwrapping is a writer wrapper of another middleware that unwraps.
type unwrapping struct{ http.ResponseWriter }

func (u *unwrapping) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// Middleware around a ServeMux keys a route key by the pattern the mux
// will match, as middleware around the registered handler does: HEAD by
// its GET route, a path no route serves by no route (refused, 400).
func TestMiddlewareAroundMuxKnowsTheRoute(t *testing.T) {
	var keys []string
	l := newLimiter(t, core.Policy{Limit: 100, Window: time.Minute})
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
	mux.Handle("GET /items/{id}", ok)
	mux.Handle("/any/{id}", ok)
	h := httplimit.Middleware(l, httplimit.WithKey(func(r keyfunc.Request) (string, error) {
		k, err := keyfunc.Route(r)
		if err != nil {
			keys = append(keys, "error")
		} else {
			keys = append(keys, k)
		}
		return k, err
	}))(mux)
	for _, tc := range []struct {
		method, path, want string
		status             int
	}{
		{"GET", "/items/7", "/items/{id}", 200},
		{"HEAD", "/items/8", "/items/{id}", 200},
		{"PURGE", "/any/1", "/any/{id}", 200},
		{"GET", "/nowhere", "error", 400},
	} {
		keys = keys[:0]
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
		if len(keys) != 1 || keys[0] != tc.want || w.Code != tc.status {
			t.Errorf("%s %s: keys %q status %d, want [%q] %d", tc.method, tc.path, keys, w.Code, tc.want, tc.status)
		}
	}
}
