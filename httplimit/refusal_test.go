package httplimit_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
)

// brokenLimiter fails every call, as a store that is down.
type brokenLimiter struct{ plainLimiter }

func (brokenLimiter) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errors.New("store down")
}

// Result.Problem and Result.RetryAfter describe every kind of refusal the
// way the HTTP response does, for adapters of other protocols.
func TestResultProblem(t *testing.T) {
	p := core.Policy{Name: "api", Limit: 2, Window: 30 * time.Second}
	exhausted := func() core.Limiter {
		l := newLimiter(t, p)
		for range 2 {
			if _, err := l.AllowN(context.Background(), "192.0.2.1", 1); err != nil {
				t.Fatal(err)
			}
		}
		return l
	}
	custom := httplimit.WithDenied(func(keyfunc.Request, core.Decision) httplimit.Response {
		return httplimit.Response{Status: 420, Body: []byte("calm down")}
	})
	for _, tt := range []struct {
		name     string
		l        core.Limiter
		opts     []httplimit.Option
		typ      string
		status   int
		policy   string
		retry    int64
		wantBody bool
	}{
		{"served", newLimiter(t, p), nil, "", 0, "", 0, false},
		{"denied", exhausted(), nil, httplimit.ProblemRateLimited, 429, "api", 15, true},
		{"denied, own response", exhausted(), []httplimit.Option{custom}, httplimit.ProblemRateLimited, 420, "api", 15, false},
		{"cost too high", newLimiter(t, p), []httplimit.Option{httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 3, nil })},
			httplimit.ProblemCostTooHigh, 429, "api", 0, true},
		{"no key", newLimiter(t, p), []httplimit.Option{httplimit.WithKey(keyfunc.Header("X-API-Key", []byte("secret"))), httplimit.WithNoKey(httplimit.RefuseKey())},
			httplimit.ProblemInvalidKey, 400, "", 0, true},
		{"bad cost", newLimiter(t, p), []httplimit.Option{httplimit.WithCost(func(keyfunc.Request) (int64, error) { return -1, nil })},
			httplimit.ProblemInvalidCost, 400, "", 0, true},
		{"fail closed", brokenLimiter{}, []httplimit.Option{httplimit.WithErrorPolicy(core.FailClosed())},
			httplimit.ProblemUnavailable, 503, "", 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := httplimit.MustNew(tt.l, append(tt.opts, httplimit.WithClock(core.NewManualClock(start)))...)
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			res := e.Check(httpview.New(r, ""))
			got := res.Problem()
			if got.Type != tt.typ || got.Status != tt.status || got.Policy != tt.policy || res.RetryAfter() != tt.retry {
				t.Errorf("Problem() = %+v, RetryAfter() = %d; want type %q, status %d, policy %q, retry %d",
					got, res.RetryAfter(), tt.typ, tt.status, tt.policy, tt.retry)
			}
			if (got.Detail != "") != tt.wantBody {
				t.Errorf("detail %q, want one: %v", got.Detail, tt.wantBody)
			}
			if res.Serve() != (tt.typ == "") {
				t.Errorf("Serve() = %v with problem %q", res.Serve(), got.Type)
			}
		})
	}
}

// brokenPolicyLimiter fails every call but has a Policy, for FallbackShare.
type brokenPolicyLimiter struct {
	brokenLimiter
	p core.Policy
}

func (l brokenPolicyLimiter) Policy() core.Policy { return l.p }

// With FallbackShare(n), the middleware over a failing limiter decides by a
// memory limiter of its policy divided by n, on the middleware's clock.
func TestFallbackShare(t *testing.T) {
	clock := core.NewManualClock(start)
	p := core.Policy{Name: "api", Limit: 10, Window: time.Minute}
	e := httplimit.MustNew(brokenPolicyLimiter{p: p}, httplimit.WithErrorPolicy(core.FallbackShare(2)), httplimit.WithClock(clock))
	check := func() httplimit.Result {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		return e.Check(httpview.New(r, ""))
	}
	for i := range 5 {
		if res := check(); !res.Serve() {
			t.Fatalf("request %d of the share of 5: %+v", i+1, res.Problem())
		}
	}
	if res := check(); res.Problem().Status != 429 || res.Problem().Policy != "api" {
		got := res.Problem()
		t.Errorf("request 6: %+v, want 429 for policy api", got)
	}
	clock.Advance(12 * time.Second) // one unit of 5 per minute back
	if res := check(); !res.Serve() {
		t.Errorf("12 s later: %+v, want served", res.Problem())
	}
}
