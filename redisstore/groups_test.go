package redisstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// AllowCostsBySlot, PeekCostsBySlot and RefundCostsBySlot on a Cluster,
// keys per layer in different slots, decide as core.Layered's AllowCosts,
// PeekCosts and RefundCosts: the same random traffic on both, on a manual
// clock, with refunds now and then; a refused request leaves nothing
// counted.
func TestLayeredCostsBySlotSameAsMemory(t *testing.T) {
	client := newClusterClient(t, cluster(t))
	for cfg := range 12 {
		rng := rand.New(rand.NewPCG(uint64(cfg), 8765))
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
			for i := range 120 {
				layeredTraffic(rng, ps, false, mc, rc)
				keys := make([]string, len(ps))
				costs := make([]int64, len(ps))
				for j, p := range ps {
					keys[j] = fmt.Sprint([]string{"acct-", "ip-"}[rng.IntN(2)], rng.IntN(3))
					costs[j] = 1 + rng.Int64N(p.Capacity())
					if rng.IntN(30) == 0 {
						costs[j] = p.Capacity() + 1
					}
				}
				if last.keys != nil && rng.IntN(5) == 0 {
					elapsed := mc.Now().Sub(last.at)
					merr := mem.RefundCosts(ctx, last.keys, last.costs, elapsed)
					rerr := red.RefundCostsBySlot(ctx, last.keys, last.costs, elapsed)
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
						rd, rerr = red.AllowCostsBySlot(ctx, keys, costs, make([]core.Decision, 0, len(ps)))
					} else {
						md, merr = mem.PeekCosts(ctx, keys, costs, nil)
						rd, rerr = red.PeekCostsBySlot(ctx, keys, costs, nil)
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

// Concurrent requests over keys in different Cluster slots never admit
// more than the tightest layer allows, and leave counted exactly what they
// admitted, in every slot.
func TestLayeredCostsBySlotNeverOverAdmits(t *testing.T) {
	client := newClusterClient(t, cluster(t))
	clock := core.NewManualClock(time.Unix(1_700_000_040, 0))
	ps := []core.Policy{
		{Name: "per-user", Limit: 20, Window: time.Minute},
		{Name: "per-ip", Limit: 30, Window: time.Minute},
		{Name: "per-org", Limit: 25, Window: time.Minute},
	}
	keys := []string{"alice", "203.0.113.7", "org-1"}
	red := mustLayered(t, client, ps, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
	if gs := red.slotGroups(keys); len(gs) != 3 {
		t.Fatalf("keys %q in %d slot groups, want 3", keys, len(gs))
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				d, err := red.AllowCostsBySlot(ctx, keys, []int64{1, 1, 1}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	n := admitted.Load()
	if n > 20 {
		t.Fatalf("%d admitted, limit 20", n)
	}
	if n == 0 {
		t.Fatal("nothing admitted")
	}
	d, err := red.PeekCostsBySlot(ctx, keys, []int64{1, 1, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		if want := p.Limit - n; d.Layers[i].Remaining != want {
			t.Errorf("%s: %d left after %d admitted, want %d", p.Name, d.Layers[i].Remaining, n, want)
		}
	}
}

// On a single node, AllowCostsBySlot is AllowCosts: one script, whatever
// the keys.
func TestLayeredCostsBySlotSingleNode(t *testing.T) {
	client, sent := countedClient(t)
	ps := []core.Policy{{Name: "a", Limit: 2, Window: time.Minute}, {Name: "b", Limit: 3, Window: time.Minute}}
	red := mustLayered(t, client, ps, WithPrefix(uniquePrefix(t.Name())))
	before := sent.Load()
	keys := []string{"alice", "203.0.113.7"}
	for i := range 3 {
		d, err := red.AllowCostsBySlot(ctx, keys, []int64{1, 1}, nil)
		if err != nil || d.Allowed != (i < 2) {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
	if err := red.RefundCostsBySlot(ctx, keys, []int64{1, 1}, 0); err != nil {
		t.Fatal(err)
	}
	if n := sent.Load() - before; n != 4 {
		t.Errorf("%d scripts for 3 decisions and a refund, want 4", n)
	}
}
