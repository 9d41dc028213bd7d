package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
	"github.com/ratekit/ratekit/keyfunc"
)

func newInFlight(t *testing.T, n int64) *inflight.Memory {
	t.Helper()
	m, err := inflight.New(n)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A handler that panics gives its lease back: the next request of the key
// gets the only slot.
func TestInFlightPanicReleases(t *testing.T) {
	m := newInFlight(t, 1)
	rate, _ := core.New(core.Policy{Limit: 100, Window: time.Minute})
	h := httplimit.Middleware(rate, httplimit.WithInFlight(m))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Panic") != "" {
			panic(http.ErrAbortHandler)
		}
	}))
	serve := func(panics bool) (status int, panicked any) {
		req := httptest.NewRequest("GET", "/", nil)
		if panics {
			req.Header.Set("X-Panic", "1")
		}
		w := httptest.NewRecorder()
		defer func() { panicked = recover(); status = w.Code }()
		h.ServeHTTP(w, req)
		return
	}
	for i := range 3 {
		if _, p := serve(true); p != http.ErrAbortHandler {
			t.Fatalf("request %d: recovered %v, want the handler's panic", i+1, p)
		}
		if n := m.InFlight("192.0.2.1"); n != 0 {
			t.Fatalf("after panic %d: %d in flight, want 0", i+1, n)
		}
	}
	if status, _ := serve(false); status != 200 {
		t.Fatalf("after the panics: %d, want 200", status)
	}
}

// A request over the cap in a dry run is reported and served, without a
// lease.
func TestInFlightDryRun(t *testing.T) {
	m := newInFlight(t, 1)
	rate, _ := core.New(core.Policy{Limit: 100, Window: time.Minute})
	var reported []core.Decision
	var inner http.Handler
	h := httplimit.Middleware(rate, httplimit.WithInFlight(m), httplimit.WithDryRun(func(_ keyfunc.Request, d core.Decision) {
		reported = append(reported, d)
	}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Nested") == "" {
			// While this request holds the only lease, one more of the key.
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-Nested", "1")
			rec := httptest.NewRecorder()
			inner.ServeHTTP(rec, req)
			w.WriteHeader(rec.Code)
		}
	}))
	inner = h
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 200 || len(reported) != 1 || reported[0].Limit != 1 || reported[0].RetryAfter != time.Second {
		t.Fatalf("dry run: nested request %d, reported %+v; want 200 and one report of Limit 1, RetryAfter 1s", w.Code, reported)
	}
	if n := m.InFlight("192.0.2.1"); n != 0 {
		t.Fatalf("%d in flight after both ended, want 0", n)
	}
}

// With a nil limiter, New fails.
func TestInFlightNewRejects(t *testing.T) {
	rate, _ := core.New(core.Policy{Limit: 1, Window: time.Second})
	if _, err := httplimit.New(rate, httplimit.WithInFlight(nil)); err == nil {
		t.Error("WithInFlight(nil): New succeeded")
	}
}

// An allowed request with a cap in flight on memory allocates nothing more
// than one without.
func TestInFlightAllocs(t *testing.T) {
	m := newInFlight(t, 4)
	rate, _ := core.New(core.Policy{Limit: 1_000_000_000, Window: time.Second})
	for _, c := range []struct {
		name string
		opts []httplimit.Option
	}{
		{"without", nil},
		{"with", []httplimit.Option{httplimit.WithInFlight(m)}},
	} {
		h := httplimit.Middleware(rate, c.opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		req := httptest.NewRequest("GET", "/", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		allocs := testing.AllocsPerRun(200, func() {
			clear(w.Header())
			h.ServeHTTP(w, req)
		})
		if allocs > maxAllocs() {
			t.Errorf("%s a cap in flight: %.1f allocations per request, want at most %v", c.name, allocs, maxAllocs())
		}
	}
}

// With a Layered limit, the cap and the layers decide one outcome: a
// request over the cap counts in no layer, and one a layer denies holds no
// lease.
func TestInFlightLayered(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	burst, _ := core.New(core.Policy{Name: "burst", Limit: 2, Window: time.Second}, core.WithClock(clock))
	daily, _ := core.New(core.Policy{Name: "daily", Limit: 100, Window: 24 * time.Hour}, core.WithClock(clock))
	layered, err := core.NewLayered(burst, daily)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := inflight.New(1, inflight.WithClock(clock))
	var h http.Handler
	var nested int
	h = httplimit.Middleware(layered, httplimit.WithInFlight(m))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Nested") == "" {
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-Nested", "1")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			nested = rec.Code
		}
	}))
	serve := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w.Code
	}
	if got := serve(); got != 200 || nested != 429 {
		t.Fatalf("first request %d, the one made while it ran %d; want 200 and 429", got, nested)
	}
	for _, l := range []*core.Memory{burst, daily} {
		if d, _ := l.Peek(t.Context(), "192.0.2.1", 1); d.Remaining != d.Limit-1 {
			t.Errorf("layer %s: %d remaining, want %d: the request over the cap counted nothing", d.Policy.Name, d.Remaining, d.Limit-1)
		}
	}
	// The second request's nested one is over the cap too; the third is
	// denied by the burst layer and must hold no lease.
	serve()
	if got := serve(); got != 429 {
		t.Fatalf("third request in the second: %d, want 429 from the burst layer", got)
	}
	if n := m.InFlight("192.0.2.1"); n != 0 {
		t.Fatalf("%d in flight after a layer denied, want 0", n)
	}
	clock.Advance(time.Second)
	if got := serve(); got != 200 {
		t.Fatalf("a second later: %d, want 200", got)
	}
}
