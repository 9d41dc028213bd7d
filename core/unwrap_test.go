package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
)

// tally is a user's own wrapper: it counts the calls it passes on. It
// implements LayeredLimiter and Refunder whatever it wraps, as core's
// wrappers do, and Unwrap, so that core.As see through it.
type tally struct {
	l     core.Limiter
	calls int
}

func (w *tally) Unwrap() core.Limiter { return w.l }

func (w *tally) Allow(ctx context.Context, key string) (core.Decision, error) {
	return w.AllowN(ctx, key, 1)
}

func (w *tally) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	w.calls++
	return w.l.AllowN(ctx, key, n)
}

func (w *tally) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	return w.l.Peek(ctx, key, n)
}

func (w *tally) Reset(ctx context.Context, key string) error { return w.l.Reset(ctx, key) }

func (w *tally) AllowLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	w.calls++
	if ll, ok := w.l.(core.LayeredLimiter); ok {
		return ll.AllowLayers(ctx, key, n)
	}
	d, err := w.l.AllowN(ctx, key, n)
	return core.MostRestrictive([]core.Decision{d}), err
}

func (w *tally) PeekLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	if ll, ok := w.l.(core.LayeredLimiter); ok {
		return ll.PeekLayers(ctx, key, n)
	}
	d, err := w.l.Peek(ctx, key, n)
	return core.MostRestrictive([]core.Decision{d}), err
}

func (w *tally) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	if r, ok := w.l.(core.Refunder); ok {
		return r.Refund(ctx, key, n, elapsed)
	}
	return core.ErrNoRefund
}

// opaque is a user's wrapper that implements only Limiter and Unwrap: it
// is a plain limiter, whatever it wraps.
type opaque struct{ core.Limiter }

func (w opaque) Unwrap() core.Limiter { return w.Limiter }

// core.As follow Unwrap through a user's own wrapper, in
// either order with core's wrappers, as they do through core's.
func TestUnwrapUserWrapper(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	p := core.Policy{Limit: 10, Window: time.Minute}
	mem := mustNew(t, p, clock)
	lay := mustLayered(t, mustNew(t, p, clock), mustNew(t, core.Policy{Limit: 100, Window: time.Hour}, clock))
	leased := mustLeased(t, mustNew(t, p, clock), 2, hotkey.WithClock(clock))
	observe := func(l core.Limiter) core.Limiter { return mustObserved(t, l, &recorder{}) }
	wrap := func(l core.Limiter) core.Limiter { return &tally{l: l} }

	for _, c := range []struct {
		name           string
		l              core.Limiter
		layered, funds bool
	}{
		{"tally(layered)", wrap(lay), true, true},
		{"tally(memory)", wrap(mem), false, true},
		{"observed(tally(layered))", observe(wrap(lay)), true, true},
		{"tally(observed(layered))", wrap(observe(lay)), true, true},
		{"tally(observed(memory))", wrap(observe(mem)), false, true},
		{"failover(tally(layered))", mustFailover(t, wrap(lay)), true, true},
		{"tally(hidden)", wrap(hidden{mem}), false, false},
		{"observed(tally(leased))", observe(wrap(leased)), false, false},
		{"tally(denial-cache(hidden))", wrap(mustDenialCache(t, hidden{mem})), false, false},
		{"opaque(layered)", opaque{lay}, false, false},
		{"tally(opaque(layered))", wrap(opaque{lay}), false, false},
		{"observed(opaque(memory))", observe(opaque{mem}), false, false},
	} {
		if _, got := core.As[core.LayeredLimiter](c.l); got != c.layered {
			t.Errorf("As[LayeredLimiter](%s) = %v, want %v", c.name, got, c.layered)
		}
		if _, got := core.As[core.Refunder](c.l); got != c.funds {
			t.Errorf("As[Refunder](%s) = %v, want %v", c.name, got, c.funds)
		}
	}

	// The wrapper is used, not only looked through.
	w := &tally{l: lay}
	ll, ok := core.As[core.LayeredLimiter](mustObserved(t, w, &recorder{}))
	if !ok {
		t.Fatal("As[LayeredLimiter](observed(tally(layered))) = false")
	}
	ld, err := ll.AllowLayers(ctx, "k", 1)
	if err != nil || !ld.Allowed || len(ld.Layers) != 2 || w.calls != 1 {
		t.Errorf("AllowLayers: %+v, %v, %d calls; want allowed, 2 layers, 1 call", ld, err, w.calls)
	}
	r, _ := core.As[core.Refunder](w)
	if err := r.Refund(ctx, "k", 1, 0); err != nil {
		t.Errorf("Refund: %v", err)
	}
	if err := mustObserved(t, wrap(hidden{mem}), &recorder{}).Refund(ctx, "k", 1, 0); !errors.Is(err, core.ErrNoRefund) {
		t.Errorf("observed(tally(hidden)).Refund: %v, want ErrNoRefund", err)
	}
}

// Each of core's wrappers unwraps to the limiter it passes requests to.
func TestUnwrap(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	p := core.Policy{Limit: 10, Window: time.Minute}
	remote, local, candidate := mustNew(t, p, clock), mustNew(t, p, clock), mustNew(t, p, clock)
	failover := mustFailover(t, remote, core.WithErrorPolicy(core.Fallback(local)))
	for _, c := range []struct {
		name string
		w    core.Wrapper
	}{
		{"failover", failover},
		{"observed", mustObserved(t, remote, &recorder{})},
		{"shadow", mustShadow(t, remote, candidate, &recorder{})},
		{"denial-cache", mustDenialCache(t, remote)},
		{"leased", mustLeased(t, remote, 2, hotkey.WithClock(clock))},
	} {
		if got := c.w.Unwrap(); got != core.Limiter(remote) {
			t.Errorf("%s: Unwrap() = %p, want %p", c.name, got, remote)
		}
	}
	if got := core.FallbackOf(failover); got != core.Limiter(local) {
		t.Errorf("the fallback = %p, want %p", got, local)
	}
	if got := core.FallbackOf(mustFailover(t, remote)); got != nil {
		t.Errorf("the fallback without the Fallback policy = %v, want nil", got)
	}
}
