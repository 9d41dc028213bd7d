package core

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newBlockingForTest(t *testing.T, p Policy, b Block) (*Blocking, *ManualClock, *Memory) {
	t.Helper()
	clock := NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	m, err := New(p, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	lo, err := NewLockout(b, clock, func(p Policy) (Limiter, error) { return New(p, WithClock(clock)) })
	if err != nil {
		t.Fatal(err)
	}
	bl, err := NewBlocking(m, lo)
	if err != nil {
		t.Fatal(err)
	}
	return bl, clock, m
}

// A key that breaks its limit is refused for the lock's time exactly,
// counting nothing meanwhile; each lock while earlier ones are remembered
// doubles, up to Max; each Forget of quiet forgets one.
func TestBlockingGrowsAndForgets(t *testing.T) {
	ctx := context.Background()
	p := Policy{Algorithm: FixedWindow, Limit: 2, Window: time.Second}
	bl, clock, m := newBlockingForTest(t, p, Block{For: time.Minute, Max: 4 * time.Minute, Forget: 10 * time.Minute})
	if got := bl.lockout.steps; len(got) != 3 || got[0] != time.Minute || got[2] != 4*time.Minute {
		t.Fatalf("steps %v, want 1m 2m 4m", got)
	}
	violate := func(want time.Duration) {
		t.Helper()
		for range 2 {
			if d, err := bl.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("within the limit: %+v, %v", d, err)
			}
		}
		d, err := bl.AllowN(ctx, "k", 1)
		if err != nil || d.Allowed || d.RetryAfter != want || d.Remaining != 0 || d.Limit != 2 {
			t.Fatalf("the violation: %+v, %v; want refused for %v", d, err, want)
		}
		// Locked: refused for the time left, the window's count untouched.
		clock.Advance(time.Second)
		d, err = bl.AllowN(ctx, "k", 1)
		if err != nil || d.Allowed || d.RetryAfter != want-time.Second {
			t.Fatalf("locked: %+v, %v; want refused for %v", d, err, want-time.Second)
		}
		if pk, _ := m.Peek(ctx, "k", 1); pk.Remaining != 2 {
			t.Fatalf("a refused request was counted: %d left in the window", pk.Remaining)
		}
		if pk, _ := bl.Peek(ctx, "k", 1); pk.Allowed || pk.RetryAfter != want-time.Second {
			t.Fatalf("Peek while locked: %+v", pk)
		}
		clock.Advance(want - time.Second - time.Microsecond)
		if d, _ := bl.AllowN(ctx, "k", 1); d.Allowed || d.RetryAfter != time.Microsecond {
			t.Fatalf("1µs before the lock ends: %+v", d)
		}
		clock.Advance(time.Microsecond)
	}
	violate(time.Minute)
	violate(2 * time.Minute)
	violate(4 * time.Minute)
	violate(4 * time.Minute) // Max
	// The level refills a lock per 10 minutes. The third lock (12:03) left
	// 0.3 of one; the fourth (12:07) found 0.7, less than a lock, and was
	// Max. At 12:16 it holds 1.6: the lock is still Max. 24 minutes after
	// that it is full again, and the next lock is the first step.
	clock.Advance(5 * time.Minute)
	violate(4 * time.Minute)
	clock.Advance(40 * time.Minute)
	violate(time.Minute)
	if err := bl.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if w, _ := bl.lockout.Locked(ctx, "k"); w != 0 {
		t.Fatalf("locked after Reset for %v", w)
	}
	violate(time.Minute)
}

// The limiter's wait, when longer than the lock, is the refusal's.
func TestBlockingKeepsTheLongerWait(t *testing.T) {
	ctx := context.Background()
	bl, _, _ := newBlockingForTest(t, Policy{Algorithm: FixedWindow, Limit: 1, Window: time.Hour}, Block{For: time.Minute})
	bl.AllowN(ctx, "k", 1)
	if d, _ := bl.AllowN(ctx, "k", 1); d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("%+v: want refused for the window's hour", d)
	}
}

// Clients in parallel on a key at its limit: one of them locks it, the
// rest find the lock; nothing is counted past the limit.
func TestBlockingParallel(t *testing.T) {
	ctx := context.Background()
	bl, _, m := newBlockingForTest(t, Policy{Algorithm: SlidingLog, Limit: 50, Window: time.Hour}, Block{For: time.Minute, Max: time.Hour})
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				d, err := bl.AllowN(ctx, "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if w, _ := bl.lockout.Locked(ctx, "k"); w <= 0 || w > time.Hour {
		t.Errorf("locked for %v after the flood", w)
	}
	if pk, _ := m.Peek(ctx, "k", 1); allowed.Load() != 50 || pk.Remaining != 0 {
		t.Errorf("allowed %d (%d left), want the limit, 50", allowed.Load(), pk.Remaining)
	}
	// One lock taken: the next lock after this one is the second step.
	d, took, err := bl.lockout.Lock(ctx, "k")
	if err != nil || took || d <= 0 {
		t.Errorf("Lock on a locked key: %v, %v, %v; want the time left, not taken", d, took, err)
	}
}

// A layered limiter's layers come through, the denying one refused for
// the lock's time.
func TestBlockingLayers(t *testing.T) {
	ctx := context.Background()
	clock := NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	a, _ := New(Policy{Limit: 1, Window: time.Second}, WithClock(clock))
	b, _ := New(Policy{Limit: 10, Window: time.Hour}, WithClock(clock))
	l, _ := NewLayered(a, b)
	lo, err := NewLockout(Block{For: time.Minute}, clock, func(p Policy) (Limiter, error) { return New(p, WithClock(clock)) })
	if err != nil {
		t.Fatal(err)
	}
	bl, _ := NewBlocking(l, lo)
	if lay, ok := As[LayeredLimiter](bl); !ok || lay == nil {
		t.Fatal("a Blocking over a Layered is not a LayeredLimiter")
	}
	if ld, err := bl.AllowLayers(ctx, "k", 1); err != nil || !ld.Allowed || len(ld.Layers) != 2 {
		t.Fatalf("%+v, %v", ld, err)
	}
	ld, err := bl.AllowLayers(ctx, "k", 1)
	if err != nil || ld.Allowed || ld.Layer != 0 || ld.RetryAfter != time.Minute || ld.Layers[0].RetryAfter != time.Minute || !ld.Layers[1].Allowed {
		t.Fatalf("%+v, %v: want layer 0 refused for the lock's minute", ld, err)
	}
}

func TestNewLockoutErrors(t *testing.T) {
	mem := func(p Policy) (Limiter, error) { return New(p) }
	for _, c := range []struct {
		b    Block
		want string
	}{
		{Block{}, "For 0s: must be positive"},
		{Block{For: time.Hour, Max: time.Minute}, "Max 1m0s: must be at least For, 1h0m0s"},
		{Block{For: time.Hour, Max: MaxWindow}, "Max 8784h0m0s: must be at most 4392h0m0s"},
		{Block{For: 1500 * time.Nanosecond}, "whole microseconds"},
		{Block{For: time.Minute, Forget: -1}, "Forget -1ns: must not be negative"},
		{Block{For: time.Minute, Name: "a b"}, `Name "a b"`},
	} {
		_, err := NewLockout(c.b, nil, mem)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewLockout(%+v) = %v, want an error with %q", c.b, err, c.want)
		}
	}
	if _, err := NewLockout(Block{For: time.Minute}, nil, func(Policy) (Limiter, error) { return nil, nil }); err == nil {
		t.Error("a nil limiter was taken")
	}
	broken := errors.New("broken")
	if _, err := NewLockout(Block{For: time.Minute}, nil, func(Policy) (Limiter, error) { return nil, broken }); !errors.Is(err, broken) {
		t.Errorf("the constructor's error: %v", err)
	}
	if _, err := NewBlocking(nil, nil); err == nil {
		t.Error("NewBlocking(nil, nil) succeeded")
	}
}
