package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
)

var errDown = errors.New("store: connection refused")

// flakyStore is a remote limiter that fails with errDown while down is set
// and otherwise decides by a memory limiter. It counts its calls.
type flakyStore struct {
	*core.Memory
	down    atomic.Bool
	calls   atomic.Int64
	gate    chan struct{} // when set, calls signal entered and wait on it
	entered chan struct{}
}

func newFlaky(t testing.TB, p core.Policy, clock core.Clock) *flakyStore {
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return &flakyStore{Memory: m}
}

func (s *flakyStore) call() error {
	s.calls.Add(1)
	if s.gate != nil {
		s.entered <- struct{}{}
		<-s.gate
	}
	if s.down.Load() {
		return errDown
	}
	return nil
}

func (s *flakyStore) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	if err := s.call(); err != nil {
		return core.Decision{}, fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.AllowN(ctx, key, n)
}

func (s *flakyStore) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	if err := s.call(); err != nil {
		return core.Decision{}, fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.Peek(ctx, key, n)
}

func (s *flakyStore) Reset(ctx context.Context, key string) error {
	if err := s.call(); err != nil {
		return fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.Reset(ctx, key)
}

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
		return mustFailover(t, newFlaky(t, p, clock), core.FailClosed(), core.BreakerClock(clock))
	})
}

func TestFailoverModes(t *testing.T) {
	p := core.Policy{Limit: 10, Window: time.Minute}
	clock := core.NewManualClock(limitertest.Start)
	local, _ := core.New(core.Policy{Limit: 2, Window: time.Minute}, core.WithClock(clock))
	tests := []struct {
		name string
		opt  core.FailoverOption
		want []core.Decision // for three requests of 3 units while down
	}{
		{"open", core.FailOpen(), []core.Decision{
			{Allowed: true, Limit: 10, Remaining: 7, Policy: p},
			{Allowed: true, Limit: 10, Remaining: 7, Policy: p},
			{Allowed: true, Limit: 10, Remaining: 7, Policy: p},
		}},
		// Closed: RetryAfter is the cool-down until the breaker opens (at
		// the second failure), then what is left of it.
		{"closed", core.FailClosed(), []core.Decision{
			{Limit: 10, RetryAfter: 5 * time.Second, Policy: p},
			{Limit: 10, RetryAfter: 5 * time.Second, Policy: p},
			{Limit: 10, RetryAfter: 4 * time.Second, Policy: p},
		}},
		{"fallback", core.Fallback(local), []core.Decision{
			{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 30 * time.Second, Policy: local.Policy()},
			{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 59 * time.Second, Policy: local.Policy()},
			{Limit: 2, Remaining: 0, RetryAfter: 28 * time.Second, ResetAfter: 58 * time.Second, Policy: local.Policy()},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock.Set(limitertest.Start)
			remote := newFlaky(t, p, clock)
			remote.down.Store(true)
			var hooked []error
			f := mustFailover(t, remote, tt.opt, core.BreakAfter(2, 5*time.Second), core.BreakerClock(clock),
				core.OnStoreError(func(err error) { hooked = append(hooked, err) }))
			for i, want := range tt.want {
				n := int64(3)
				if tt.name == "fallback" {
					n = 1
				}
				d, err := f.AllowN(ctx, "k", n)
				if err != nil {
					t.Fatalf("request %d: err %v, want a decision", i, err)
				}
				if d != want {
					t.Errorf("request %d:\n got %+v\nwant %+v", i, d, want)
				}
				clock.Advance(time.Second)
			}
			if len(hooked) != 2 || !errors.Is(hooked[0], errDown) {
				t.Errorf("hook called with %v, want the 2 errors before the breaker opened", hooked)
			}
			if got := remote.calls.Load(); got != 2 {
				t.Errorf("store called %d times, want 2 (then the breaker is open)", got)
			}
		})
	}
}

// The breaker: open after BreakAfter failures, one probe per cool-down,
// closed by a successful probe.
func TestFailoverBreaker(t *testing.T) {
	clock := core.NewManualClock(limitertest.Start)
	remote := newFlaky(t, core.Policy{Limit: 100, Window: time.Minute}, clock)
	var hooks atomic.Int64
	f := mustFailover(t, remote, core.FailOpen(), core.BreakAfter(3, 5*time.Second), core.BreakerClock(clock),
		core.OnStoreError(func(error) { hooks.Add(1) }))
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
		remote.down.Store(st.down)
		before := remote.calls.Load()
		for range st.requests {
			d, err := f.Allow(ctx, "k")
			if err != nil || !d.Allowed {
				t.Fatalf("step %d: %+v, %v; want allowed (fail open)", i, d, err)
			}
		}
		if got := remote.calls.Load() - before; got != st.wantCalls {
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
	clock := core.NewManualClock(limitertest.Start)
	remote := newFlaky(t, core.Policy{Limit: 10, Window: time.Minute}, clock)
	var hooked atomic.Int64
	f := mustFailover(t, remote, core.FailClosed(), core.BreakAfter(1, time.Second), core.BreakerClock(clock),
		core.OnStoreError(func(error) { hooked.Add(1) }))
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
	remote.down.Store(true)
	if _, err := f.Allow(cancelled, "k"); !errors.Is(err, errDown) {
		t.Errorf("cancelled caller: err %v, want the store's error", err)
	}
	remote.down.Store(false)
	if d, err := f.Allow(ctx, "k"); err != nil || !d.Allowed || remote.calls.Load() != 5 {
		t.Errorf("after caller errors: %+v, %v, %d calls; want the store asked (breaker closed)", d, err, remote.calls.Load())
	}
	if hooked.Load() != 0 {
		t.Errorf("hook called %d times for caller errors, want 0", hooked.Load())
	}
	// Bad input is rejected by the failure mode too while the breaker is
	// open.
	remote.down.Store(true)
	f.Allow(ctx, "k")
	if _, err := f.AllowN(ctx, "k", 11); !errors.Is(err, core.ErrCostTooHigh) {
		t.Errorf("open breaker, cost 11: err %v, want ErrCostTooHigh", err)
	}
	if err := f.Reset(ctx, "k"); !errors.Is(err, core.ErrBreakerOpen) {
		t.Errorf("Reset with the breaker open: %v, want ErrBreakerOpen", err)
	}
}

// Once the cool-down is over, concurrent requests send exactly one probe;
// the others are decided by the failure mode without waiting for it.
func TestFailoverOneProbe(t *testing.T) {
	clock := core.NewManualClock(limitertest.Start)
	remote := newFlaky(t, core.Policy{Limit: 10, Window: time.Minute}, clock)
	f := mustFailover(t, remote, core.FailClosed(), core.BreakAfter(1, time.Second), core.BreakerClock(clock))
	remote.down.Store(true)
	f.Allow(ctx, "k") // opens
	clock.Advance(time.Second)
	remote.gate, remote.entered = make(chan struct{}), make(chan struct{}, 1)
	remote.down.Store(false)
	probed := make(chan core.Decision)
	go func() {
		d, _ := f.Allow(ctx, "k")
		probed <- d
	}()
	<-remote.entered // the probe is waiting in the store
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, err := f.Allow(ctx, "k"); err != nil || d.Allowed {
				t.Errorf("during the probe: %+v, %v; want denied (fail closed)", d, err)
			}
		}()
	}
	wg.Wait()
	close(remote.gate)
	if d := <-probed; !d.Allowed {
		t.Errorf("the probe: %+v, want allowed by the store", d)
	}
	if got := remote.calls.Load(); got != 2 {
		t.Errorf("store called %d times, want 2 (the failure and one probe)", got)
	}
	if d, _ := f.Allow(ctx, "k"); !d.Allowed || remote.calls.Load() != 3 {
		t.Errorf("after the probe: %+v; want the store to decide again", d)
	}
}

func TestNewFailoverErrors(t *testing.T) {
	remote := newFlaky(t, core.Policy{Limit: 1, Window: time.Second}, core.SystemClock{})
	for _, opts := range [][]core.FailoverOption{
		{core.Fallback(nil)},
		{core.BreakAfter(0, time.Second)},
		{core.BreakAfter(1, 0)},
		{core.RemoteTimeout(-1)},
		{core.BreakerClock(nil)},
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
		core.Fallback(local),
		core.BreakAfter(2, 10*time.Second),
		core.OnStoreError(func(err error) { fmt.Println("store error:", err) }),
		core.BreakerClock(clock),
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
