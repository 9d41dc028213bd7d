package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/observe"
)

// hookLog records what the error hook is told.
type hookLog struct{ errs []error }

func (h *hookLog) hook(_ keyfunc.Request, err error) { h.errs = append(h.errs, err) }

// loginRequest is a POST /login from peer whose body carries no email the
// limiter can read.
func loginRequest(peer string) keyfunc.Request {
	r := httptest.NewRequest("POST", "/login", strings.NewReader(`{"password":"guess"}`))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = peer
	return httpview.New(r, "/login")
}

// By default, a request whose key function finds nothing is refused, never
// keyed by its address: a login without a readable account, from 40
// addresses, gets 40 refusals, each reported, none served.
func TestNoKeyDefaultRefuses(t *testing.T) {
	var log hookLog
	e := httplimit.MustNew(newLimiter(t, core.Policy{Name: "login", Algorithm: core.SlidingLog, Limit: 5, Window: 15 * time.Minute}),
		httplimit.WithKey(keyfunc.Email("email")), httplimit.WithCountIf(httplimit.Failures), httplimit.WithErrorHook(log.hook))
	for i := range 40 {
		res := e.Check(loginRequest(fmt.Sprintf("198.51.100.%d:1", i+1)))
		if res.Serve() {
			res.Done(http.StatusUnauthorized)
			t.Fatalf("request %d without an account served (keyed by its address)", i+1)
		}
		if p := res.Problem(); p.Type != httplimit.ProblemInvalidKey || p.Status != http.StatusBadRequest {
			t.Fatalf("request %d: %+v, want 400 %s", i+1, p, httplimit.ProblemInvalidKey)
		}
	}
	if len(log.errs) != 40 {
		t.Fatalf("hook told %d errors, want 40", len(log.errs))
	}
	for _, err := range log.errs {
		if !errors.Is(err, keyfunc.ErrNoKey) || errors.Is(err, httplimit.ErrKeyFallback) {
			t.Fatalf("hook error %v: want one wrapping keyfunc.ErrNoKey and not ErrKeyFallback", err)
		}
	}
}

// Every request served without its own key, by the fallback key or
// unlimited, is reported once with an error wrapping ErrKeyFallback and
// the key function's error; a fallback that fails too refuses the request,
// reported once with both errors.
func TestKeyFallbackReported(t *testing.T) {
	noKey := func(keyfunc.Request) (string, error) { return "", keyfunc.ErrNoKey }
	badKey := func(keyfunc.Request) (string, error) { return "", keyfunc.ErrInvalidKey }
	for _, tt := range []struct {
		name    string
		key     keyfunc.Func
		opt     httplimit.Option
		peer    string
		keyErr  error
		serve   bool
		rate    bool // served with rate headers: limited by the fallback key
		wantErr []error
	}{
		{"no key, fallback", noKey, httplimit.WithNoKey(httplimit.FallbackKey(keyfunc.PeerIP)), "192.0.2.1:1", keyfunc.ErrNoKey, true, true,
			[]error{httplimit.ErrKeyFallback, keyfunc.ErrNoKey}},
		{"no key, skipped", noKey, httplimit.WithNoKey(httplimit.SkipKey()), "192.0.2.1:1", keyfunc.ErrNoKey, true, false,
			[]error{httplimit.ErrKeyFallback, keyfunc.ErrNoKey}},
		{"invalid key, fallback", badKey, httplimit.WithInvalidKey(httplimit.FallbackKey(keyfunc.PeerIP)), "192.0.2.1:1", keyfunc.ErrInvalidKey, true, true,
			[]error{httplimit.ErrKeyFallback, keyfunc.ErrInvalidKey}},
		{"invalid key, skipped", badKey, httplimit.WithInvalidKey(httplimit.SkipKey()), "192.0.2.1:1", keyfunc.ErrInvalidKey, true, false,
			[]error{httplimit.ErrKeyFallback, keyfunc.ErrInvalidKey}},
		{"fallback fails too", noKey, httplimit.WithNoKey(httplimit.FallbackKey(keyfunc.PeerIP)), "@unix", keyfunc.ErrNoKey, false, false,
			[]error{keyfunc.ErrNoKey}},
		{"no key, refused", noKey, httplimit.WithNoKey(httplimit.RefuseKey()), "192.0.2.1:1", keyfunc.ErrNoKey, false, false,
			[]error{keyfunc.ErrNoKey}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log hookLog
			e := httplimit.MustNew(newLimiter(t, core.Policy{Name: "api", Limit: 10, Window: time.Minute}),
				httplimit.WithKey(tt.key), tt.opt, httplimit.WithErrorHook(log.hook))
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.peer
			res := e.Check(httpview.New(r, "/"))
			w := httptest.NewRecorder()
			if served := res.WriteHTTP(w); served != tt.serve {
				t.Fatalf("served %v, want %v (%+v)", served, tt.serve, res.Problem())
			}
			if got := w.Header().Get("RateLimit") != ""; got != tt.rate {
				t.Errorf("rate headers %v, want %v", w.Header(), tt.rate)
			}
			if len(log.errs) != 1 {
				t.Fatalf("hook told %v, want one error", log.errs)
			}
			err := log.errs[0]
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("hook error %q does not wrap %v", err, want)
				}
			}
			if fallback := errors.Is(err, httplimit.ErrKeyFallback); fallback != tt.serve {
				t.Errorf("hook error %q wraps ErrKeyFallback: %v, want %v", err, fallback, tt.serve)
			}
		})
	}
}

// A request keyed by its FallbackKey function reaches the limiter's
// observers marked as such (observe.Event.KeyFallback), so that metrics
// count it apart; one keyed by its own key does not.
func TestFallbackKeyObserved(t *testing.T) {
	var events []observe.Event
	obs := observe.ObserverFunc(func(_ context.Context, e observe.Event) { events = append(events, e) })
	l, err := observe.New(newLimiter(t, core.Policy{Name: "login", Limit: 5, Window: time.Minute}), obs)
	if err != nil {
		t.Fatal(err)
	}
	e := httplimit.MustNew(l, httplimit.WithKey(keyfunc.Email("email")), httplimit.WithNoKey(httplimit.FallbackKey(keyfunc.PeerIP)))
	e.Check(loginRequest("198.51.100.1:1"))
	r := httptest.NewRequest("POST", "/login", strings.NewReader(`{"email":"ana@example.com"}`))
	r.Header.Set("Content-Type", "application/json")
	e.Check(httpview.New(r, "/login"))
	if len(events) != 2 || !events[0].KeyFallback || events[1].KeyFallback {
		t.Fatalf("events %+v; want the fallback-keyed one marked, the other not", events)
	}
}
