package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// The settle suite on a single node, for a Limiter and for a Layered of
// one layer, which settles as a Limiter of its policy; the Limiter by FCALL
// and by EVALSHA.
func TestSettleConformance(t *testing.T) {
	t.Parallel()
	client := newClient(t, singleNode(t))
	t.Run("Limiter", func(t *testing.T) {
		limitertest.RunSettle(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
			return mustNew(t, client, p, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
		})
	})
	t.Run("EVALSHA", func(t *testing.T) {
		limitertest.RunSettle(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
			l := mustNew(t, client, p, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
			l.fmode.Store(modeScripts)
			return l
		})
	})
	t.Run("Layered", func(t *testing.T) {
		limitertest.RunSettle(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
			return mustLayered(t, client, []core.Policy{p}, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
		})
	})
}

// settlePolicies are parityPolicies and a named one, and two calendar ones, run with every
// algorithm (the calendar with the fixed window only).
func settlePolicies() []core.Policy {
	var ps []core.Policy
	bases := append(parityPolicies[:len(parityPolicies):len(parityPolicies)], core.Policy{Name: "named", Limit: 7, Window: time.Second, Burst: 11})
	for _, base := range bases {
		for _, a := range core.Algorithms() {
			p := base
			p.Algorithm = a
			if !a.Burstable() {
				p.Burst = 0
			}
			ps = append(ps, p)
		}
	}
	return append(ps,
		core.Policy{Algorithm: core.FixedWindow, Limit: 50, Window: 24 * time.Hour, Calendar: core.CalendarDay},
		core.Policy{Name: "named", Algorithm: core.FixedWindow, Limit: 50, Window: 24 * time.Hour, Calendar: core.CalendarDay})
}

// Random requests, settles (below, above and at the estimate, from a
// request made or from anything), partial grants and a clock that steps
// back, on the memory store and on Redis, each on its manual clock: after
// every settle and for every request and partial grant, every Decision
// (and every grant) is equal.
func TestSettleSameAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, p := range settlePolicies() {
		t.Run(p.String(), func(t *testing.T) {
			start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			mem, err := core.New(p, core.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			W := int64(p.Window / time.Microsecond)
			tr := &refundTraffic{
				rng:    rand.New(rand.NewPCG(uint64(p.Limit), uint64(p.Algorithm)+11)),
				w:      W,
				start:  start,
				clocks: []*core.ManualClock{mc, rc},
			}
			key := []string{"k"}
			C := p.Capacity()
			peek := func(i int, what string, n int64) {
				t.Helper()
				md, merr := mem.Peek(ctx, "k", n)
				rd, rerr := red.Peek(ctx, "k", n)
				if merr != nil || rerr != nil {
					t.Fatalf("op %d, %s: memory err %v, redis err %v", i, what, merr, rerr)
				}
				if md != rd {
					t.Fatalf("op %d, %s (Peek %d, at %v):\nmemory %+v\n redis %+v", i, what, n, mc.Now().Sub(start), md, rd)
				}
			}
			for i := range 500 {
				tr.step(max(W/p.Limit, 1))
				n := 1 + tr.rng.Int64N(min(C, 3))
				if tr.rng.IntN(3) == 0 {
					n = 1 + tr.rng.Int64N(C)
				}
				switch tr.rng.IntN(4) {
				case 0, 1:
					md, merr := mem.AllowN(ctx, "k", n)
					rd, rerr := red.AllowN(ctx, "k", n)
					if merr != nil || rerr != nil {
						t.Fatalf("op %d: AllowN(%d): memory err %v, redis err %v", i, n, merr, rerr)
					}
					if md != rd {
						t.Fatalf("op %d, AllowN(%d) at %v:\nmemory %+v\n redis %+v", i, n, mc.Now().Sub(start), md, rd)
					}
					if md.Allowed {
						tr.allowed(key, n)
					}
				case 2:
					if tr.rng.IntN(2) == 0 {
						n = 1 + tr.rng.Int64N(2*C)
					}
					md, mg, merr := mem.AllowAtMost(ctx, "k", n)
					rd, rg, rerr := red.AllowAtMost(ctx, "k", n)
					if merr != nil || rerr != nil {
						t.Fatalf("op %d: AllowAtMost(%d): memory err %v, redis err %v", i, n, merr, rerr)
					}
					if md != rd || mg != rg {
						t.Fatalf("op %d, AllowAtMost(%d) at %v:\nmemory %d %+v\n redis %d %+v", i, n, mc.Now().Sub(start), mg, md, rg, rd)
					}
					if mg > 0 {
						tr.allowed(key, mg)
					}
				default:
					_, est, elapsed := tr.refund(key, C)
					var actual int64
					switch tr.rng.IntN(4) {
					case 0:
						actual = tr.rng.Int64N(est + 1)
					case 1:
						actual = est + 1 + tr.rng.Int64N(3)
					case 2:
						actual = est + 1 + tr.rng.Int64N(3*C)
					default:
						actual = est
					}
					merr := mem.Settle(ctx, "k", est, actual, elapsed)
					rerr := red.Settle(ctx, "k", est, actual, elapsed)
					if merr != nil || rerr != nil {
						t.Fatalf("op %d: Settle(%d, %d, %v): memory err %v, redis err %v", i, est, actual, elapsed, merr, rerr)
					}
					what := fmt.Sprintf("after Settle(%d, %d, %v)", est, actual, elapsed)
					peek(i, what, 1)
					peek(i, what, n)
					peek(i, what, C)
				}
			}
		})
	}
}

// A key charged into debt keeps its state until the debt is repaid: its
// expiry covers what it owes (the bucket's refill of 2·C, a window's end).
func TestSettleDebtExpiry(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, a := range core.Algorithms() {
		p := core.Policy{Algorithm: a, Limit: 10, Window: 10 * time.Second}
		t.Run(a.String(), func(t *testing.T) {
			clock := core.NewManualClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
			l := mustNew(t, client, p, WithClock(clock), WithPrefix(uniquePrefix(t.Name())), WithExpiryMargin(0))
			if _, err := l.AllowN(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
			if err := l.Settle(ctx, "k", 1, 25, 0); err != nil {
				t.Fatal(err)
			}
			ttl, err := client.PTTL(ctx, l.key("k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			// The debt of 10 past the limit: 20 units to free in a bucket
			// (20 s); a sliding window's counter weighs until the end of
			// the next window (20 s); the end of the window, or of the
			// charge's record, otherwise (10 s).
			want := 10 * time.Second
			if a != core.FixedWindow && a != core.SlidingLog {
				want = 20 * time.Second
			}
			// (PTTL counts down in real time since the settle: a loaded
			// machine may take a while to ask.)
			if ttl > want || ttl < want-time.Second {
				t.Fatalf("PTTL %v, want %v (or a little less)", ttl, want)
			}
			d, err := l.Peek(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				t.Fatalf("in debt: %+v, want a denial", d)
			}
		})
	}
}

// Partial and whole requests racing on one key of a standing clock, on a
// Limiter of each algorithm and on a Layered: exactly the limit is granted
// in all, and never more than asked.
func TestAllowAtMostConcurrent(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	algs := core.Algorithms()
	for i := range len(algs) + 1 {
		layered := i == len(algs)
		a, name := core.SlidingLog, "layered"
		if !layered {
			a, name = algs[i], algs[i].String()
		}
		p := core.Policy{Algorithm: a, Limit: 500, Window: time.Hour}
		t.Run(name, func(t *testing.T) {
			clock := core.NewManualClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
			var l core.PartialLimiter
			if layered {
				// 500 an hour beside 800 a day: the hour's room binds.
				l = mustLayered(t, client, []core.Policy{p, {Algorithm: core.FixedWindow, Limit: 800, Window: 24 * time.Hour}},
					WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
			} else {
				l = mustNew(t, client, p, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
			}
			var mu sync.Mutex
			var granted int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					<-start
					for range 60 {
						n := 1 + rng.Int64N(20)
						var got int64
						if g%2 == 0 {
							_, k, err := l.AllowAtMost(ctx, "k", n)
							if err != nil {
								t.Error(err)
								return
							}
							if k > n {
								t.Errorf("granted %d of %d", k, n)
							}
							got = k
						} else {
							d, err := l.AllowN(ctx, "k", n)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								got = n
							}
						}
						mu.Lock()
						granted += got
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			if granted != p.Limit {
				t.Fatalf("granted %d in all, want %d", granted, p.Limit)
			}
			t.Logf("%s: granted %d of a limit of %d", name, granted, p.Limit)
		})
	}
}

// Settles and partial grants on a core.Layered of Memory layers and on a
// Redis Layered of the same policies, with a clock that steps back: every
// LayeredDecision, every partial grant's Decision and count, is equal.
func TestLayeredSettleSameAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for cfg := range 40 {
		rng := rand.New(rand.NewPCG(uint64(cfg), 4321))
		ps := randomLayers(rng)
		t.Run(fmt.Sprint(cfg), func(t *testing.T) {
			start := time.Unix(1_700_000_040, 0)
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			var mems []*core.Memory
			var w int64
			maxCost := int64(math.MaxInt64)
			for _, p := range ps {
				m, err := core.New(p, core.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				mems = append(mems, m)
				w = max(w, int64(p.Window/time.Microsecond))
				maxCost = min(maxCost, p.Capacity())
			}
			mem, err := core.NewLayered(mems...)
			if err != nil {
				t.Fatal(err)
			}
			red := mustLayered(t, client, ps, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			tr := &refundTraffic{rng: rng, w: w, start: start, clocks: []*core.ManualClock{mc, rc}}
			key := []string{"k"}
			var granted int64
			defer func() {
				if granted == 0 && !t.Failed() {
					t.Error("no partial grant granted anything")
				}
			}()
			peek := func(i int, what string, n int64) {
				t.Helper()
				md, merr := mem.PeekKeys(ctx, key, n)
				rd, rerr := red.PeekKeys(ctx, key, n)
				if merr != nil || rerr != nil {
					t.Fatalf("op %d, %s (n=%d): memory err %v, redis err %v", i, what, n, merr, rerr)
				}
				if !limitercheck.SameLayered(md, rd) {
					t.Fatalf("op %d, %s (Peek %d, policies %v):\nmemory %+v\n redis %+v", i, what, n, ps, md, rd)
				}
			}
			for i := range 200 {
				tr.step(w / 8)
				n := 1 + rng.Int64N(min(maxCost, 3))
				if rng.IntN(3) == 0 {
					n = 1 + rng.Int64N(maxCost)
				}
				switch rng.IntN(4) {
				case 0:
					md, merr := mem.AllowKeys(ctx, key, n)
					rd, rerr := red.AllowKeys(ctx, key, n)
					if merr != nil || rerr != nil {
						t.Fatalf("op %d: AllowN(%d): memory err %v, redis err %v", i, n, merr, rerr)
					}
					if !limitercheck.SameLayered(md, rd) {
						t.Fatalf("op %d, AllowN(%d), policies %v:\nmemory %+v\n redis %+v", i, n, ps, md, rd)
					}
					if md.Allowed {
						tr.allowed(key, n)
					}
				case 1:
					n = 1 + rng.Int64N(2*maxCost)
					md, mg, merr := mem.AllowAtMost(ctx, "k", n)
					rd, rg, rerr := red.AllowAtMost(ctx, "k", n)
					if merr != nil || rerr != nil {
						t.Fatalf("op %d: AllowAtMost(%d): memory err %v, redis err %v", i, n, merr, rerr)
					}
					if md != rd || mg != rg {
						t.Fatalf("op %d, AllowAtMost(%d), policies %v:\nmemory %d %+v\n redis %d %+v", i, n, ps, mg, md, rg, rd)
					}
					if mg > 0 {
						tr.allowed(key, mg)
						granted += mg
					}
				default:
					_, est, elapsed := tr.refund(key, maxCost)
					actual := est + 1 + rng.Int64N(2*maxCost)
					if rng.IntN(2) == 0 {
						actual = rng.Int64N(est + 1)
					}
					merr := mem.SettleKeys(ctx, key, est, actual, elapsed)
					rerr := red.SettleKeys(ctx, key, est, actual, elapsed)
					if merr != nil || rerr != nil {
						t.Fatalf("op %d: Settle(%d, %d, %v): memory err %v, redis err %v", i, est, actual, elapsed, merr, rerr)
					}
					what := fmt.Sprintf("after Settle(%d, %d, %v)", est, actual, elapsed)
					peek(i, what, 1)
					peek(i, what, maxCost)
				}
			}
		})
	}
}

// Requests of estimates 1 to 4 settled concurrently at 0 to estimate + 2,
// 8 clients on one key of a standing clock, room for all of them: the key
// holds exactly the sum of the actual costs (Capacity - Remaining), every
// charge and refund counted once.
func TestSettleConcurrent(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, a := range core.Algorithms() {
		p := core.Policy{Algorithm: a, Limit: 20_000, Window: time.Hour}
		t.Run(a.String(), func(t *testing.T) {
			clock := core.NewManualClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
			l := mustNew(t, client, p, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
			var mu sync.Mutex
			var sum, charged, back int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 9))
					<-start
					for range 150 {
						est := 1 + rng.Int64N(4)
						d, err := l.AllowN(ctx, "hot", est)
						if err != nil || !d.Allowed {
							t.Errorf("AllowN(%d): %+v, %v", est, d, err)
							return
						}
						actual := rng.Int64N(est + 3)
						if err := l.Settle(ctx, "hot", est, actual, 0); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						sum += actual
						if actual > est {
							charged += actual - est
						} else {
							back += est - actual
						}
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			d, err := l.Peek(ctx, "hot", 1)
			if err != nil {
				t.Fatal(err)
			}
			held := p.Capacity() - d.Remaining
			t.Logf("%v: %d units charged after, %d given back; the key holds %d, the sum of actual costs %d", a, charged, back, held, sum)
			if held != sum {
				t.Fatalf("the key holds %d, want the sum of actual costs %d", held, sum)
			}
		})
	}
}

// Settles and partial grants on Cluster, on the server's TIME, for a
// Limiter and a Layered (whose layers share the key's slot), keys with
// braces and escapes included: an overspend of 3 past a limit of 5 leaves
// the key denied, and a partial grant of 10 on a fresh key grants 5.
func TestSettleCluster(t *testing.T) {
	client := newClusterClient(t, cluster(t))
	users := []string{"alice", "{bob}", "c}a{rol", "dave%7B"}
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 5, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		prefix := uniquePrefix(t.Name())
		l := mustNew(t, client, p, WithPrefix(prefix))
		ll := mustLayered(t, client, []core.Policy{p, {Name: "day", Algorithm: core.SlidingLog, Limit: 50, Window: 24 * time.Hour}},
			WithPrefix(prefix+"-layered"))
		type settlePartial interface {
			core.Settler
			core.PartialLimiter
		}
		for _, s := range []settlePartial{l, ll} {
			for _, u := range users {
				if d, err := s.AllowN(ctx, u, 2); err != nil || !d.Allowed {
					t.Fatalf("%T %q: %+v, %v", s, u, d, err)
				}
				if err := s.Settle(ctx, u, 2, 8, 0); err != nil {
					t.Fatalf("%T %q: %v", s, u, err)
				}
				if d, err := s.Peek(ctx, u, 1); err != nil || d.Allowed || d.RetryAfter <= 0 {
					t.Errorf("%T %q: Peek after an overspend: %+v, %v; want a denial", s, u, d, err)
				}
				d, g, err := s.AllowAtMost(ctx, "fresh-"+u, 10)
				if err != nil || g != 5 || !d.Allowed || d.Remaining != 0 {
					t.Errorf("%T %q: AllowAtMost(10): %d, %+v, %v; want 5 granted", s, u, g, d, err)
				}
			}
		}
	})
}
