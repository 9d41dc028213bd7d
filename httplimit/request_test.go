package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// accountLimiter is a RequestLimiter as a rule set is one: requests to
// /login (POSTs, here) are decided by two limits together, per account (the X-Account
// header) and per client IP; every other path by none. X-Fail makes it
// fail as the header says, to drive the Engine's error paths.
type accountLimiter struct {
	l      *core.Layered
	undos  atomic.Int64
	failAs map[string]error
}

func newAccountLimiter(t *testing.T, clock core.Clock) *accountLimiter {
	t.Helper()
	acct, err := core.New(core.Policy{Name: "account", Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ip, err := core.New(core.Policy{Name: "ip", Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.NewLayered(acct, ip)
	if err != nil {
		t.Fatal(err)
	}
	return &accountLimiter{l: l, failAs: map[string]error{
		"nokey":       &httplimit.KeyError{Limit: "account", Err: fmt.Errorf("%w: no X-Account", keyfunc.ErrNoKey)},
		"badkey":      &httplimit.KeyError{Limit: "account", Err: errors.New("account too long")},
		"unavailable": &core.UnavailableError{RetryAfter: 7 * time.Second, Err: errors.New("store down")},
		"broken":      errors.New("store answered nonsense"),
	}}
}

func (a *accountLimiter) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errors.New("accountLimiter decides requests, not keys")
}
func (a *accountLimiter) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errors.New("accountLimiter decides requests, not keys")
}
func (a *accountLimiter) Reset(context.Context, string) error { return nil }

type undo struct {
	a    *accountLimiter
	keys []string
}

func (u undo) Undo(ctx context.Context, elapsed time.Duration) error {
	u.a.undos.Add(1)
	return u.a.l.RefundKeys(ctx, u.keys, 1, elapsed)
}

func (a *accountLimiter) DecideRequest(req keyfunc.Request) (httplimit.RequestDecision, error) {
	if req.Method() != "POST" { // logins are POSTs; the rest is free
		return httplimit.RequestDecision{}, nil
	}
	if err := a.failAs[first(req.Header("X-Fail"))]; err != nil {
		return httplimit.RequestDecision{Rule: "login"}, err
	}
	keys := []string{first(req.Header("X-Account")), req.RemoteAddr()}
	if first(req.Header("X-Cost")) == "huge" {
		ld, _ := a.l.PeekKeys(req.Context(), keys, 1)
		return httplimit.RequestDecision{Decision: ld, Rule: "login", Cost: 99}, fmt.Errorf("cost 99: %w", core.ErrCostTooHigh)
	}
	ld, err := a.l.AllowKeys(req.Context(), keys, 1)
	v := httplimit.RequestDecision{Decision: ld, Rule: "login", Cost: 1}
	if err == nil && ld.Allowed {
		v.Undo = undo{a, keys}
	}
	return v, err
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func accountLogin(account string, hdr ...string) *http.Request {
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if account != "" {
		r.Header.Set("X-Account", account)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

// A RequestLimiter decides each request by the limits that apply to it,
// all or nothing; the headers list every limit, the 429 names the one that
// denied, and a path no limit applies to is served without headers.
func TestRequestLimiterDecides(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	a := newAccountLimiter(t, clock)
	var errs []error
	h := httplimit.Middleware(a, httplimit.WithErrorHook(func(_ keyfunc.Request, err error) { errs = append(errs, err) }))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	do := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 3 {
		w := do(accountLogin("alice"))
		if w.Code != 200 {
			t.Fatalf("alice's login %d: %d", i+1, w.Code)
		}
		if got, want := w.Header().Get("RateLimit"), fmt.Sprintf(`"account";r=%d;t=60, "ip";r=%d;t=60`, 2-i, 4-i); got != want {
			t.Errorf("RateLimit: %q, want %q", got, want)
		}
		if got, want := w.Header().Get("RateLimit-Policy"), `"account";q=3;w=60, "ip";q=5;w=60`; got != want {
			t.Errorf("RateLimit-Policy: %q, want %q", got, want)
		}
	}
	w := do(accountLogin("alice"))
	var p httplimit.Problem
	if w.Code != 429 || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Policy != "account" {
		t.Fatalf("alice's 4th login: %d %s, want 429 naming the account limit", w.Code, w.Body)
	}
	if got := w.Header().Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After %q, want 60", got)
	}
	// The denial counted nothing on the IP limit: bob has 2 left of it.
	for i := range 2 {
		if w := do(accountLogin("bob")); w.Code != 200 {
			t.Fatalf("bob's login %d: %d", i+1, w.Code)
		}
	}
	if w := do(accountLogin("carol")); w.Code != 429 {
		t.Fatalf("6th login from one IP: %d, want 429", w.Code)
	}
	w = do(httptest.NewRequest("GET", "/items", nil))
	if w.Code != 200 || w.Header().Get("RateLimit") != "" || w.Header().Get("RateLimit-Policy") != "" {
		t.Errorf("a path no limit applies to: %d, headers %v", w.Code, w.Header())
	}
	if len(errs) != 0 {
		t.Errorf("errors reported: %v", errs)
	}
}

// The errors of a RequestLimiter are answered as a limiter's are: key
// errors by WithNoKey and WithInvalidKey, a cost too high with 429 and the
// rate headers, a store that cannot answer with 503; each reported.
func TestRequestLimiterErrors(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		name    string
		opts    []httplimit.Option
		fail    string
		status  int
		problem string
		headers bool
	}{
		{"no key refused", nil, "nokey", 400, httplimit.ProblemInvalidKey, false},
		{"no key skipped", []httplimit.Option{httplimit.WithNoKey(httplimit.SkipKey())}, "nokey", 200, "", false},
		{"invalid key refused", []httplimit.Option{httplimit.WithNoKey(httplimit.SkipKey())}, "badkey", 400, httplimit.ProblemInvalidKey, false},
		{"unavailable", nil, "unavailable", 503, httplimit.ProblemUnavailable, false},
		{"broken", nil, "broken", 503, httplimit.ProblemUnavailable, false},
		{"cost too high", nil, "", 429, httplimit.ProblemCostTooHigh, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAccountLimiter(t, clock)
			var errs []error
			opts := append(c.opts, httplimit.WithErrorHook(func(_ keyfunc.Request, err error) { errs = append(errs, err) }))
			h := httplimit.Middleware(a, opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := accountLogin("alice", "X-Fail", c.fail)
			if c.fail == "" {
				r.Header.Set("X-Cost", "huge")
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.status {
				t.Fatalf("status %d, want %d (%s)", w.Code, c.status, w.Body)
			}
			var p httplimit.Problem
			if c.problem != "" && (json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Type != c.problem) {
				t.Errorf("problem %+v, want type %s", p, c.problem)
			}
			if got := w.Header().Get("RateLimit") != ""; got != c.headers {
				t.Errorf("rate headers %v, want %v: %v", got, c.headers, w.Header())
			}
			if c.fail == "unavailable" && w.Header().Get("Retry-After") != "7" {
				t.Errorf("Retry-After %q, want 7", w.Header().Get("Retry-After"))
			}
			if len(errs) != 1 {
				t.Errorf("%d errors reported, want 1: %v", len(errs), errs)
			}
		})
	}
}

// With WithCountIf, a request whose status is not counted is given back
// through its Undo, once; so is one a limit stacked inside refuses.
func TestRequestLimiterUndo(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	a := newAccountLimiter(t, clock)
	failing := httplimit.Middleware(a, httplimit.WithClock(clock), httplimit.WithCountIf(httplimit.Failures))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") == "right" {
			return
		}
		w.WriteHeader(401)
	}))
	for range 10 {
		w := httptest.NewRecorder()
		failing.ServeHTTP(w, accountLogin("alice", "X-Password", "right"))
		if w.Code != 200 {
			t.Fatalf("a successful login refused: %d", w.Code)
		}
	}
	if n := a.undos.Load(); n != 10 {
		t.Fatalf("%d undos, want 10", n)
	}
	for i := range 4 {
		w := httptest.NewRecorder()
		failing.ServeHTTP(w, accountLogin("alice"))
		if want := []int{401, 401, 401, 429}[i]; w.Code != want {
			t.Fatalf("failed login %d: %d, want %d", i+1, w.Code, want)
		}
	}

	// Stacked: the rule set outside, a route's limit of 1 inside.
	b := newAccountLimiter(t, clock)
	inner, _ := core.New(core.Policy{Name: "route", Limit: 1, Window: time.Minute}, core.WithClock(clock))
	h := httplimit.Middleware(b, httplimit.WithClock(clock))(httplimit.Middleware(inner, httplimit.WithClock(clock))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	codes := []int{}
	for range 4 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, accountLogin("bob"))
		codes = append(codes, w.Code)
	}
	if fmt.Sprint(codes) != "[200 429 429 429]" || b.undos.Load() != 3 {
		t.Fatalf("stacked: %v, %d undos; want [200 429 429 429], 3", codes, b.undos.Load())
	}
	// Bob's account limit holds 1 of 3: two more pass it.
	ld, _ := b.l.PeekKeys(context.Background(), []string{"bob", "192.0.2.1:1234"}, 1)
	if ld.Layers[0].Remaining != 2 {
		t.Errorf("bob's account limit: %d left, want 2", ld.Layers[0].Remaining)
	}
}

// The options a RequestLimiter makes meaningless are refused, each named.
func TestRequestLimiterOptions(t *testing.T) {
	a := newAccountLimiter(t, core.SystemClock{})
	for _, c := range []struct {
		opt  httplimit.Option
		want string
	}{
		{httplimit.WithKey(keyfunc.PeerIP), "WithKey"},
		{httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 1, nil }), "WithCost"},
		{httplimit.WithErrorPolicy(core.FailOpen()), "WithErrorPolicy"},
		{httplimit.WithNoKey(httplimit.FallbackKey(keyfunc.PeerIP)), "FallbackKey"},
	} {
		if _, err := httplimit.New(a, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New with %s: %v", c.want, err)
		}
	}
}
