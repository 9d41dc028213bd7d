package core_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/ratekit/ratekit/observe"
)

func mustFailover(t testing.TB, remote core.Limiter, opts ...core.FailoverOption) *core.Failover {
	t.Helper()
	f, err := core.NewFailover(remote, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A healthy store behind a Failover decides exactly as it would alone.
func TestFailoverConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustFailover(t, newFlaky(t, p, clock), core.WithErrorPolicy(core.FailClosed()), core.WithClock(clock))
	})
}

func TestFailoverModes(t *testing.T) {
	p := core.Policy{Limit: 10, Window: time.Minute}
	clock := core.NewManualClock(limitercheck.StartTime())
	local, _ := core.New(core.Policy{Limit: 2, Window: time.Minute}, core.WithClock(clock))
	tests := []struct {
		name  string
		opt   core.FailoverOption
		want  []core.Decision // for three requests of 3 units while down
		retry []time.Duration // failing closed: each UnavailableError's RetryAfter
	}{
		{"open", core.WithErrorPolicy(core.FailOpen()), []core.Decision{
			{Allowed: true, Limit: 10, Remaining: 7, Policy: p},
			{Allowed: true, Limit: 10, Remaining: 7, Policy: p},
			{Allowed: true, Limit: 10, Remaining: 7, Policy: p},
		}, nil},
		// Closed: an UnavailableError, never a denial. Its RetryAfter is
		// one second while the breaker is closed (the next request asks
		// the store), then what is left of the cool-down once the second
		// failure opened it.
		{"closed", core.WithErrorPolicy(core.FailClosed()), []core.Decision{
			{Limit: 10, Policy: p},
			{Limit: 10, Policy: p},
			{Limit: 10, Policy: p},
		}, []time.Duration{time.Second, 5 * time.Second, 4 * time.Second}},
		{"fallback", core.WithErrorPolicy(core.Fallback(local)), []core.Decision{
			{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 30 * time.Second, Policy: local.Policy()},
			{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 59 * time.Second, Policy: local.Policy()},
			{Limit: 2, Remaining: 0, RetryAfter: 28 * time.Second, ResetAfter: 58 * time.Second, Policy: local.Policy()},
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock.Set(limitercheck.StartTime())
			remote := newFlaky(t, p, clock)
			remote.Down.Store(true)
			var hooked []error
			f := mustFailover(t, remote, tt.opt, core.WithBreaker(2, 5*time.Second), core.WithClock(clock),
				core.WithErrorHook(func(err error) { hooked = append(hooked, err) }))
			for i, want := range tt.want {
				n := int64(3)
				if tt.name == "fallback" {
					n = 1
				}
				d, err := f.AllowN(ctx, "k", n)
				var u *core.UnavailableError
				switch {
				case tt.retry == nil && err != nil:
					t.Fatalf("request %d: err %v, want a decision", i, err)
				case tt.retry != nil && (!errors.As(err, &u) || u.RetryAfter != tt.retry[i]):
					t.Errorf("request %d: err %v, want an UnavailableError with RetryAfter %v", i, err, tt.retry[i])
				case tt.retry != nil && i == 2 && !errors.Is(err, core.ErrBreakerOpen):
					t.Errorf("request %d, breaker open: err %v, want it to wrap ErrBreakerOpen", i, err)
				case tt.retry != nil && i < 2 && !errors.Is(err, errDown):
					t.Errorf("request %d: err %v, want it to wrap the store's error", i, err)
				}
				if d != want {
					t.Errorf("request %d:\n got %+v\nwant %+v", i, d, want)
				}
				clock.Advance(time.Second)
			}
			if len(hooked) != 2 || !errors.Is(hooked[0], errDown) {
				t.Errorf("hook called with %v, want the 2 errors before the breaker opened", hooked)
			}
			if got := remote.Calls.Load(); got != 2 {
				t.Errorf("store called %d times, want 2 (then the breaker is open)", got)
			}
		})
	}
}

// The breaker: open after WithBreaker failures, one probe per cool-down,
// closed by a successful probe.
func TestFailoverBreaker(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newFlaky(t, core.Policy{Limit: 100, Window: time.Minute}, clock)
	var hooks atomic.Int64
	f := mustFailover(t, remote, core.WithErrorPolicy(core.FailOpen()), core.WithBreaker(3, 5*time.Second), core.WithClock(clock),
		core.WithErrorHook(func(error) { hooks.Add(1) }))
	steps := []struct {
		advance   time.Duration
		down      bool
		requests  int
		wantCalls int64 // calls to the store during the step
	}{
		{0, false, 5, 5},              // healthy
		{0, true, 2, 2},               // two failures: still closed
		{0, false, 1, 1},              // a success resets the count
		{0, true, 3, 3},               // three in a row: open
		{time.Second, true, 10, 0},    // open: the store is not called
		{4 * time.Second, true, 5, 1}, // cool-down over: one probe, fails
		{4 * time.Second, false, 5, 0},
		{time.Second, false, 5, 5}, // probe succeeds: closed again
	}
	for i, st := range steps {
		clock.Advance(st.advance)
		remote.Down.Store(st.down)
		before := remote.Calls.Load()
		for range st.requests {
			d, err := f.Allow(ctx, "k")
			if err != nil || !d.Allowed {
				t.Fatalf("step %d: %+v, %v; want allowed (fail open)", i, d, err)
			}
		}
		if got := remote.Calls.Load() - before; got != st.wantCalls {
			t.Errorf("step %d: store called %d times, want %d", i, got, st.wantCalls)
		}
	}
	if got := hooks.Load(); got != 6 {
		t.Errorf("hook called %d times, want 6 (one per store error)", got)
	}
}

// Bad input and a caller's cancelled context are not outages: the error
// is returned, the breaker does not count it, the hook is not called.
func TestFailoverCallerErrors(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newFlaky(t, core.Policy{Limit: 10, Window: time.Minute}, clock)
	var hooked atomic.Int64
	f := mustFailover(t, remote, core.WithErrorPolicy(core.FailClosed()), core.WithBreaker(1, time.Second), core.WithClock(clock),
		core.WithErrorHook(func(error) { hooked.Add(1) }))
	for _, tt := range []struct {
		key  string
		n    int64
		want error
	}{{"", 1, core.ErrEmptyKey}, {"k", 0, core.ErrInvalidCost}, {"k", 11, core.ErrCostTooHigh}} {
		if _, err := f.AllowN(ctx, tt.key, tt.n); !errors.Is(err, tt.want) {
			t.Errorf("AllowN(%q, %d): err %v, want %v", tt.key, tt.n, err, tt.want)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	remote.Down.Store(true)
	if _, err := f.Allow(cancelled, "k"); !errors.Is(err, errDown) {
		t.Errorf("cancelled caller: err %v, want the store's error", err)
	}
	remote.Down.Store(false)
	if d, err := f.Allow(ctx, "k"); err != nil || !d.Allowed || remote.Calls.Load() != 5 {
		t.Errorf("after caller errors: %+v, %v, %d calls; want the store asked (breaker closed)", d, err, remote.Calls.Load())
	}
	if hooked.Load() != 0 {
		t.Errorf("hook called %d times for caller errors, want 0", hooked.Load())
	}
	// Bad input is rejected by the failure mode too while the breaker is
	// open.
	remote.Down.Store(true)
	f.Allow(ctx, "k")
	if _, err := f.AllowN(ctx, "k", 11); !errors.Is(err, core.ErrCostTooHigh) {
		t.Errorf("open breaker, cost 11: err %v, want ErrCostTooHigh", err)
	}
	if err := f.Reset(ctx, "k"); !errors.Is(err, core.ErrBreakerOpen) {
		t.Errorf("Reset with the breaker open: %v, want ErrBreakerOpen", err)
	}
}

// timedOut is a store whose every call runs out of its own deadline.
type timedOut struct{ core.Limiter }

func (timedOut) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, fmt.Errorf("store: %w", context.DeadlineExceeded)
}

// A request the error policy refuses gets an UnavailableError whatever
// refused it: failing closed, a fallback failing too, or a Failover inside,
// whose refusal passes through as it is. A store's own deadline, the
// caller's context going on, is an outage like any other.
func TestFailoverUnavailable(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	p := core.Policy{Limit: 10, Window: time.Minute}
	unavailable := func(name string, err error, retry time.Duration, cause error) {
		t.Helper()
		var u *core.UnavailableError
		if !errors.As(err, &u) || u.RetryAfter != retry || !errors.Is(err, cause) {
			t.Errorf("%s: err %v, want an UnavailableError of %v wrapping %v", name, err, retry, cause)
		}
	}

	down := newFlaky(t, p, clock)
	down.Down.Store(true)
	localDown := newFlaky(t, p, clock)
	localDown.Down.Store(true)
	var hooked []error
	f := mustFailover(t, down, core.WithErrorPolicy(core.Fallback(localDown)), core.WithClock(clock),
		core.WithErrorHook(func(err error) { hooked = append(hooked, err) }))
	_, err := f.Allow(ctx, "k")
	unavailable("the fallback failing too", err, time.Second, errDown)
	if len(hooked) != 1 {
		t.Errorf("hook called %d times, want once, with the remote's error", len(hooked))
	}

	inner := mustFailover(t, down, core.WithErrorPolicy(core.FailClosed()), core.WithBreaker(1, 30*time.Second), core.WithClock(clock))
	hooked = nil
	outer := mustFailover(t, inner, core.WithErrorPolicy(core.FailOpen()), core.WithBreaker(1, time.Second), core.WithClock(clock),
		core.WithErrorHook(func(err error) { hooked = append(hooked, err) }))
	_, err = outer.Allow(ctx, "k")
	unavailable("a Failover inside failing closed", err, 30*time.Second, errDown)
	clock.Advance(10 * time.Second)
	_, err = outer.Allow(ctx, "k")
	unavailable("a Failover inside, its breaker open", err, 20*time.Second, core.ErrBreakerOpen)
	if len(hooked) != 0 || outer.BreakerOpen() {
		t.Errorf("outer Failover: hook called %d times, breaker open %v; want neither: the inner one decided", len(hooked), outer.BreakerOpen())
	}

	hooked = nil
	f = mustFailover(t, timedOut{down}, core.WithClock(clock), core.WithErrorHook(func(err error) { hooked = append(hooked, err) }))
	if d, err := f.Allow(ctx, "k"); err != nil || !d.Allowed || len(hooked) != 1 || !errors.Is(hooked[0], context.DeadlineExceeded) {
		t.Errorf("a store's own deadline: %+v, %v, hooked %v; want an outage, failed open", d, err, hooked)
	}
}

// Once the cool-down is over, concurrent requests send exactly one probe;
// the others are decided by the failure mode without waiting for it.
func TestFailoverOneProbe(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newFlaky(t, core.Policy{Limit: 10, Window: time.Minute}, clock)
	f := mustFailover(t, remote, core.WithErrorPolicy(core.FailClosed()), core.WithBreaker(1, time.Second), core.WithClock(clock))
	remote.Down.Store(true)
	f.Allow(ctx, "k") // opens
	clock.Advance(time.Second)
	remote.Gate, remote.Entered = make(chan struct{}), make(chan struct{}, 1)
	remote.Down.Store(false)
	probed := make(chan core.Decision)
	go func() {
		d, _ := f.Allow(ctx, "k")
		probed <- d
	}()
	<-remote.Entered // the probe is waiting in the store
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, err := f.Allow(ctx, "k"); !errors.Is(err, core.ErrBreakerOpen) || d.Allowed {
				t.Errorf("during the probe: %+v, %v; want refused, the breaker open (fail closed)", d, err)
			}
		}()
	}
	wg.Wait()
	close(remote.Gate)
	if d := <-probed; !d.Allowed {
		t.Errorf("the probe: %+v, want allowed by the store", d)
	}
	if got := remote.Calls.Load(); got != 2 {
		t.Errorf("store called %d times, want 2 (the failure and one probe)", got)
	}
	if d, _ := f.Allow(ctx, "k"); !d.Allowed || remote.Calls.Load() != 3 {
		t.Errorf("after the probe: %+v; want the store to decide again", d)
	}
}

func TestNewFailoverErrors(t *testing.T) {
	remote := newFlaky(t, core.Policy{Limit: 1, Window: time.Second}, core.SystemClock{})
	for _, opts := range [][]core.FailoverOption{
		{core.WithErrorPolicy(core.Fallback(nil))},
		{core.WithBreaker(0, time.Second)},
		{core.WithBreaker(1, 0)},
		{core.WithTimeout(-1)},
		{core.WithClock(nil)},
	} {
		if _, err := core.NewFailover(remote, opts...); err == nil {
			t.Errorf("NewFailover with a bad option: no error")
		}
	}
	if _, err := core.NewFailover(nil); err == nil {
		t.Errorf("NewFailover(nil): no error")
	}
}

// downStore is a remote store that cannot be reached.
type downStore struct{ policy core.Policy }

func (s downStore) Policy() core.Policy { return s.policy }
func (downStore) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errors.New("dial tcp 10.0.0.7:6379: connection refused")
}
func (downStore) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errors.New("dial tcp 10.0.0.7:6379: connection refused")
}
func (downStore) Reset(context.Context, string) error {
	return errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

// Four servers share 100 requests a minute through a remote store. While
// the store is down, each server falls back to its own quarter of the
// limit; after two failures the breaker stops calling the store for 10 s.
func ExampleNewFailover() {
	policy := core.Policy{Limit: 100, Window: time.Minute}
	var remote core.Limiter = downStore{policy} // redisstore.New(client, policy) in production

	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	local, _ := core.New(core.Policy{Limit: policy.Limit / 4, Window: policy.Window}, core.WithClock(clock))
	limiter, err := core.NewFailover(remote,
		core.WithErrorPolicy(core.Fallback(local)),
		core.WithBreaker(2, 10*time.Second),
		core.WithErrorHook(func(err error) { fmt.Println("store error:", err) }),
		core.WithClock(clock),
	)
	if err != nil {
		panic(err)
	}
	for range 3 {
		d, err := limiter.Allow(ctx, "203.0.113.7")
		fmt.Println(d.Allowed, d.Limit, d.Remaining, err)
	}
	// Output:
	// store error: dial tcp 10.0.0.7:6379: connection refused
	// true 25 24 <nil>
	// store error: dial tcp 10.0.0.7:6379: connection refused
	// true 25 23 <nil>
	// true 25 22 <nil>
}

// flakyLayered is a layered remote limiter that fails with errDown while
// down is set and otherwise decides by a Layered limiter.
type flakyLayered struct {
	*core.Layered
	Down atomic.Bool
}

func (s *flakyLayered) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	d, err := s.AllowLayers(ctx, key, n)
	return d.Decision, err
}

func (s *flakyLayered) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	d, err := s.PeekLayers(ctx, key, n)
	return d.Decision, err
}

func (s *flakyLayered) AllowLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	if s.Down.Load() {
		return core.LayeredDecision{}, fmt.Errorf("flaky: %w", errDown)
	}
	return s.Layered.AllowLayers(ctx, key, n)
}

func (s *flakyLayered) PeekLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	if s.Down.Load() {
		return core.LayeredDecision{}, fmt.Errorf("flaky: %w", errDown)
	}
	return s.Layered.PeekLayers(ctx, key, n)
}

func (s *flakyLayered) Reset(ctx context.Context, key string) error {
	if s.Down.Load() {
		return fmt.Errorf("flaky: %w", errDown)
	}
	return s.Layered.Reset(ctx, key)
}

// layeredOf returns a Layered limiter of the policies on clock.
func layeredOf(t testing.TB, clock core.Clock, ps ...core.Policy) *core.Layered {
	t.Helper()
	ms := make([]*core.Memory, len(ps))
	for i, p := range ps {
		ms[i] = mustMemory(t, p, clock)
	}
	return mustLayered(t, ms...)
}

// The HTTP middleware's answers, checked step by step.
type httpStep = adaptertest.EngineStep

var checkHTTP = adaptertest.CheckEngine

// A Failover over a layered limiter keeps its layers: the HTTP middleware
// writes one RateLimit member per layer, from the remote limiter while it
// works and from a layered fallback during an outage.
func TestFailoverLayersInHeaders(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	burst := core.Policy{Name: "burst", Limit: 2, Window: time.Second}
	daily := core.Policy{Name: "daily", Algorithm: core.FixedWindow, Limit: 1000, Window: 24 * time.Hour}
	remote := &flakyLayered{Layered: layeredOf(t, clock, burst, daily)}
	local := layeredOf(t, clock,
		core.Policy{Name: "local-burst", Limit: 1, Window: time.Second},
		core.Policy{Name: "local-daily", Algorithm: core.FixedWindow, Limit: 250, Window: 24 * time.Hour})
	f := mustFailover(t, remote, core.WithErrorPolicy(core.Fallback(local)), core.WithClock(clock))
	e := httplimit.MustNew(f)

	const remotePolicy = `"burst";q=2;w=1, "daily";q=1000;w=86400`
	for i, want := range []httpStep{
		{Served: true, Policy: remotePolicy, RateLimit: `"burst";r=1;t=1, "daily";r=999;t=43200`},
		{Served: true, Policy: remotePolicy, RateLimit: `"burst";r=0;t=1, "daily";r=998;t=43200`},
		{Served: false, Policy: remotePolicy, RateLimit: `"burst";r=0;t=1, "daily";r=998;t=43200`},
	} {
		checkHTTP(t, e, i, want)
	}

	remote.Down.Store(true)
	const localPolicy = `"local-burst";q=1;w=1, "local-daily";q=250;w=86400`
	for i, want := range []httpStep{
		{Served: true, Policy: localPolicy, RateLimit: `"local-burst";r=0;t=1, "local-daily";r=249;t=43200`},
		{Served: false, Policy: localPolicy, RateLimit: `"local-burst";r=0;t=1, "local-daily";r=249;t=43200`},
	} {
		checkHTTP(t, e, 3+i, want)
	}

	// Failing open or closed, the Failover decides alone, by no policy it
	// could describe (a layered limiter has several): no RateLimit fields.
	for _, opt := range []core.FailoverOption{core.WithErrorPolicy(core.FailOpen()), core.WithErrorPolicy(core.FailClosed())} {
		e := httplimit.MustNew(mustFailover(t, remote, opt, core.WithClock(clock)))
		w := httptest.NewRecorder()
		res := e.Check(httpview.New(httptest.NewRequest("GET", "/", nil), "/"))
		res.WriteHTTP(w)
		if got := w.Header().Get("RateLimit"); got != "" {
			t.Errorf("failing open or closed: RateLimit %q, want none", got)
		}
	}
}

// Over a limiter that is not layered, a Failover is still a
// core.LayeredLimiter, of one layer; the HTTP middleware answers every
// request exactly as for a Failover that hides the layered methods (as
// every Failover did before it had them): the same status, headers of
// every style, and body.
func TestFailoverOneLayerHeaders(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	p := core.Policy{Name: "api", Limit: 3, Window: time.Minute}
	type hidden struct{ core.Limiter } // no AllowLayers: a plain Limiter
	for _, tc := range []struct {
		name string
		opt  func() core.ErrorPolicy // a new one per Failover: a fallback has state
		down bool
	}{
		{"healthy", core.FailClosed, false},
		{"down, open", core.FailOpen, true},
		{"down, closed", core.FailClosed, true},
		{"down, fallback", func() core.ErrorPolicy {
			return core.Fallback(mustMemory(t, core.Policy{Name: "local", Limit: 1, Window: time.Minute}, clock))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock.Set(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			var engines [2]*httplimit.Engine
			for i := range engines {
				remote := newFlaky(t, p, clock)
				remote.Down.Store(tc.down)
				var l core.Limiter = mustFailover(t, remote, core.WithErrorPolicy(tc.opt()), core.WithClock(clock))
				if i == 1 {
					if _, ok := l.(core.LayeredLimiter); !ok {
						t.Fatal("a Failover is not a core.LayeredLimiter")
					}
					l = hidden{l}
				}
				engines[i] = httplimit.MustNew(l, httplimit.WithClock(clock),
					httplimit.WithHeaders(httplimit.IETFHeaders, httplimit.LegacyHeaders, httplimit.XRateLimitHeaders))
			}
			codes := map[int]int{}
			for i := range 5 {
				var got [2]*httptest.ResponseRecorder
				for j, e := range engines {
					got[j] = httptest.NewRecorder()
					res := e.Check(httpview.New(httptest.NewRequest("GET", "/", nil), "/"))
					res.WriteHTTP(got[j])
				}
				if got[0].Code != got[1].Code || got[0].Body.String() != got[1].Body.String() ||
					fmt.Sprint(got[0].Header()) != fmt.Sprint(got[1].Header()) {
					t.Errorf("request %d: as a LayeredLimiter %d %v %s\nas a plain Limiter %d %v %s", i,
						got[0].Code, got[0].Header(), got[0].Body, got[1].Code, got[1].Header(), got[1].Body)
				}
				codes[got[0].Code]++
				clock.Advance(7 * time.Second)
			}
			if want := tc.name != "down, open" && tc.name != "down, closed"; (codes[http.StatusTooManyRequests] > 0) != want {
				t.Errorf("statuses %v: want a 429 among them: %v", codes, want)
			}
			if want := tc.name == "down, closed"; (codes[http.StatusServiceUnavailable] == 5) != want {
				t.Errorf("statuses %v: want only 503s: %v", codes, want)
			}
		})
	}
}

// AllowLayers and PeekLayers decide as AllowN and Peek: the remote's
// layers when it is healthy, errors of the caller returned as they are.
func TestFailoverLayersErrors(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := &flakyLayered{Layered: layeredOf(t, clock, core.Policy{Name: "a", Limit: 2, Window: time.Second})}
	f := mustFailover(t, remote, core.WithErrorPolicy(core.FailClosed()), core.WithClock(clock))
	if _, err := f.AllowLayers(ctx, "k", 3); !errors.Is(err, core.ErrCostTooHigh) {
		t.Errorf("AllowLayers of 3 over a capacity of 2: %v, want ErrCostTooHigh", err)
	}
	if _, err := f.PeekLayers(ctx, "", 1); !errors.Is(err, core.ErrEmptyKey) {
		t.Errorf("PeekLayers of an empty key: %v, want ErrEmptyKey", err)
	}
	ld, err := f.PeekLayers(ctx, "k", 2)
	if err != nil || !ld.Allowed || len(ld.Layers) != 1 || ld.Layers[0].Policy.Name != "a" {
		t.Errorf("PeekLayers: %+v, %v; want allowed, layer a", ld, err)
	}
	if d, _ := f.Peek(ctx, "k", 1); d.Remaining != 2 {
		t.Errorf("PeekLayers counted: Remaining %d after it, want 2", d.Remaining)
	}
	remote.Down.Store(true)
	ld, err = f.AllowLayers(ctx, "k", 1)
	var u *core.UnavailableError
	if !errors.As(err, &u) || u.RetryAfter != time.Second || ld.Allowed || len(ld.Layers) != 0 {
		t.Errorf("AllowLayers, failing closed: %+v, %v; want an UnavailableError of 1s, no layers", ld, err)
	}
	f = mustFailover(t, remote, core.WithErrorPolicy(core.FailOpen()), core.WithClock(clock))
	ld, err = f.AllowLayers(ctx, "k", 1)
	if err != nil || !ld.Allowed || ld.Layer != 0 || len(ld.Layers) != 1 || ld.Layers[0] != ld.Decision {
		t.Errorf("AllowLayers, failing open: %+v, %v; want one allowed layer", ld, err)
	}
}

// policyless hides the Policy method of the limiter it holds, as a store
// that does not report its policy.
type policyless struct{ core.Limiter }

// A wrapper whose Policy method returns the zero Policy, because the
// limiter it wraps reports none, gives a Failover no policy: failing open
// or closed then decides every cost, where a capacity of 0 refused them
// all with ErrCostTooHigh.
func TestFailoverUnknownPolicy(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	store := newFlaky(t, core.Policy{Limit: 10, Window: time.Minute}, clock)
	store.Down.Store(true)
	remote := policyless{store}
	wrappers := []struct {
		name string
		l    core.Limiter
	}{
		{"DenialCache", mustDenialCache(t, remote, hotkey.WithClock(clock))},
		{"Leased", mustLeased(t, remote, 5, hotkey.WithClock(clock))},
		{"Observed", mustObserved(t, remote, &recorder{}, observe.WithClock(clock))},
	}
	for _, w := range wrappers {
		if p := w.l.(interface{ Policy() core.Policy }).Policy(); p != (core.Policy{}) {
			t.Fatalf("%s.Policy() = %v, want the zero Policy", w.name, p)
		}
		for _, mode := range []struct {
			name    string
			opt     core.FailoverOption
			allowed bool
		}{{"open", core.WithErrorPolicy(core.FailOpen()), true}, {"closed", core.WithErrorPolicy(core.FailClosed()), false}} {
			f := mustFailover(t, w.l, mode.opt, core.WithClock(clock))
			for _, n := range []int64{1, 3} {
				d, err := f.AllowN(ctx, "k", n)
				var u *core.UnavailableError
				if (err == nil) != mode.allowed || (err != nil && !errors.As(err, &u)) ||
					d.Allowed != mode.allowed || d.Limit != 0 || d.Policy != (core.Policy{}) {
					t.Errorf("%s, failing %s, cost %d: %+v, %v; want allowed=%v, no policy, an UnavailableError when refused",
						w.name, mode.name, n, d, err, mode.allowed)
				}
			}
		}
	}
}

// FallbackShare builds the local limiter from the remote's policy: Limit
// and Burst divided among the instances, on the Failover's clock.
func TestFailoverFallbackShare(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	for _, tc := range []struct {
		remote, local core.Policy
		instances     int
	}{
		{core.Policy{Limit: 100, Window: time.Minute, Burst: 20}, core.Policy{Limit: 25, Window: time.Minute, Burst: 5}, 4},
		{core.Policy{Algorithm: core.FixedWindow, Limit: 10, Window: time.Second}, core.Policy{Algorithm: core.FixedWindow, Limit: 3, Window: time.Second}, 3},
		{core.Policy{Algorithm: core.SlidingLog, Limit: 5, Window: time.Minute}, core.Policy{Algorithm: core.SlidingLog, Limit: 1, Window: time.Minute}, 8},
		{core.Policy{Limit: 7, Window: time.Second}, core.Policy{Limit: 7, Window: time.Second}, 1},
	} {
		remote := newFlaky(t, tc.remote, clock)
		remote.Down.Store(true)
		f := mustFailover(t, remote, core.WithErrorPolicy(core.FallbackShare(tc.instances)), core.WithClock(clock))
		local, ok := core.FallbackOf(f).(*core.Memory)
		if !ok || local.Policy() != tc.local {
			t.Fatalf("FallbackShare(%d) of %v: local %#v, want a Memory of %v", tc.instances, tc.remote, core.FallbackOf(f), tc.local)
		}
		allowed := 0
		for range 100 {
			if d, err := f.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			} else if d.Allowed {
				allowed++
			}
		}
		if want := int(tc.local.Capacity()); allowed != want {
			t.Errorf("FallbackShare(%d) of %v: %d of 100 allowed while down, want %d", tc.instances, tc.remote, allowed, want)
		}
		// The local limiter reads the Failover's clock.
		clock.Advance(tc.local.Window)
		if d, err := f.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Errorf("FallbackShare(%d) of %v, a window later: %+v, %v; want allowed", tc.instances, tc.remote, d, err)
		}
	}
	for _, tc := range []struct {
		remote core.Limiter
		share  int
		want   string
	}{
		{newFlaky(t, core.Policy{Limit: 1, Window: time.Second}, clock), 0, "FallbackShare(0): at least 1 instance"},
		{newFlaky(t, core.Policy{Limit: 1, Window: time.Second}, clock), -3, "FallbackShare(-3)"},
		{unknownPolicy{}, 2, "no Policy to share"},
	} {
		_, err := core.NewFailover(tc.remote, core.WithErrorPolicy(core.FallbackShare(tc.share)))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "core: NewFailover: ") {
			t.Errorf("FallbackShare(%d): error %v, want one naming %q", tc.share, err, tc.want)
		}
	}
}

// unknownPolicy is a limiter with no Policy method.
type unknownPolicy struct{ core.Limiter }

// FallbackShare's local limiter follows the remote's SetPolicy: after the
// remote's limit is raised from 100 to 200, a down store's four servers
// each allow 50, not 25, and the usage counted before carries over.
func TestFailoverFallbackShareFollowsSetPolicy(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newFlaky(t, core.Policy{Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}, clock)
	remote.Down.Store(true)
	var hooked []error
	f := mustFailover(t, remote, core.WithErrorPolicy(core.FallbackShare(4)), core.WithClock(clock),
		core.WithErrorHook(func(err error) { hooked = append(hooked, err) }))
	allow := func(n int) (allowed int) {
		for range n {
			d, err := f.Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		return allowed
	}
	if got := allow(10); got != 10 {
		t.Fatalf("10 requests while down: %d allowed", got)
	}
	if err := remote.SetPolicy(core.Policy{Algorithm: core.FixedWindow, Limit: 200, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got := allow(100); got != 40 {
		t.Errorf("after the remote's raise to 200: %d more allowed, want 40 (a share of 50, 10 used)", got)
	}
	if p := core.FallbackOf(f).(*core.Memory).Policy(); p.Limit != 50 {
		t.Errorf("local policy %v, want a limit of 50", p)
	}
	for _, err := range hooked {
		if strings.Contains(err.Error(), "FallbackShare") {
			t.Errorf("hook: %v", err)
		}
	}
}
