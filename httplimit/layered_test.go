package httplimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
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
		res := e.Check(httplimit.HTTPRequest(httptest.NewRequest("GET", "/", nil), "/"))
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

// A plain limiter's allowed path allocates nothing beyond the request view
// it always had: the layered support costs it nothing.
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
	observed, err := core.NewObserved(failover, core.ObserverFunc(func(context.Context, core.Event) {}))
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]core.Limiter{"memory": l, "failover": failover, "observed failover": observed} {
		e := httplimit.MustNew(l)
		req := httptest.NewRequest("GET", "/hello", nil)
		h := make(http.Header)
		allocs := testing.AllocsPerRun(200, func() {
			res := e.Check(httplimit.HTTPRequest(req, "/hello"))
			res.SetHeaders(h)
		})
		if allocs > 1 {
			t.Errorf("%s: %v allocations per allowed request, want at most 1 (the request view)", name, allocs)
		}
	}
}
