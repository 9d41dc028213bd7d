package httplimit_test

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/keyfunc"
)

// newMux serves app on the standard ServeMux: per-route limits wrap the
// handler registered for the route's pattern, so they see r.Pattern.
func newMux(app *adaptertest.App) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range app.Routes {
		var h http.Handler = app
		if rt.Limit != nil {
			h = httplimit.Middleware(rt.Limit.Limiter, rt.Limit.Options...)(h)
		}
		pattern := rt.Method + " " + rt.Pattern
		if rt.Method == adaptertest.AnyMethod {
			pattern = rt.Pattern
		}
		mux.Handle(pattern, h)
	}
	var h http.Handler = mux
	if app.Use != nil {
		h = httplimit.Middleware(app.Use.Limiter, app.Use.Options...)(mux)
	}
	return adaptertest.Outer(app, h)
}

var muxDriver = adaptertest.Driver{
	Name: "net/http",
	Serve: func(t *testing.T, app *adaptertest.App) func(*http.Request) *http.Response {
		return adaptertest.Recorder(newMux(app))
	},
	Listen: func(t *testing.T, app *adaptertest.App) string { return adaptertest.Listen(t, newMux(app)) },
}

func TestMiddlewareBehaviour(t *testing.T) { adaptertest.Run(t, muxDriver) }

func TestMiddlewareEndToEnd(t *testing.T) { adaptertest.RunEndToEnd(t, muxDriver) }

// A route key is the ServeMux pattern that matched, without its method,
// never the raw path.
func TestMiddlewareRouteKey(t *testing.T) {
	l, err := core.New(core.Policy{Limit: 100, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	mw := httplimit.Middleware(l, httplimit.WithKey(func(r keyfunc.Request) (string, error) {
		got = append(got, r.Route())
		return "k", nil
	}))
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mux.Handle("GET /items/{id}", mw(ok))
	mux.Handle("/files/", mw(ok))
	for _, path := range []string{"/items/7", "/files/a/b"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	if want := []string{"/items/{id}", "/files/"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("routes %q, want %q", got, want)
	}
}

// With WithCountIf, the status the handler wrote decides: an informational
// 103 is not the final status, a handler that writes nothing answered 200,
// a flush commits 200, and a handler that panics stays counted. Flushing
// and hijacking work through the middleware.
func TestMiddlewareCountIf(t *testing.T) {
	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
		counted bool
	}{
		{"401", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(401) }, true},
		{"103 then 401", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(103); w.WriteHeader(401) }, true},
		{"103 then 200", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(103); w.WriteHeader(200) }, false},
		{"nothing written", func(http.ResponseWriter, *http.Request) {}, false},
		{"flushed", func(w http.ResponseWriter, _ *http.Request) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
			w.WriteHeader(500) // too late: 200 was sent
		}, false},
		{"panics", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			l, err := core.New(core.Policy{Limit: 1, Window: time.Minute}, core.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			h := httplimit.Middleware(l, httplimit.WithCountIf(httplimit.Failures), httplimit.WithClock(clock))(tt.handler)
			func() {
				defer func() { _ = recover() }()
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/login", nil))
			}()
			d, err := l.Peek(t.Context(), "192.0.2.1", 1)
			if err != nil {
				t.Fatal(err)
			}
			if counted := !d.Allowed; counted != tt.counted {
				t.Errorf("counted %v, want %v", counted, tt.counted)
			}
		})
	}

	t.Run("hijack", func(t *testing.T) {
		l, err := core.New(core.Policy{Limit: 1, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		h := httplimit.Middleware(l, httplimit.WithCountIf(httplimit.Failures))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
			rw.Flush()
		}))
		srv := httptest.NewServer(h)
		defer srv.Close()
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n"))
		status, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !strings.Contains(status, "101") {
			t.Errorf("status line %q, %v; want 101", status, err)
		}
	})
}

// The default key, remembered on the pooled view for the peer address it
// was found for, is each peer's own: requests from two peers alternating,
// and one from an address that is none, through one middleware.
func TestMiddlewarePeerKeyPerPeer(t *testing.T) {
	l, err := core.New(core.Policy{Limit: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := httplimit.Middleware(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i, tc := range []struct {
		remote string
		want   int
	}{
		{"192.0.2.1:1000", 200},
		{"192.0.2.2:1000", 200},
		{"192.0.2.1:1000", 429},
		{"192.0.2.1:2000", 429}, // another port, the same address
		{"192.0.2.2:1000", 429},
		{"[2001:db8::1]:80", 200},
		{"not an address", 400},
		{"192.0.2.3:1000", 200},
		{"[2001:db8::2]:80", 429}, // the same /64
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("request %d from %q: status %d, want %d", i+1, tc.remote, w.Code, tc.want)
		}
	}
}
