package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/observe"
)

// A layered limiter's IETF fields, byte for byte: one member per layer, in
// layer order; the 429's problem names the layer that denied.
func TestLayeredHeaderValues(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	burst, _ := core.New(core.Policy{Name: "burst", Limit: 10, Window: time.Second}, core.WithClock(clock))
	daily, _ := core.New(core.Policy{Name: "daily", Algorithm: core.FixedWindow, Limit: 1000, Window: 24 * time.Hour}, core.WithClock(clock))
	l, err := core.NewLayered(burst, daily)
	if err != nil {
		t.Fatal(err)
	}
	e := httplimit.MustNew(l)
	serve := func() (*httptest.ResponseRecorder, bool) {
		w := httptest.NewRecorder()
		res := e.Check(httpview.New(httptest.NewRequest("GET", "/", nil), "/"))
		return w, res.WriteHTTP(w)
	}
	for range 5 {
		serve()
	}
	w, served := serve()
	if !served {
		t.Fatal("6th request refused")
	}
	for name, want := range map[string]string{
		"RateLimit-Policy": `"burst";q=10;w=1, "daily";q=1000;w=86400`,
		"RateLimit":        `"burst";r=4;t=1, "daily";r=994;t=43200`,
	} {
		if got := w.Header().Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	for range 4 {
		serve()
	}
	w, served = serve()
	if served || w.Code != http.StatusTooManyRequests {
		t.Fatalf("11th request: served=%v status %d, want 429", served, w.Code)
	}
	if got, want := w.Header().Get("RateLimit"), `"burst";r=0;t=1, "daily";r=990;t=43200`; got != want {
		t.Errorf("RateLimit on the 429: %q, want %q", got, want)
	}
	var p httplimit.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Policy != "burst" {
		t.Errorf("problem %s (%v): want policy burst", w.Body, err)
	}
}

// A plain limiter's allowed path allocates nothing beyond the RateLimit
// value the http.Header keeps: the layered support costs it nothing.
func TestPlainLimiterAllocations(t *testing.T) {
	l, err := core.New(core.Policy{Limit: core.MaxLimit, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The core wrappers have AllowLayers whatever they wrap; around a plain
	// limiter they must take the plain path too.
	failover, err := core.NewFailover(l)
	if err != nil {
		t.Fatal(err)
	}
	observed, err := observe.New(failover, observe.ObserverFunc(func(context.Context, observe.Event) {}))
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]core.Limiter{"memory": l, "failover": failover, "observed failover": observed} {
		e := httplimit.MustNew(l)
		req := httptest.NewRequest("GET", "/hello", nil)
		h := make(http.Header)
		var view httpview.Request
		allocs := testing.AllocsPerRun(200, func() {
			clear(h)                       // a response's headers start empty
			view.Reset(req, "/hello", nil) // an adapter's view is pooled
			res := e.Check(&view)
			res.WriteHeaders(h)
		})
		if allocs > maxAllocs() {
			t.Errorf("%s: %v allocations per allowed request, want at most %v", name, allocs, maxAllocs())
		}
	}
}

// down is a limiter whose store is down, with no Policy method: a Failover
// over it cannot know its policy.
type down struct{}

var errDown = errors.New("store down")

func (down) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errDown
}
func (down) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errDown
}
func (down) Reset(context.Context, string) error { return errDown }

type downLayers struct{ down }

func (downLayers) AllowLayers(context.Context, string, int64) (core.LayeredDecision, error) {
	return core.LayeredDecision{}, errDown
}
func (downLayers) PeekLayers(context.Context, string, int64) (core.LayeredDecision, error) {
	return core.LayeredDecision{}, errDown
}

// In an outage, a Failover over a limiter of unknown policy decides alone:
// no RateLimit fields then (a limit of 0 would be a lie), and a fail-closed
// 503 says when to retry.
func TestOutageWithoutPolicyWritesNoRateHeaders(t *testing.T) {
	for _, remote := range []core.Limiter{down{}, downLayers{}} {
		for name, mode := range map[string]core.FailoverOption{"open": core.WithErrorPolicy(core.FailOpen()), "closed": core.WithErrorPolicy(core.FailClosed())} {
			f, err := core.NewFailover(remote, mode)
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			res := httplimit.MustNew(f).Check(httpview.New(httptest.NewRequest("GET", "/", nil), "/"))
			res.WriteHTTP(w)
			if got := w.Header().Values("RateLimit"); len(got) != 0 || len(w.Header().Values("RateLimit-Policy")) != 0 {
				t.Errorf("%T, fail %s: RateLimit %q, RateLimit-Policy %q, want none", remote, name, got, w.Header().Values("RateLimit-Policy"))
			}
			if name == "closed" && (w.Code != 503 || w.Header().Get("Retry-After") != "1" || res.Problem().Type != httplimit.ProblemUnavailable) {
				t.Errorf("%T, fail closed: status %d, Retry-After %q, want 503 with Retry-After: 1", remote, w.Code, w.Header().Get("Retry-After"))
			}
			if name == "open" && !res.Serve() {
				t.Errorf("%T, fail open: not served", remote)
			}
		}
	}
}
