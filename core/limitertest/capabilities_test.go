package limitertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/observe"
)

// Every wrapper of ours, over every kind of inner limiter and over every
// other wrapper, has exactly the capabilities of what it wraps (core.As
// finds them or not alike), passes each on (a Refund gives back, AllowLayers
// reports the inner layers, Policy is the inner policy) and unwraps to it.
// hotkey.Leased is the one wrapper that passes on only its policy: its
// decisions are local spending of leased units (see its doc).
func TestWrappersKeepCapabilities(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := core.Policy{Name: "api", Limit: 10, Window: time.Minute}
	nop := observe.ObserverFunc(func(context.Context, observe.Event) {})

	type maker struct {
		name string
		make func(t *testing.T, clock *core.ManualClock) core.Limiter
	}
	mem := func(t *testing.T, clock *core.ManualClock, p core.Policy) *core.Memory {
		m, err := core.New(p, core.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	inners := []maker{
		{"memory", func(t *testing.T, c *core.ManualClock) core.Limiter { return mem(t, c, p) }},
		{"layered", func(t *testing.T, c *core.ManualClock) core.Limiter {
			l, err := core.NewLayered(mem(t, c, p), mem(t, c, core.Policy{Name: "day", Limit: 100, Window: 24 * time.Hour}))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{"tiered", func(t *testing.T, c *core.ManualClock) core.Limiter {
			l, err := core.NewTiered(map[string]core.Policy{"free": p}, func(context.Context, string) (string, error) { return "free", nil }, core.WithClock(c))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{"plain", func(t *testing.T, c *core.ManualClock) core.Limiter { return plain{mem(t, c, p)} }},
	}
	type wrapper struct {
		name string
		wrap func(t *testing.T, clock *core.ManualClock, l core.Limiter) core.Limiter
		// passes reports whether the wrapper passes on capability c.
		passes func(c string) bool
	}
	all := func(string) bool { return true }
	must := func(t *testing.T, l core.Limiter, err error) core.Limiter {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	wrappers := []wrapper{
		{"failover", func(t *testing.T, c *core.ManualClock, l core.Limiter) core.Limiter {
			f, err := core.NewFailover(l, core.WithClock(c))
			return must(t, f, err)
		}, all},
		{"failover-fallback", func(t *testing.T, c *core.ManualClock, l core.Limiter) core.Limiter {
			f, err := core.NewFailover(l, core.WithClock(c), core.WithErrorPolicy(core.Fallback(mem(t, c, p))))
			return must(t, f, err)
		}, all},
		{"denial-cache", func(t *testing.T, c *core.ManualClock, l core.Limiter) core.Limiter {
			d, err := hotkey.NewDenialCache(l, hotkey.WithClock(c))
			return must(t, d, err)
		}, all},
		{"leased", func(t *testing.T, c *core.ManualClock, l core.Limiter) core.Limiter {
			d, err := hotkey.NewLeased(l, 2, hotkey.WithClock(c))
			return must(t, d, err)
		}, func(c string) bool { return c == "policy" }},
		{"observed", func(t *testing.T, c *core.ManualClock, l core.Limiter) core.Limiter {
			o, err := observe.New(l, nop, observe.WithClock(c))
			return must(t, o, err)
		}, all},
		{"shadow", func(t *testing.T, c *core.ManualClock, l core.Limiter) core.Limiter {
			s, err := observe.NewShadow(l, mem(t, c, p), nop, observe.WithClock(c))
			return must(t, s, err)
		}, all},
	}

	check := func(t *testing.T, name string, inner, outer core.Limiter, w wrapper) {
		t.Helper()
		if u, ok := outer.(core.Wrapper); !ok || u.Unwrap() != inner {
			t.Errorf("%s: does not unwrap to what it wraps", name)
		}
		want := func(c string, innerHas bool) bool { return innerHas && w.passes(c) }

		_, iok := core.As[core.Refunder](inner)
		r, ok := core.As[core.Refunder](outer)
		if ok != want("refund", iok) {
			t.Errorf("%s: As[Refunder] = %v, inner %v", name, ok, iok)
		}
		if ok {
			if _, err := r.AllowN(context.Background(), "k", 1); err != nil {
				t.Fatalf("%s: AllowN: %v", name, err)
			}
			if err := r.Refund(context.Background(), "k", 1, 0); err != nil {
				t.Errorf("%s: Refund: %v", name, err)
			}
		} else if _, has := outer.(core.Refunder); has {
			// A wrapper that has the method but not the capability says so.
			if err := outer.(core.Refunder).Refund(context.Background(), "k", 1, 0); !errors.Is(err, core.ErrNoRefund) {
				t.Errorf("%s: Refund without the capability: %v, want ErrNoRefund", name, err)
			}
		}

		il, iok := core.As[core.LayeredLimiter](inner)
		l, ok := core.As[core.LayeredLimiter](outer)
		if ok != want("layers", iok) {
			t.Errorf("%s: As[LayeredLimiter] = %v, inner %v", name, ok, iok)
		}
		if ok {
			want, err := il.PeekLayers(context.Background(), "fresh", 1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.PeekLayers(context.Background(), "fresh", 1)
			if err != nil || len(got.Layers) != len(want.Layers) {
				t.Errorf("%s: PeekLayers %d layers, %v; inner %d", name, len(got.Layers), err, len(want.Layers))
			}
		}

		ip, iok := core.As[core.PolicyReporter](inner)
		pr, ok := core.As[core.PolicyReporter](outer)
		if ok != want("policy", iok) {
			t.Errorf("%s: As[PolicyReporter] = %v, inner %v", name, ok, iok)
		}
		if ok && pr.Policy() != ip.Policy() {
			t.Errorf("%s: Policy %v, inner %v", name, pr.Policy(), ip.Policy())
		}
		if !ok {
			if p, has := outer.(core.PolicyReporter); has && p.Policy() != (core.Policy{}) && !iok {
				t.Errorf("%s: Policy %v over an inner limiter with none", name, p.Policy())
			}
		}
	}

	cases := 0
	for _, in := range inners {
		for _, w := range wrappers {
			clock := core.NewManualClock(start)
			inner := in.make(t, clock)
			check(t, fmt.Sprintf("%s(%s)", w.name, in.name), inner, w.wrap(t, clock, inner), w)
			cases++
			for _, w2 := range wrappers {
				clock := core.NewManualClock(start)
				inner := w.wrap(t, clock, in.make(t, clock))
				check(t, fmt.Sprintf("%s(%s(%s))", w2.name, w.name, in.name), inner, w2.wrap(t, clock, inner), w2)
				cases++
			}
		}
	}
	// The stack hotkey's doc recommends: a denial cache over a failover over
	// layers keeps the layers, giving back and nothing else.
	clock := core.NewManualClock(start)
	stack := wrappers[2].wrap(t, clock, wrappers[0].wrap(t, clock, inners[1].make(t, clock)))
	if _, ok := core.As[core.LayeredLimiter](stack); !ok {
		t.Error("denial-cache(failover(layered)) lost its layers")
	}
	if _, ok := core.As[core.Refunder](stack); !ok {
		t.Error("denial-cache(failover(layered)) lost Refund")
	}
	t.Logf("%d wrapper cases", cases)
}

// plain is a user's limiter with no capability beyond Limiter.
type plain struct{ l core.Limiter }

func (p plain) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	return p.l.AllowN(ctx, key, n)
}

func (p plain) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	return p.l.Peek(ctx, key, n)
}

func (p plain) Reset(ctx context.Context, key string) error { return p.l.Reset(ctx, key) }
