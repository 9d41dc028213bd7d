package redisstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// AllowCosts, PeekCosts and RefundCosts on Redis decide as core.Layered's,
// field for field: the same random traffic, a key and a cost per layer, on
// both, on a manual clock, with refunds now and then.
func TestLayeredCostsSameAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	for cfg := range 30 {
		rng := rand.New(rand.NewPCG(uint64(cfg), 4321))
		ps := randomLayers(rng)
		t.Run(fmt.Sprint(cfg), func(t *testing.T) {
			start := time.Unix(1_700_000_040, 0)
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			var mems []*core.Memory
			for _, p := range ps {
				m, err := core.New(p, core.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				mems = append(mems, m)
			}
			mem, err := core.NewLayered(mems...)
			if err != nil {
				t.Fatal(err)
			}
			red := mustLayered(t, client, ps, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			var last struct {
				keys  []string
				costs []int64
				at    time.Time
			}
			for i := range 150 {
				keys, _ := layeredTraffic(rng, ps, false, mc, rc)
				costs := make([]int64, len(ps))
				for j, p := range ps {
					costs[j] = 1 + rng.Int64N(p.Capacity())
					if rng.IntN(30) == 0 {
						costs[j] = p.Capacity() + 1
					}
				}
				if last.keys != nil && rng.IntN(5) == 0 {
					elapsed := mc.Now().Sub(last.at)
					merr := mem.RefundCosts(ctx, last.keys, last.costs, elapsed)
					rerr := red.RefundCosts(ctx, last.keys, last.costs, elapsed)
					if merr != nil || rerr != nil {
						t.Fatalf("op %d: RefundCosts: memory err %v, redis err %v", i, merr, rerr)
					}
					last.keys = nil
				}
				for _, commit := range []bool{false, true} {
					var md, rd core.LayeredDecision
					var merr, rerr error
					if commit {
						md, merr = mem.AllowCosts(ctx, keys, costs, nil)
						rd, rerr = red.AllowCosts(ctx, keys, costs, make([]core.Decision, 0, len(ps)))
					} else {
						md, merr = mem.PeekCosts(ctx, keys, costs, nil)
						rd, rerr = red.PeekCosts(ctx, keys, costs, nil)
					}
					if (merr == nil) != (rerr == nil) || merr != nil && !errors.Is(rerr, core.ErrCostTooHigh) {
						t.Fatalf("op %d (costs %v, keys %q): memory err %v, redis err %v", i, costs, keys, merr, rerr)
					}
					if !limitercheck.SameLayered(md, rd) {
						t.Fatalf("op %d (costs %v, keys %q, commit=%v, policies %v):\nmemory %+v\n redis %+v", i, costs, keys, commit, ps, md, rd)
					}
					if commit && md.Allowed {
						last.keys, last.costs, last.at = keys, costs, mc.Now()
					}
				}
			}
		})
	}
}

// The arguments AllowCosts rejects, as core.Layered rejects them.
func TestLayeredCostsErrors(t *testing.T) {
	client := newClient(t, singleNode(t))
	ps := []core.Policy{
		{Name: "a", Algorithm: core.FixedWindow, Limit: 5, Window: time.Second},
		{Name: "b", Algorithm: core.TokenBucket, Limit: 3, Window: time.Second},
	}
	red := mustLayered(t, client, ps, WithPrefix(uniquePrefix(t.Name())))
	for _, tc := range []struct {
		costs []int64
		want  error
		layer int
	}{
		{[]int64{1}, nil, -1},
		{[]int64{0, 1}, core.ErrInvalidCost, 0},
		{[]int64{1, 4}, core.ErrCostTooHigh, 1},
	} {
		ld, err := red.AllowCosts(ctx, []string{"k"}, tc.costs, nil)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) || ld.Layer != tc.layer {
			t.Errorf("AllowCosts(%v) = layer %d, %v; want layer %d, %v", tc.costs, ld.Layer, err, tc.layer, tc.want)
		}
		if err := red.RefundCosts(ctx, []string{"k"}, tc.costs, 0); err == nil {
			t.Errorf("RefundCosts(%v): no error", tc.costs)
		}
	}
}
