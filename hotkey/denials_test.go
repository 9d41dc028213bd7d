package hotkey_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// countingStore is a remote limiter that decides by a memory limiter and
// counts the calls it gets.
type countingStore struct {
	*core.Memory
	allows, peeks, resets atomic.Int64
}

func newCounting(t testing.TB, p core.Policy, clock core.Clock) *countingStore {
	t.Helper()
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return &countingStore{Memory: m}
}

func (s *countingStore) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	s.allows.Add(1)
	return s.Memory.AllowN(ctx, key, n)
}

func (s *countingStore) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	s.peeks.Add(1)
	return s.Memory.Peek(ctx, key, n)
}

func (s *countingStore) Reset(ctx context.Context, key string) error {
	s.resets.Add(1)
	return s.Memory.Reset(ctx, key)
}

func (s *countingStore) calls() int64 { return s.allows.Load() + s.peeks.Load() }

func mustDenialCache(t testing.TB, remote core.Limiter, opts ...hotkey.Option) *hotkey.DenialCache {
	t.Helper()
	c, err := hotkey.NewDenialCache(remote, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A denial cache in front of a store decides exactly as the store: the
// whole conformance suite, every algorithm.
func TestDenialCacheConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustDenialCache(t, newCounting(t, p, clock), hotkey.WithClock(clock))
	})
}

// After a denial, requests of the same cost are denied from memory, with
// zero remote calls and a RetryAfter that counts down with the clock;
// other costs ask the remote limiter.
func TestDenialCacheSteps(t *testing.T) {
	ms := time.Millisecond
	p := core.Policy{Limit: 10, Window: time.Second} // one token per 100ms
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newCounting(t, p, clock)
	c := mustDenialCache(t, remote, hotkey.WithClock(clock))
	for range 10 {
		if d, _ := c.Allow(ctx, "k"); !d.Allowed {
			t.Fatal("first 10 requests: denied")
		}
	}
	steps := []struct {
		at          time.Duration
		n           int64
		peek        bool
		wantAllowed bool
		wantRetry   time.Duration
		wantRemote  int64 // remote calls so far
	}{
		{0, 1, false, false, 100 * ms, 11}, // denied by the remote: remembered
		{0, 1, false, false, 100 * ms, 11}, // from memory
		{30 * ms, 1, false, false, 70 * ms, 11},
		{30 * ms, 1, true, false, 70 * ms, 11}, // Peek too
		{99 * ms, 1, false, false, 1 * ms, 11},
		{99 * ms, 2, false, false, 101 * ms, 12}, // another cost: the remote
		{99 * ms, 1, false, false, 1 * ms, 12},   // the smaller cost is kept
		{100 * ms, 1, false, true, 0, 13},        // run out: the remote allows
		{100 * ms, 1, false, false, 100 * ms, 14},
		{150 * ms, 1, false, false, 50 * ms, 14},
	}
	for i, s := range steps {
		clock.Set(limitercheck.StartTime().Add(s.at))
		var d core.Decision
		var err error
		if s.peek {
			d, err = c.Peek(ctx, "k", s.n)
		} else {
			d, err = c.AllowN(ctx, "k", s.n)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed != s.wantAllowed || d.RetryAfter != s.wantRetry || d.Limit != 10 || d.Policy != p {
			t.Errorf("step %d (at %v, n=%d): got allowed=%v retryAfter=%v limit=%d, want allowed=%v retryAfter=%v limit=10",
				i, s.at, s.n, d.Allowed, d.RetryAfter, d.Limit, s.wantAllowed, s.wantRetry)
		}
		if got := remote.calls(); got != s.wantRemote {
			t.Errorf("step %d: %d remote calls, want %d", i, got, s.wantRemote)
		}
	}
	if c.Hits() != 6 {
		t.Errorf("Hits() = %d, want 6", c.Hits())
	}
	// Reset forgets the denial: the next request reaches the remote.
	if err := c.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.Allow(ctx, "k"); !d.Allowed || remote.calls() != 15 {
		t.Errorf("after Reset: allowed=%v, %d remote calls; want allowed, 15", d.Allowed, remote.calls())
	}
	// A clock moved back before the denial forgets it.
	for range 10 {
		c.Allow(ctx, "b")
	}
	before := remote.calls()
	clock.Advance(-time.Second)
	c.Allow(ctx, "b")
	if remote.calls() != before+1 {
		t.Errorf("clock moved back: %d remote calls, want 1", remote.calls()-before)
	}
}

// A hammered key costs one remote call per RetryAfter, however many
// goroutines hammer it.
func TestDenialCacheHammer(t *testing.T) {
	p := core.Policy{Limit: 100, Window: time.Minute}
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newCounting(t, p, clock)
	c := mustDenialCache(t, remote, hotkey.WithClock(clock))
	var allowed atomic.Int64
	for step := range 100 { // 100 steps of 100ms: 10 s
		done := make(chan struct{})
		for range 4 {
			go func() {
				defer func() { done <- struct{}{} }()
				for range 50 {
					if d, err := c.Allow(ctx, "hot"); err != nil {
						t.Error(err)
						return
					} else if d.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		for range 4 {
			<-done
		}
		_ = step
		clock.Advance(100 * time.Millisecond)
	}
	// 100 at once, then one every 600ms: 100 + 16 in 10s.
	if got := allowed.Load(); got != 116 {
		t.Errorf("%d allowed, want 116", got)
	}
	// Each denial reaches the remote at most once per goroutine racing on
	// the first one, then once per run-out.
	t.Logf("20000 requests, %d allowed, %d remote calls", allowed.Load(), remote.calls())
	if remote.calls() > 116+4*18 {
		t.Errorf("%d remote calls for 20000 requests", remote.calls())
	}
}

func TestDenialCacheErrors(t *testing.T) {
	p := core.Policy{Limit: 10, Window: time.Second}
	clock := core.NewManualClock(limitercheck.StartTime())
	if _, err := hotkey.NewDenialCache(nil); err == nil {
		t.Error("NewDenialCache(nil): no error")
	}
	if _, err := hotkey.NewDenialCache(newCounting(t, p, clock), hotkey.WithMaxKeys(0)); err == nil {
		t.Error("WithMaxKeys(0): no error")
	}
	if _, err := hotkey.NewDenialCache(newCounting(t, p, clock), hotkey.WithClock(nil)); err == nil {
		t.Error("WithClock(nil): no error")
	}
	// One key remembered: a second denied key pushes the first out.
	remote := newCounting(t, core.Policy{Limit: 1, Window: time.Hour}, clock)
	c := mustDenialCache(t, remote, hotkey.WithClock(clock), hotkey.WithMaxKeys(1))
	for _, k := range []string{"a", "a", "b", "b", "a"} {
		c.Allow(ctx, k)
	}
	// a: allowed, denied (remembered); b: allowed (a still held), denied
	// (replaces a); a: the remote again.
	if got := remote.calls(); got != 5 {
		t.Errorf("%d remote calls, want 5", got)
	}
}

// A refund forgets the key's remembered denial: the key has room again.
func TestDenialCacheRefund(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newCounting(t, core.Policy{Limit: 2, Window: time.Hour}, clock)
	c := mustDenialCache(t, remote, hotkey.WithClock(clock))
	allow(t, c, "k", 2)
	for range 2 {
		if d := allow(t, c, "k", 1); d.Allowed {
			t.Fatalf("exhausted key allowed")
		}
	}
	if c.Hits() != 1 {
		t.Fatalf("%d hits, want the second denial from memory", c.Hits())
	}
	if err := c.Refund(ctx, "k", 1, 0); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, c, "k", 1); !d.Allowed {
		t.Fatalf("after the refund: %+v, want allowed (the denial forgotten)", d)
	}
}

// Over a layered remote limiter, AllowLayers answers a remembered denial
// with every layer, counted down as the Decision is, and exactly as the
// remote limiter would report them then.
func TestDenialCacheLayers(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	minute, err := core.New(core.Policy{Name: "minute", Limit: 2, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	day, err := core.New(core.Policy{Name: "day", Limit: 100, Window: 24 * time.Hour}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	remote, err := core.NewLayered(minute, day)
	if err != nil {
		t.Fatal(err)
	}
	c, err := hotkey.NewDenialCache(remote, hotkey.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if ld, err := c.AllowLayers(ctx, "k", 1); err != nil || !ld.Allowed || len(ld.Layers) != 2 {
			t.Fatalf("AllowLayers = %+v, %v; want allowed with 2 layers", ld, err)
		}
	}
	first, err := c.AllowLayers(ctx, "k", 1)
	if err != nil || first.Allowed || first.Layer != 0 || len(first.Layers) != 2 || c.Hits() != 0 {
		t.Fatalf("third AllowLayers = %+v, %v, %d hits; want denied by layer 0, from the remote", first, err, c.Hits())
	}
	clock.Advance(time.Second)
	got, err := c.AllowLayers(ctx, "k", 1)
	if err != nil || c.Hits() != 1 {
		t.Fatalf("AllowLayers %v, %d hits; want one answered from memory", err, c.Hits())
	}
	want, err := remote.PeekLayers(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Allowed || got.Layer != want.Layer || got.RetryAfter != want.RetryAfter || len(got.Layers) != 2 ||
		got.Layers[0].RetryAfter != want.Layers[0].RetryAfter || got.Layers[1].Remaining != want.Layers[1].Remaining ||
		got.Layers[0].ResetAfter != want.Layers[0].ResetAfter {
		t.Errorf("from memory %+v, remote now %+v", got, want)
	}
	// A denial remembered by AllowN, without layers, does not answer
	// AllowLayers, and AllowN is answered from memory as before.
	if _, err := c.AllowN(ctx, "j", 3); err == nil {
		t.Fatal("cost 3 over a limit of 2: no error")
	}
	if d, err := c.AllowN(ctx, "k", 1); err != nil || d.Allowed || c.Hits() != 2 {
		t.Errorf("AllowN = %+v, %v, %d hits; want denied from memory", d, err, c.Hits())
	}
}
