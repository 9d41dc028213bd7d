package rules_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/rules"
)

const loginRules = `
rules:
  - name: login
    match: {routes: [/login], methods: [POST]}
    limits:
      - {name: per-account, rate: 3/1m algorithm=fixed-window, key: "header:X-Account"}
      - {name: per-ip, rate: 5/1m algorithm=fixed-window, key: ip}
  - name: reads
    match: {methods: [GET]}
    limits:
      - {name: per-ip, rate: 100/1m, key: ip}
`

func newLoginLimiter(t *testing.T, clock core.Clock) *rules.Limiter {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(loginRules))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := rules.NewLimiter(set, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

func login(account string) *http.Request {
	r := httptest.NewRequest("POST", "/login", nil)
	r.Pattern = "POST /login"
	if account != "" {
		r.Header.Set("X-Account", account)
	}
	return r
}

// A rule set given to the middleware decides each request by its rule:
// both limits of a login together, the headers listing both, the 429
// naming the one that denied, nothing counted by a refused request; a
// request without its key refused with 400, as WithNoKey says.
func TestLimiterInMiddleware(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	lim := newLoginLimiter(t, clock)
	var errs []error
	h := httplimit.Middleware(lim, httplimit.WithClock(clock), httplimit.WithErrorHook(func(_ keyfunc.Request, err error) { errs = append(errs, err) }))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	do := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 3 {
		w := do(login("alice"))
		if w.Code != 200 {
			t.Fatalf("login %d: %d %s", i+1, w.Code, w.Body)
		}
		if got, want := w.Header().Get("RateLimit"), fmt.Sprintf(`"per-account";r=%d;t=30, "per-ip";r=%d;t=30`, 2-i, 4-i); got != want {
			t.Errorf("RateLimit %q, want %q", got, want)
		}
	}
	w := do(login("alice"))
	var p httplimit.Problem
	if w.Code != 429 || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Policy != "per-account" {
		t.Fatalf("4th login: %d %s", w.Code, w.Body)
	}
	for i := range 2 {
		if w := do(login("bob")); w.Code != 200 {
			t.Fatalf("bob's login %d: %d (alice's denial counted on the IP?)", i+1, w.Code)
		}
	}
	if w := do(login("carol")); w.Code != 429 {
		t.Fatalf("6th login from one IP: %d", w.Code)
	}
	if w := do(login("")); w.Code != 400 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "login/per-account") {
		t.Fatalf("a login without an account: %d, errors %v", w.Code, errs)
	}
	r := httptest.NewRequest("GET", "/items/1", nil)
	if w := do(r); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"per-ip";q=100;w=60` {
		t.Fatalf("a read: %d %v", w.Code, w.Header())
	}
	if w := do(httptest.NewRequest("DELETE", "/items/1", nil)); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Fatalf("a request no rule matches: %d %v", w.Code, w.Header())
	}
}

// With WithCountIf, a login that succeeds is given back through the rule
// set: only failures count.
func TestLimiterCountIf(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	lim := newLoginLimiter(t, clock)
	h := httplimit.Middleware(lim, httplimit.WithClock(clock), httplimit.WithCountIf(httplimit.Failures))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(401)
		}
	}))
	for i := range 10 {
		r := login("alice")
		r.Header.Set("X-Password", "right")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("successful login %d: %d", i+1, w.Code)
		}
	}
	codes := []int{}
	for range 4 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, login("alice"))
		codes = append(codes, w.Code)
	}
	if fmt.Sprint(codes) != "[401 401 401 429]" {
		t.Fatalf("failed logins: %v", codes)
	}
}

// The Limiter is a core.Limiter for the adapters' sake only: AllowN and
// Peek say so; Reset forgets a key in every limit.
func TestLimiterAsCoreLimiter(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	lim := newLoginLimiter(t, clock)
	if _, err := lim.AllowN(t.Context(), "k", 1); !errors.Is(err, rules.ErrRequestsOnly) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("AllowN: %v", err)
	}
	h := httplimit.Middleware(lim, httplimit.WithClock(clock))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), login("alice"))
	}
	// The key as the limits count it: a header's value is digested.
	var d rules.Decision
	if err := lim.Decide(t.Context(), keyfunc.FromHTTP(login("alice")), &d); err != nil || d.Allowed {
		t.Fatalf("Decide: %v, allowed %v", err, d.Allowed)
	}
	if err := lim.Reset(t.Context(), d.Keys[0]); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, login("alice"))
	if w.Code != 200 {
		t.Fatalf("after Reset: %d", w.Code)
	}
}
