package inflight_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/inflight"
)

var ctx = context.Background()

func newMemory(t *testing.T, limit int64, opts ...inflight.Option) (*inflight.Memory, *core.ManualClock) {
	t.Helper()
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := inflight.New(limit, append([]inflight.Option{inflight.WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m, clock
}

func acquire(t *testing.T, l inflight.Limiter, key string, wantAllowed bool, wantInFlight int64) inflight.Decision {
	t.Helper()
	d, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	if d.Allowed != wantAllowed || d.InFlight != wantInFlight {
		t.Fatalf("Acquire(%q) = allowed %v, in flight %d; want %v, %d", key, d.Allowed, d.InFlight, wantAllowed, wantInFlight)
	}
	return d
}

func TestMemoryCapAndRelease(t *testing.T) {
	m, _ := newMemory(t, 2)
	a := acquire(t, m, "k", true, 1)
	acquire(t, m, "k", true, 2)
	d := acquire(t, m, "k", false, 2)
	if d.RetryAfter != inflight.DefaultRetryAfter || d.Limit != 2 || d.Lease != (inflight.Lease{}) {
		t.Fatalf("refusal = %+v, want RetryAfter %v, Limit 2, no lease", d, inflight.DefaultRetryAfter)
	}
	acquire(t, m, "other", true, 1)
	if err := m.Release(ctx, a.Lease); err != nil {
		t.Fatal(err)
	}
	// A second release of the same lease frees nothing more.
	if err := m.Release(ctx, a.Lease); err != nil {
		t.Fatal(err)
	}
	acquire(t, m, "k", true, 2)
	acquire(t, m, "k", false, 2)
}

func TestMemoryLeaseExpires(t *testing.T) {
	m, clock := newMemory(t, 1, inflight.WithLeaseTTL(10*time.Second))
	acquire(t, m, "k", true, 1) // never released
	clock.Advance(9500 * time.Millisecond)
	if d := acquire(t, m, "k", false, 1); d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("RetryAfter = %v, want 500ms (the lease's expiry, sooner than the default)", d.RetryAfter)
	}
	clock.Advance(500 * time.Millisecond)
	acquire(t, m, "k", true, 1)
}

func TestMemoryMaxKeysNeverOverAdmits(t *testing.T) {
	// One key per shard at most: a new key is refused while every key
	// holds a live lease, and takes the place of one whose leases expired.
	m, clock := newMemory(t, 1, inflight.WithMaxKeys(1), inflight.WithLeaseTTL(time.Second))
	var refused string
	for i := 0; refused == ""; i++ {
		key := string(rune('a'+i%26)) + string(rune('a'+i/26))
		d, err := m.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			refused = key
		}
		if i > 10000 {
			t.Fatal("no key refused at the bound")
		}
	}
	clock.Advance(time.Second)
	acquire(t, m, refused, true, 1)
}

func TestMemoryConcurrentNPlusOne(t *testing.T) {
	const n = 8
	m, _ := newMemory(t, n)
	for round := range 50 {
		var allowed atomic.Int64
		leases := make(chan inflight.Lease, n+1)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range n + 1 {
			wg.Go(func() {
				<-start
				d, err := m.Acquire(ctx, "hot")
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					allowed.Add(1)
					leases <- d.Lease
				}
			})
		}
		close(start)
		wg.Wait()
		close(leases)
		if got := allowed.Load(); got != n {
			t.Fatalf("round %d: %d of %d concurrent requests allowed, want %d", round, got, n+1, n)
		}
		for l := range leases {
			if err := m.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		if got := m.InFlight("hot"); got != 0 {
			t.Fatalf("round %d: %d in flight after every release, want 0", round, got)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for name, f := range map[string]func() (*inflight.Memory, error){
		"limit 0":   func() (*inflight.Memory, error) { return inflight.New(0) },
		"ttl 0":     func() (*inflight.Memory, error) { return inflight.New(1, inflight.WithLeaseTTL(0)) },
		"nil clock": func() (*inflight.Memory, error) { return inflight.New(1, inflight.WithClock(nil)) },
		"keys 0":    func() (*inflight.Memory, error) { return inflight.New(1, inflight.WithMaxKeys(0)) },
		"nil opt":   func() (*inflight.Memory, error) { return inflight.New(1, nil) },
	} {
		if _, err := f(); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	m, _ := newMemory(t, 1)
	if _, err := m.Acquire(ctx, ""); err != inflight.ErrEmptyKey {
		t.Errorf("Acquire(\"\") = %v, want ErrEmptyKey", err)
	}
}
