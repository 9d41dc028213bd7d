// Package metricstest is the workload both metrics exporters' tests drive
// (ratekitprom's scrape, ratekitotel's collection), so that the two are
// held to the same counts, series by series.
package metricstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/observe"
)

// Start is the time the exporters' tests start their manual clocks at.
var Start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// Must returns a function that returns v, failing t on err.
func Must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// NewMemory returns a memory limiter of p on clock, failing t on error.
func NewMemory(t testing.TB, p core.Policy, clock core.Clock, opts ...core.Option) *core.Memory {
	t.Helper()
	return Must[*core.Memory](t)(core.New(p, append([]core.Option{core.WithClock(clock)}, opts...)...))
}

// Watches are an exporter's Watch methods, taking the limiters as they are.
type Watches struct {
	Memory   func(policy string, m *core.Memory) error
	Failover func(policy string, f *core.Failover) error
	Leased   func(policy string, l *hotkey.Leased) error
}

// ErrDown is the error of the workload's failing store.
var ErrDown = errors.New("store: connection refused")

// SlowStore decides by a Memory limiter, advancing the clock by Lag on
// every call so the observed latency is exact, or fails while Down.
type SlowStore struct {
	*core.Memory
	Clock *core.ManualClock
	Lag   time.Duration
	Down  bool
}

// AllowN advances the clock by Lag and decides, or fails while Down.
func (s *SlowStore) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	s.Clock.Advance(s.Lag)
	if s.Down {
		return core.Decision{}, ErrDown
	}
	return s.Memory.AllowN(ctx, key, n)
}

// Peek advances the clock by Lag and peeks, or fails while Down.
func (s *SlowStore) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	s.Clock.Advance(s.Lag)
	if s.Down {
		return core.Decision{}, ErrDown
	}
	return s.Memory.Peek(ctx, key, n)
}

// Run drives the workload through obs and w on clock:
//   - "api", 3 a minute, on a store that decides in 250 ms (500 ms twice):
//     5 requests (3 allowed, the third near its limit; 2 denied), a cost
//     of 10 (an error), a Peek denied and one allowed; "api-v2", 2 a
//     minute, is its shadow candidate (2 allowed, 3 denied); api watched;
//   - "redis", a Failover whose store fails twice: its breaker opens;
//   - "small", holding one key: one lossy eviction, one fresh drop;
//   - "lease", a Leased limiter taking 1, then 2 units for 3 requests.
//
// It returns "small", for a test that collects again after more traffic.
func Run(t testing.TB, clock *core.ManualClock, obs observe.Observer, w Watches) (small *core.Memory) {
	t.Helper()
	ctx := context.Background()
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	memory := func(p core.Policy, opts ...core.Option) *core.Memory {
		t.Helper()
		return NewMemory(t, p, clock, opts...)
	}

	api := memory(core.Policy{Name: "api", Limit: 3, Window: time.Minute})
	store := &SlowStore{Memory: api, Clock: clock, Lag: 250 * time.Millisecond}
	candidate := memory(core.Policy{Name: "api-v2", Limit: 2, Window: time.Minute})
	observed, err := observe.New(store, obs, observe.WithClock(clock))
	check(err)
	l, err := observe.NewShadow(observed, candidate, obs, observe.WithClock(clock))
	check(err)
	check(w.Memory("api", api))
	for i := range 5 { // 3 allowed, 2 denied; the shadow: 2 allowed, 3 denied
		if i >= 3 {
			store.Lag = 500 * time.Millisecond
		}
		l.Allow(ctx, "203.0.113.7")
	}
	store.Lag = 250 * time.Millisecond
	l.AllowN(ctx, "203.0.113.7", 10) // an error for both
	l.Peek(ctx, "203.0.113.7", 1)    // denied for both
	l.Peek(ctx, "198.51.100.1", 1)   // allowed for both

	remote := &SlowStore{Memory: memory(core.Policy{Name: "redis", Limit: 10, Window: time.Minute}), Clock: clock, Down: true}
	f, err := core.NewFailover(remote, append([]core.FailoverOption{core.WithBreaker(2, time.Second), core.WithClock(clock)},
		observe.FailoverHooks(obs, "redis")...)...)
	check(err)
	check(w.Failover("redis", f))
	for range 3 {
		f.Allow(ctx, "k")
	}

	small = memory(core.Policy{Name: "small", Limit: 1, Window: time.Second}, core.WithMaxKeys(1))
	check(w.Memory("small", small))
	small.Allow(ctx, "x")
	small.Allow(ctx, "y") // x still holds usage: lossy
	clock.Advance(time.Second)
	small.Allow(ctx, "z") // y is fresh now

	leased, err := hotkey.NewLeased(memory(core.Policy{Name: "lease", Limit: 100, Window: time.Minute}), 10, hotkey.WithClock(clock))
	check(err)
	check(w.Leased("lease", leased))
	for range 3 {
		leased.Allow(ctx, "hot")
	}
	return small
}
