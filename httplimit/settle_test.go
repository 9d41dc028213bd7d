package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// settleFixture is a token bucket of 10 per 10 s (a unit refills in 1 s)
// on a manual clock, behind Middleware with WithSettle and an estimate of
// 2; the handler reports the cost in its "cost" query parameter.
type settleFixture struct {
	clock *core.ManualClock
	lim   *core.Memory
	h     http.Handler
	errs  []error
	found bool // the last SetCost found a settling limit
}

func newSettleFixture(t *testing.T, opts ...httplimit.Option) *settleFixture {
	t.Helper()
	f := &settleFixture{clock: core.NewManualClock(start)}
	var err error
	f.lim, err = core.New(core.Policy{Name: "tokens", Limit: 10, Window: 10 * time.Second}, core.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := r.URL.Query().Get("cost"); c != "" {
			var n int64
			for _, d := range strings.TrimPrefix(c, "-") {
				n = 10*n + int64(d-'0')
			}
			if strings.HasPrefix(c, "-") {
				n = -n
			}
			f.found = httplimit.SetCost(r.Context(), n)
		}
		if r.URL.Query().Has("panic") {
			panic("handler failed")
		}
		w.Write([]byte("ok"))
	})
	opts = append([]httplimit.Option{
		httplimit.WithSettle(),
		httplimit.WithClock(f.clock),
		httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 2, nil }),
		httplimit.WithErrorHook(func(_ keyfunc.Request, err error) { f.errs = append(f.errs, err) }),
	}, opts...)
	f.h = httplimit.Middleware(f.lim, opts...)(handler)
	return f
}

func (f *settleFixture) get(query string) *http.Response {
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest("GET", "/ai?"+query, nil))
	return rec.Result()
}

// remaining is what the key has left, by a Peek.
func (f *settleFixture) peek(t *testing.T) core.Decision {
	t.Helper()
	d, err := f.lim.Peek(context.Background(), "192.0.2.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSettleAfterHandler(t *testing.T) {
	f := newSettleFixture(t)
	steps := []struct {
		query         string
		wantStatus    int
		wantRateLimit string // written before the handler: the estimate counted
		wantRemaining int64  // after the settle
	}{
		{"cost=2", 200, `"tokens";r=8;t=2`, 8},  // as estimated
		{"", 200, `"tokens";r=6;t=4`, 6},        // not reported: the estimate
		{"cost=0", 200, `"tokens";r=4;t=6`, 6},  // nothing used: all given back
		{"cost=-1", 200, `"tokens";r=4;t=6`, 4}, // an error: the estimate
		{"cost=5", 200, `"tokens";r=2;t=8`, 0},  // 3 more: 1 unit of debt
		{"cost=2", 429, `"tokens";r=0;t=3`, 0},  // 3 s until 2 units fit
	}
	for i, s := range steps {
		resp := f.get(s.query)
		if resp.StatusCode != s.wantStatus || resp.Header.Get("RateLimit") != s.wantRateLimit {
			t.Fatalf("step %d (%s): %d %q, want %d %q", i, s.query, resp.StatusCode, resp.Header.Get("RateLimit"), s.wantStatus, s.wantRateLimit)
		}
		if strings.Contains(s.query, "cost") && s.wantStatus == 200 && !f.found {
			t.Fatalf("step %d (%s): SetCost found no settling limit", i, s.query)
		}
		if d := f.peek(t); d.Remaining != s.wantRemaining {
			t.Fatalf("step %d (%s): %d left after the settle, want %d", i, s.query, d.Remaining, s.wantRemaining)
		}
	}
	if len(f.errs) != 1 || !errors.Is(f.errs[0], core.ErrInvalidCost) {
		t.Fatalf("errors %v, want one for the negative cost", f.errs)
	}

	// Overspend into debt: 2 units left after 3 s, a request estimated at
	// 2 costs 12, so the key owes 10 beyond the bucket (the bound: one
	// capacity) and waits 12 s for its next 2.
	f.clock.Advance(3 * time.Second)
	if resp := f.get("cost=12"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	d := f.peek(t)
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 11*time.Second || d.ResetAfter != 20*time.Second {
		t.Fatalf("in debt: %+v, want denied for 11 s (1 unit), reset in 20 s", d)
	}
	if resp := f.get("cost=2"); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "12" {
		t.Fatalf("in debt: %d Retry-After %q, want 429 12", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	f.clock.Advance(12*time.Second - time.Microsecond)
	if resp := f.get(""); resp.StatusCode != 429 {
		t.Fatalf("1µs before the debt is repaid: %d", resp.StatusCode)
	}
	f.clock.Advance(time.Microsecond)
	if resp := f.get(""); resp.StatusCode != 200 {
		t.Fatalf("once the debt is repaid: %d", resp.StatusCode)
	}

	// A handler that panics is settled at its estimate, and the panic goes
	// on.
	f.clock.Advance(time.Minute)
	before := f.peek(t)
	func() {
		defer func() {
			if p := recover(); p != "handler failed" {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		f.get("cost=9&panic")
	}()
	if after := f.peek(t); after.Remaining != before.Remaining-2 {
		t.Fatalf("after a panic: %d left, want %d (the estimate)", after.Remaining, before.Remaining-2)
	}
}

// SetCost without a settling limit reports false; a limiter that cannot
// settle, or a RequestLimiter, fails at construction.
func TestSettleNeedsASettler(t *testing.T) {
	if httplimit.SetCost(context.Background(), 1) {
		t.Fatal("SetCost on a bare context reported a settling limit")
	}
	m, err := core.New(core.Policy{Limit: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f, err := core.NewFailover(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httplimit.New(f, httplimit.WithSettle()); err == nil || !strings.Contains(err.Error(), "core.Settler") {
		t.Fatalf("a Failover with WithSettle: %v, want an error naming core.Settler", err)
	}
	if _, err := httplimit.New(f); err != nil {
		t.Fatal(err)
	}
	if _, err := httplimit.New(m, httplimit.WithSettle()); err != nil {
		t.Fatal(err)
	}
}

// A request that is not counted is not settled: a dry-run denial served,
// and one WithCountIf gives back.
func TestSettleOnlyCounted(t *testing.T) {
	f := newSettleFixture(t,
		httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 10, nil }),
		httplimit.WithDryRun(func(keyfunc.Request, core.Decision) {}))
	if resp := f.get("cost=10"); resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	// Denied, served by the dry run, reports 3: not settled.
	if resp := f.get("cost=3"); resp.StatusCode != 200 || f.found {
		t.Fatalf("%d, SetCost found a settling limit: %v", resp.StatusCode, f.found)
	}
	if d := f.peek(t); d.ResetAfter != 10*time.Second {
		t.Fatalf("after a dry-run denial reported a cost: %+v, want the bucket as the first request left it", d)
	}

	g := newSettleFixture(t, httplimit.WithCountIf(httplimit.Failures))
	if resp := g.get("cost=7"); resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	if d := g.peek(t); d.Remaining != 10 {
		t.Fatalf("a success not counted, reporting 7: %d left, want 10", d.Remaining)
	}
}

// Limits stacked on one request each settle at the cost the handler
// reported.
func TestSettleStacked(t *testing.T) {
	clock := core.NewManualClock(start)
	outer, _ := core.New(core.Policy{Name: "app", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}, core.WithClock(clock))
	inner, _ := core.New(core.Policy{Name: "route", Algorithm: core.SlidingLog, Limit: 20, Window: time.Minute}, core.WithClock(clock))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { httplimit.SetCost(r.Context(), 15) })
	stack := httplimit.Middleware(outer, httplimit.WithSettle(), httplimit.WithClock(clock))(
		httplimit.Middleware(inner, httplimit.WithSettle(), httplimit.WithClock(clock))(h))
	stack.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	for _, c := range []struct {
		m    *core.Memory
		want int64
	}{{outer, 85}, {inner, 5}} {
		if d, _ := c.m.Peek(context.Background(), "192.0.2.1", 1); d.Remaining != c.want {
			t.Errorf("%s: %d left, want %d", c.m.Policy().Name, d.Remaining, c.want)
		}
	}
}

// Concurrent requests on one key that each overspend never take the key
// past its capacity plus the charges of the requests in flight, and the
// key holds exactly what the served requests reported.
func TestSettleConcurrentRequests(t *testing.T) {
	clock := core.NewManualClock(start)
	lim, _ := core.New(core.Policy{Algorithm: core.FixedWindow, Limit: 200, Window: time.Minute}, core.WithClock(clock))
	var (
		mu     sync.Mutex
		served int64
		cost   int64
	)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int64(len(r.URL.Query().Get("c")))
		mu.Lock()
		served++
		cost += n
		mu.Unlock()
		httplimit.SetCost(r.Context(), n)
	})
	mw := httplimit.Middleware(lim, httplimit.WithSettle(), httplimit.WithClock(clock))(h)
	var wg sync.WaitGroup
	var denied int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				rec := httptest.NewRecorder()
				mw.ServeHTTP(rec, httptest.NewRequest("GET", "/?c="+strings.Repeat("x", (g+i)%4), nil))
				if rec.Code == 429 {
					mu.Lock()
					denied++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	d, _ := lim.Peek(context.Background(), "192.0.2.1", 1)
	t.Logf("%d served reporting %d units, %d denied; %+v", served, cost, denied, d)
	if cost > 200+8*2 || served+denied != 1600 {
		t.Fatalf("%d units served, above 200 + 8 in flight costing 3", cost)
	}
	if cost <= 200 && d.Remaining != 200-cost || cost > 200 && d.Remaining != 0 {
		t.Fatalf("the key has %d left after %d units", d.Remaining, cost)
	}
}

// Without WithSettle, the middleware's allowed path allocates no more than
// it did: nothing for settling.
func TestSettleOffAllocatesNothing(t *testing.T) {
	l, _ := core.New(core.Policy{Limit: core.MaxLimit, Window: time.Second})
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	req := httptest.NewRequest("GET", "/hello", nil)
	w := &discard{h: make(http.Header)}
	for _, c := range []struct {
		name string
		mw   http.Handler
		most float64
	}{
		{"off", httplimit.Middleware(l)(noop), maxAllocs()},
		// The request's context and its copy, and what the handler
		// reports into.
		{"on", httplimit.Middleware(l, httplimit.WithSettle())(noop), maxAllocs() + 3},
	} {
		allocs := testing.AllocsPerRun(200, func() {
			clear(w.h)
			c.mw.ServeHTTP(w, req)
		})
		t.Logf("%s: %v allocations per request", c.name, allocs)
		if allocs > c.most {
			t.Errorf("%s: %v allocations per allowed request, want at most %v", c.name, allocs, c.most)
		}
	}
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
