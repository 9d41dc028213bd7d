package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, p core.Policy) core.Limiter {
	t.Helper()
	l, err := core.New(p, core.WithClock(core.NewManualClock(start)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	l := newLimiter(t, core.Policy{Limit: 1, Window: time.Second})
	for _, tc := range []struct {
		name string
		l    core.Limiter
		opts []httplimit.Option
		want string
	}{
		{"nil limiter", nil, nil, "New: a limiter is required"},
		{"nil option", l, []httplimit.Option{nil}, "New: option 1 is nil"},
		{"nil option after a good one", l, []httplimit.Option{httplimit.WithHeaders(httplimit.IETFHeaders), nil}, "New: option 2 is nil"},
		{"WithClock(nil)", l, []httplimit.Option{httplimit.WithClock(nil)}, "WithClock(nil): a clock is required"},
		{"WithKey(nil)", l, []httplimit.Option{httplimit.WithKey(nil)}, "WithKey(nil): a key function is required"},
		{"WithCost(nil)", l, []httplimit.Option{httplimit.WithCost(nil)}, "WithCost(nil): a function is required"},
		{"WithSkip(nil)", l, []httplimit.Option{httplimit.WithSkip(nil)}, "WithSkip(nil): a function is required"},
		{"WithDenied(nil)", l, []httplimit.Option{httplimit.WithDenied(nil)}, "WithDenied(nil): a function is required"},
		{"WithErrorHook(nil)", l, []httplimit.Option{httplimit.WithErrorHook(nil)}, "WithErrorHook(nil): a function is required"},
		{"WithDryRun(nil)", l, []httplimit.Option{httplimit.WithDryRun(nil)}, "WithDryRun(nil): a function is required"},
		{"WithCountIf(nil)", l, []httplimit.Option{httplimit.WithCountIf(nil)}, "WithCountIf(nil): a function is required"},
		{"WithMaxBodyBytes(-1)", l, []httplimit.Option{httplimit.WithMaxBodyBytes(-1)}, "WithMaxBodyBytes(-1): must not be negative"},
		{"Fallback(nil)", l, []httplimit.Option{httplimit.WithErrorPolicy(core.Fallback(nil))}, "Fallback(nil)"},
		{"FallbackShare(0)", l, []httplimit.Option{httplimit.WithErrorPolicy(core.FallbackShare(0))}, "FallbackShare(0)"},
		{"FallbackShare, no policy", plainLimiter{}, []httplimit.Option{httplimit.WithErrorPolicy(core.FallbackShare(2))}, "no Policy to share"},
		{"FallbackKey(nil)", l, []httplimit.Option{httplimit.WithNoKey(httplimit.FallbackKey(nil))}, "FallbackKey(nil)"},
		{"unknown header style", l, []httplimit.Option{httplimit.WithHeaders(1 << 7)}, "unknown header style"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httplimit.New(tc.l, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "httplimit: ") {
				t.Errorf("New: error %v, want one naming %q", err, tc.want)
			}
			defer func() {
				if recover() == nil {
					t.Error("MustNew did not panic")
				}
			}()
			httplimit.MustNew(tc.l, tc.opts...)
		})
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 1}, {0, 1}, {time.Nanosecond, 1}, {time.Second, 1},
		{time.Second + time.Microsecond, 2}, {11500 * time.Millisecond, 12}, {12 * time.Second, 12},
		{1<<63 - 1, (1<<63-1)/int64(time.Second) + 1},
	} {
		if got := httplimit.RetryAfterSeconds(tc.d); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestDeniedResponseDetail(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{300 * time.Millisecond, `"detail":"Try again in 1 second."`},
		{11100 * time.Millisecond, `"detail":"Try again in 12 seconds."`},
	} {
		r := httplimit.DeniedResponse(core.Decision{RetryAfter: tc.d})
		if !strings.Contains(string(r.Body), tc.want) || !strings.Contains(string(r.Body), `"policy":"default"`) || r.Status != 429 {
			t.Errorf("DeniedResponse(%v) = %d %s, want 429 with %s", tc.d, r.Status, r.Body, tc.want)
		}
	}
}

// fixed is a limiter that returns one decision.
type fixed struct{ d core.Decision }

func (f fixed) AllowN(context.Context, string, int64) (core.Decision, error) { return f.d, nil }
func (f fixed) Peek(context.Context, string, int64) (core.Decision, error)   { return f.d, nil }
func (fixed) Reset(context.Context, string) error                            { return nil }

func headers(t *testing.T, l core.Limiter, opts ...httplimit.Option) http.Header {
	t.Helper()
	e := httplimit.MustNew(l, opts...)
	w := httptest.NewRecorder()
	res := e.Check(httpview.New(httptest.NewRequest("GET", "/", nil), "/"))
	res.WriteHTTP(w)
	return w.Header()
}

func parse(t *testing.T, h http.Header, name string) httpsfv.Item {
	t.Helper()
	l, err := httpsfv.UnmarshalList(h.Values(name))
	if err != nil || len(l) != 1 {
		t.Fatalf("%s: %q does not parse as a List of one item: %v", name, h.Values(name), err)
	}
	return l[0].(httpsfv.Item)
}

func TestHeaderValues(t *testing.T) {
	t.Run("remaining above the limit is clamped", func(t *testing.T) {
		h := headers(t, newLimiter(t, core.Policy{Limit: 10, Window: time.Minute, Burst: 20}))
		if got := h.Get("RateLimit"); got != `"default";r=10;t=6` {
			t.Errorf("RateLimit %q, want r clamped to q=10", got)
		}
	})
	t.Run("any policy name stays a valid sf-string", func(t *testing.T) {
		name := "a\"b\\c\x01é"
		h := headers(t, fixed{core.Decision{Allowed: true, Limit: 5, Remaining: 2, Policy: core.Policy{Name: name, Limit: 5, Window: 1500 * time.Millisecond}}})
		it := parse(t, h, "RateLimit-Policy")
		if it.Value != "a\"b\\c???" {
			t.Errorf("policy name %q", it.Value)
		}
		if w, _ := it.Params.Get("w"); w != int64(2) {
			t.Errorf("w = %v, want the window rounded up to 2", w)
		}
		parse(t, h, "RateLimit")
	})
	t.Run("negative remaining", func(t *testing.T) {
		h := headers(t, fixed{core.Decision{Allowed: true, Limit: 5, Remaining: -3}})
		if got := h.Get("RateLimit"); got != `"default";r=0;t=0` {
			t.Errorf("RateLimit %q", got)
		}
	})
	t.Run("a long policy name", func(t *testing.T) {
		name := strings.Repeat("n", 64)
		h := headers(t, fixed{core.Decision{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: time.Second, Policy: core.Policy{Name: name}}})
		if got, want := h.Get("RateLimit"), `"`+name+`";r=2;t=1`; got != want {
			t.Errorf("RateLimit %q, want %q", got, want)
		}
	})
}

// headerRecorder is a HeaderWriter that is not an http.Header, as fasthttp's
// is not.
type headerRecorder struct{ h http.Header }

func (r headerRecorder) Set(name, value string) { r.h.Set(name, value) }
func (r headerRecorder) Add(name, value string) { r.h.Add(name, value) }

func TestWriteHeadersAgree(t *testing.T) {
	l := newLimiter(t, core.Policy{Name: "api", Limit: 1, Window: time.Minute})
	e := httplimit.MustNew(l, httplimit.WithHeaders(httplimit.IETFHeaders, httplimit.LegacyHeaders))
	req := httptest.NewRequest("GET", "/", nil)
	e.Check(httpview.New(req, ""))
	res := e.Check(httpview.New(req, "")) // denied
	if res.Serve() {
		t.Fatal("second request served")
	}
	each := headerRecorder{http.Header{}}
	res.WriteHeaders(each)
	set := http.Header{}
	res.WriteHeaders(set)
	if len(each.h) != len(set) || len(set) != 8 {
		t.Errorf("HeaderWriter %v, http.Header %v: want the same 8 headers", each.h, set)
	}
	for k, v := range set {
		if strings.Join(each.h[k], ",") != strings.Join(v, ",") {
			t.Errorf("%s: HeaderWriter %q, http.Header %q", k, each.h[k], v)
		}
	}
	if set.Get("Retry-After") != "60" || set.Get("RateLimit") != `"api";r=0;t=60` {
		t.Errorf("headers %v", set)
	}
}

// A cost below 1 is the request's fault: refused with 400, even under the
// default fail-open error policy, and reported.
func TestNonPositiveCostIsRefused(t *testing.T) {
	var got error
	e := httplimit.MustNew(newLimiter(t, core.Policy{Limit: 1, Window: time.Minute}),
		httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 0, nil }),
		httplimit.WithErrorHook(func(_ keyfunc.Request, err error) { got = err }))
	res := e.Check(httpview.New(httptest.NewRequest("GET", "/", nil), ""))
	if res.Serve() || res.Response().Status != 400 || !errors.Is(got, core.ErrInvalidCost) {
		t.Errorf("served %v, status %d, hook got %v; want 400 and ErrInvalidCost", res.Serve(), res.Response().Status, got)
	}
}

// WithCountIf needs a limiter that can give units back.
func TestCountIfNeedsRefunder(t *testing.T) {
	_, err := httplimit.New(plainLimiter{}, httplimit.WithCountIf(httplimit.Failures))
	if err == nil || !strings.Contains(err.Error(), "cannot give units back") {
		t.Errorf("New with a limiter that cannot refund: %v", err)
	}
}

// plainLimiter is a Limiter and nothing more.
type plainLimiter struct{}

func (plainLimiter) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{Allowed: true}, nil
}
func (plainLimiter) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{Allowed: true}, nil
}
func (plainLimiter) Reset(context.Context, string) error { return nil }

func TestDoneChargesOnce(t *testing.T) {
	clock := core.NewManualClock(start)
	l, err := core.New(core.Policy{Limit: 2, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	e := httplimit.MustNew(l, httplimit.WithCountIf(httplimit.Failures), httplimit.WithClock(clock))
	req := httptest.NewRequest("GET", "/", nil)
	res := e.Check(httpview.New(req, ""))
	if !res.Counting() {
		t.Fatal("Counting false with WithCountIf")
	}
	res.Done(500)
	res.Done(500)
	d, _ := l.Peek(context.Background(), "192.0.2.1", 1)
	if d.Remaining != 1 {
		t.Errorf("after Done twice, remaining %d, want 1 (one charge)", d.Remaining)
	}
	res = e.Check(httpview.New(req, ""))
	res.Done(200) // not a failure: not charged
	if d, _ := l.Peek(context.Background(), "192.0.2.1", 1); !d.Allowed {
		t.Error("a success was charged")
	}
}

// alternating is a limiter whose decisions alternate between two policies,
// so the engine's per-policy header cache is replaced concurrently.
type alternating struct {
	mu sync.Mutex
	n  int
}

func (a *alternating) AllowN(context.Context, string, int64) (core.Decision, error) {
	a.mu.Lock()
	a.n++
	n := a.n
	a.mu.Unlock()
	p := core.Policy{Name: "even", Limit: 10, Window: time.Second}
	if n%2 == 1 {
		p = core.Policy{Name: "odd", Limit: 20, Window: time.Minute}
	}
	return core.Decision{Allowed: true, Limit: p.Limit, Remaining: 1, Policy: p}, nil
}
func (a *alternating) Peek(ctx context.Context, k string, n int64) (core.Decision, error) {
	return a.AllowN(ctx, k, n)
}
func (*alternating) Reset(context.Context, string) error { return nil }

func TestConcurrentPolicies(t *testing.T) {
	e := httplimit.MustNew(&alternating{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				w := httptest.NewRecorder()
				res := e.Check(httpview.New(httptest.NewRequest("GET", "/", nil), ""))
				res.WriteHTTP(w)
				pol, rl := w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit")
				if pol[:5] != rl[:5] {
					t.Errorf("RateLimit-Policy %q and RateLimit %q name different policies", pol, rl)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestWriteDenied(t *testing.T) {
	rec := httptest.NewRecorder()
	httplimit.WriteDenied(rec, core.Decision{RetryAfter: 1500 * time.Millisecond, Policy: core.Policy{Name: "login"}})
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" ||
		rec.Header().Get("Cache-Control") != "no-store" || rec.Header().Get("Content-Type") != httplimit.ContentTypeProblem {
		t.Fatalf("got %d %v", rec.Code, rec.Header())
	}
	var p httplimit.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Type != httplimit.ProblemRateLimited || p.Policy != "login" || p.Detail != "Try again in 2 seconds." {
		t.Fatalf("body %s: %+v, %v", rec.Body, p, err)
	}
	if rec.Header().Get("RateLimit") != "" {
		t.Fatalf("RateLimit header written: %v", rec.Header())
	}
}
