package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// parityPolicies are the policies the parity tests run with every
// algorithm.
var parityPolicies = []core.Policy{
	{Limit: 3, Window: time.Second},
	{Limit: 7, Window: time.Second, Burst: 11},
	{Limit: 97, Window: time.Minute},
	{Limit: 1000, Window: 7 * time.Microsecond, Burst: 3},
	{Limit: 5, Window: 15 * time.Minute, Burst: 2},
	{Limit: core.MaxLimit, Window: 30 * 24 * time.Hour},
	{Limit: 999_999_937, Window: core.MaxWindow},
	{Limit: core.MaxLimit, Window: core.MaxWindow, Burst: core.MaxLimit},
	{Limit: 1, Window: core.MaxWindow},
}

// The same random traffic on the memory store and on Redis, both on a
// manual clock: every Decision must be equal, field for field. The policies
// cover fractional emission intervals (3/s, 97/1m, whose Scale is capped),
// bursts, and the largest limits and windows, where the Lua arithmetic
// passes 2^53 without the exact paths.
func TestSameDecisionsAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, base := range parityPolicies {
		for _, a := range core.Algorithms() {
			p := base
			p.Algorithm = a
			if !a.Burstable() {
				p.Burst = 0
			}
			t.Run(p.String(), func(t *testing.T) {
				start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
				mc, rc := core.NewManualClock(start), core.NewManualClock(start)
				mem, err := core.New(p, core.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				red, err := New(client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(p.Limit), uint64(p.Algorithm)))
				W := int64(p.Window / time.Microsecond)
				step := max(W/p.Limit, 1)
				for i := range 400 {
					var dt time.Duration
					switch r := rng.IntN(20); {
					case r == 0:
						// Backwards, up to two windows.
						dt = -time.Duration(rng.Int64N(2*W)+1) * time.Microsecond
					case r == 1:
						dt = time.Duration(rng.Int64N(3*W)) * time.Microsecond
					default:
						dt = time.Duration(rng.Int64N(2*step+2))*time.Microsecond + time.Duration(rng.IntN(1000))
					}
					if mc.Now().Add(dt).After(start.AddDate(100, 0, 0)) {
						// Stay well inside the years Redis can count
						// (before 2255, 2^53 µs).
						dt = 0
					}
					mc.Advance(dt)
					rc.Advance(dt)
					n := 1 + rng.Int64N(p.Capacity())
					if rng.IntN(2) == 0 {
						n = 1 + rng.Int64N(min(p.Capacity(), 3))
					}
					for _, commit := range []bool{false, true} {
						var md, rd core.Decision
						var merr, rerr error
						if commit {
							md, merr = mem.AllowN(ctx, "k", n)
							rd, rerr = red.AllowN(ctx, "k", n)
						} else {
							md, merr = mem.Peek(ctx, "k", n)
							rd, rerr = red.Peek(ctx, "k", n)
						}
						if merr != nil || rerr != nil {
							t.Fatalf("request %d: memory err %v, redis err %v", i, merr, rerr)
						}
						if md != rd {
							t.Fatalf("request %d (n=%d, commit=%v, at %v):\nmemory %+v\n redis %+v", i, n, commit, mc.Now().Sub(start), md, rd)
						}
					}
				}
			})
		}
	}
}

// The sliding window's estimate at the points where float64 would round:
// with prev = 1e9 and W = 30 days, prev·(W-e)/W is a whole number at
// e = 2592 µs and misses one by 1e9/W at its neighbours; the products reach
// 2^71. Every Decision must equal the memory store's.
func TestSlidingWindowExactProducts(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, p := range []core.Policy{
		{Algorithm: core.SlidingWindow, Limit: core.MaxLimit, Window: 30 * 24 * time.Hour},
		{Algorithm: core.SlidingWindow, Limit: 999_999_937, Window: core.MaxWindow},
	} {
		W := int64(p.Window / time.Microsecond)
		// The start of a window, as both stores align them.
		start := time.UnixMicro((time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()/W + 1) * W)
		for _, e := range []int64{1, 2591, 2592, 2593, 5184, 31622, 31623, 31624, W / 2, W - 1} {
			for _, prev := range []int64{p.Limit, p.Limit - 1, 999_999_000} {
				mc, rc := core.NewManualClock(start), core.NewManualClock(start)
				mem, _ := core.New(p, core.WithClock(mc))
				red, err := New(client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
				if err != nil {
					t.Fatal(err)
				}
				steps := []struct {
					at time.Duration
					n  int64
				}{{0, prev}, {time.Duration(W+e) * time.Microsecond, 1}, {0, 2}, {0, 3}, {0, 1}, {0, p.Limit / 2}}
				for i, st := range steps {
					mc.Advance(st.at)
					rc.Advance(st.at)
					md, _ := mem.AllowN(ctx, "x", st.n)
					rd, err := red.AllowN(ctx, "x", st.n)
					if err != nil {
						t.Fatal(err)
					}
					if md != rd {
						t.Fatalf("%v, prev %d, e %dµs, step %d (n=%d):\nmemory %+v\n redis %+v", p, prev, e, i, st.n, md, rd)
					}
				}
			}
		}
	}
}

// refundTraffic drives random traffic with refunds and clock steps,
// backwards included, on one key or a few: each call moves the clocks,
// then asks do for one operation. It remembers what was allowed, so that
// most refunds name a request that was made, with the elapsed time its
// caller would measure (0 when the clock has since stepped back), and some
// name anything: more than was taken, an elapsed time of a window or more,
// or the longest a time.Duration holds.
type refundTraffic struct {
	rng    *rand.Rand
	w      int64     // the longest window, µs
	start  time.Time // the clocks' start
	clocks []*core.ManualClock
	taken  []takenUnits
}

type takenUnits struct {
	at   time.Time
	keys []string
	n    int64
}

// step moves every clock: mostly forward by up to twice step µs, now and
// then backwards (up to two windows, or up to 20 at once, a clock set back
// by hours or years) or forward by as much, staying within 60 years of the
// start so that Redis counts the time exactly.
func (tr *refundTraffic) step(step int64) {
	var dt time.Duration
	switch r := tr.rng.IntN(40); {
	case r == 0:
		dt = -time.Duration(tr.rng.Int64N(2*tr.w)+1) * time.Microsecond
	case r == 1:
		dt = -time.Duration(tr.rng.Int64N(20*tr.w)+1) * time.Microsecond
	case r == 2:
		dt = time.Duration(tr.rng.Int64N(3*tr.w)) * time.Microsecond
	case r == 3:
		dt = time.Duration(tr.rng.Int64N(20*tr.w)) * time.Microsecond
	default:
		dt = time.Duration(tr.rng.Int64N(2*step+2))*time.Microsecond + time.Duration(tr.rng.IntN(1000))
	}
	if now := tr.clocks[0].Now().Add(dt); now.Before(tr.start.AddDate(-60, 0, 0)) || now.After(tr.start.AddDate(60, 0, 0)) {
		dt = -dt
	}
	for _, c := range tr.clocks {
		c.Advance(dt)
	}
}

// allowed records n units allowed for keys now.
func (tr *refundTraffic) allowed(keys []string, n int64) {
	tr.taken = append(tr.taken, takenUnits{tr.clocks[0].Now(), keys, n})
	if len(tr.taken) > 32 {
		tr.taken = tr.taken[1:]
	}
}

// refund returns the keys, cost and elapsed time of a refund: of a request
// made, or of anything, with costs up to maxCost.
func (tr *refundTraffic) refund(keys []string, maxCost int64) ([]string, int64, time.Duration) {
	now := tr.clocks[0].Now()
	if len(tr.taken) > 0 && tr.rng.IntN(4) != 0 {
		// Recent requests more often than old ones.
		i := len(tr.taken) - 1 - tr.rng.IntN(min(len(tr.taken), 1+tr.rng.IntN(8)))
		u := tr.taken[i]
		tr.taken = append(tr.taken[:i], tr.taken[i+1:]...)
		elapsed := max(now.Sub(u.at), 0)
		if tr.rng.IntN(4) == 0 {
			elapsed += time.Duration(tr.rng.Int64N(tr.w+1)) * time.Microsecond / 8
		}
		n := u.n
		if tr.rng.IntN(4) == 0 {
			n = 1 + tr.rng.Int64N(n)
		}
		return u.keys, n, elapsed
	}
	n := 1 + tr.rng.Int64N(maxCost)
	var elapsed time.Duration
	switch tr.rng.IntN(5) {
	case 0:
	case 1:
		elapsed = time.Duration(math.MaxInt64)
	case 2:
		elapsed = time.Duration(tr.rng.Int64N(3*tr.w+1)) * time.Microsecond
	default:
		elapsed = time.Duration(tr.rng.Int64N(tr.w/4+2))*time.Microsecond + time.Duration(tr.rng.IntN(1000))
	}
	return keys, n, elapsed
}

// Refunds and a clock that steps back, on the memory store and on Redis,
// each on its manual clock: after every refund and before and after every
// request, every Decision is equal, field for field.
func TestRefundSameAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	for _, base := range parityPolicies {
		for _, a := range core.Algorithms() {
			p := base
			p.Algorithm = a
			if !a.Burstable() {
				p.Burst = 0
			}
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
					rng:    rand.New(rand.NewPCG(uint64(p.Limit), uint64(p.Algorithm)+7)),
					w:      W,
					start:  start,
					clocks: []*core.ManualClock{mc, rc},
				}
				key := []string{"k"}
				same := func(i int, what string, n int64, commit bool) bool {
					var md, rd core.Decision
					var merr, rerr error
					if commit {
						md, merr = mem.AllowN(ctx, "k", n)
						rd, rerr = red.AllowN(ctx, "k", n)
					} else {
						md, merr = mem.Peek(ctx, "k", n)
						rd, rerr = red.Peek(ctx, "k", n)
					}
					if merr != nil || rerr != nil {
						t.Fatalf("op %d, %s: memory err %v, redis err %v", i, what, merr, rerr)
					}
					if md != rd {
						t.Fatalf("op %d, %s (n=%d, commit=%v, at %v):\nmemory %+v\n redis %+v", i, what, n, commit, mc.Now().Sub(start), md, rd)
					}
					return md.Allowed
				}
				for i := range 500 {
					tr.step(max(W/p.Limit, 1))
					n := 1 + tr.rng.Int64N(min(p.Capacity(), 3))
					if tr.rng.IntN(3) == 0 {
						n = 1 + tr.rng.Int64N(p.Capacity())
					}
					if tr.rng.IntN(3) != 0 {
						same(i, "before", n, false)
						if same(i, "request", n, true) {
							tr.allowed(key, n)
						}
						continue
					}
					_, rn, elapsed := tr.refund(key, p.Capacity())
					merr := mem.Refund(ctx, "k", rn, elapsed)
					rerr := red.Refund(ctx, "k", rn, elapsed)
					if merr != nil || rerr != nil {
						t.Fatalf("op %d: Refund(%d, %v): memory err %v, redis err %v", i, rn, elapsed, merr, rerr)
					}
					what := fmt.Sprintf("after Refund(%d, %v)", rn, elapsed)
					same(i, what, 1, false)
					same(i, what, n, false)
					same(i, what, p.Capacity(), false)
				}
			})
		}
	}
}

// Refunds on a core.Layered of Memory layers and on a Redis Layered of the
// same policies, keys per layer among two IPs and three accounts, with a
// clock that steps back: every LayeredDecision is equal, layer for layer.
// Every key is used once before the clock moves, so that the memory store
// never drops a fresh state to make room for a new key (which it may, and
// which changes decisions once the clock steps back; see
// TestLayeredSameDecisionsAsMemory).
func TestLayeredRefundSameAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	for cfg := range 40 {
		rng := rand.New(rand.NewPCG(uint64(cfg), 1234))
		ps := randomLayers(rng)
		t.Run(fmt.Sprint(cfg), func(t *testing.T) {
			start := time.Unix(1_700_000_040, 0)
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			var mems []*core.Memory
			var w int64
			for _, p := range ps {
				m, err := core.New(p, core.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				mems = append(mems, m)
				w = max(w, int64(p.Window/time.Microsecond))
			}
			mem, err := core.NewLayered(mems...)
			if err != nil {
				t.Fatal(err)
			}
			red := mustLayered(t, client, ps, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			for _, k := range []string{"acct-0", "acct-1", "acct-2", "ip-0", "ip-1"} {
				md, merr := mem.AllowN(ctx, k, 1)
				rd, rerr := red.AllowN(ctx, k, 1)
				if merr != nil || rerr != nil || !md.Allowed || md != rd {
					t.Fatalf("first request of %q:\nmemory %+v, %v\n redis %+v, %v", k, md, merr, rd, rerr)
				}
			}
			tr := &refundTraffic{rng: rng, w: w, start: start, clocks: []*core.ManualClock{mc, rc}}
			maxCost := int64(math.MaxInt64)
			for _, p := range ps {
				maxCost = min(maxCost, p.Capacity())
			}
			same := func(i int, what string, keys []string, n int64, commit bool) bool {
				var md, rd core.LayeredDecision
				var merr, rerr error
				if commit {
					md, merr = mem.AllowKeys(ctx, keys, n)
					rd, rerr = red.AllowKeys(ctx, keys, n)
				} else {
					md, merr = mem.PeekKeys(ctx, keys, n)
					rd, rerr = red.PeekKeys(ctx, keys, n)
				}
				if merr != nil || rerr != nil {
					t.Fatalf("op %d, %s (keys %q, n=%d): memory err %v, redis err %v", i, what, keys, n, merr, rerr)
				}
				if !limitercheck.SameLayered(md, rd) {
					t.Fatalf("op %d, %s (keys %q, n=%d, commit=%v, policies %v):\nmemory %+v\n redis %+v", i, what, keys, n, commit, ps, md, rd)
				}
				return md.Allowed
			}
			for i := range 200 {
				keys, n := layeredTraffic(rng, ps, false)
				n = min(n, maxCost)
				tr.step(w / 8)
				if rng.IntN(3) != 0 {
					same(i, "before", keys, n, false)
					if same(i, "request", keys, n, true) {
						tr.allowed(keys, n)
					}
					continue
				}
				keys, rn, elapsed := tr.refund(keys, maxCost)
				merr := mem.RefundKeys(ctx, keys, rn, elapsed)
				rerr := red.RefundKeys(ctx, keys, rn, elapsed)
				if merr != nil || rerr != nil {
					t.Fatalf("op %d: RefundKeys(%q, %d, %v): memory err %v, redis err %v", i, keys, rn, elapsed, merr, rerr)
				}
				what := fmt.Sprintf("after RefundKeys(%q, %d, %v)", keys, rn, elapsed)
				same(i, what, keys, 1, false)
				same(i, what, keys, maxCost, false)
			}
		})
	}
}

// A bucket whose clock is set back by more than twice its capacity hands
// out no fresh burst: at 10 a minute, burst 10, 20 requests at once (10
// allowed), then the clock 5 minutes back and one request a second for
// 40 s: none allowed, on Redis as in memory, Decision for Decision.
func TestClockStepsBack(t *testing.T) {
	client := newClient(t, singleNode(t))
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		t.Run(a.String(), func(t *testing.T) {
			p := core.Policy{Algorithm: a, Limit: 10, Window: time.Minute, Burst: 10}
			start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			mem, err := core.New(p, core.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			allow := func(what string) bool {
				t.Helper()
				md, merr := mem.Allow(ctx, "k")
				rd, rerr := red.Allow(ctx, "k")
				if merr != nil || rerr != nil {
					t.Fatalf("%s: memory err %v, redis err %v", what, merr, rerr)
				}
				if md != rd {
					t.Fatalf("%s:\nmemory %+v\n redis %+v", what, md, rd)
				}
				return rd.Allowed
			}
			got := 0
			for i := range 20 {
				if allow(fmt.Sprint("request ", i)) {
					got++
				}
			}
			if got != 10 {
				t.Fatalf("%d of 20 allowed at once, want 10", got)
			}
			mc.Advance(-5 * time.Minute)
			rc.Advance(-5 * time.Minute)
			got = 0
			for i := range 40 {
				if allow(fmt.Sprintf("%d s after the clock stepped back", i)) {
					got++
				}
				mc.Advance(time.Second)
				rc.Advance(time.Second)
			}
			if got != 0 {
				t.Fatalf("%d of 40 allowed after the clock stepped back 5 minutes, want 0", got)
			}
		})
	}
}

// The backlog a bucket reads is capped at 2^52 units of 1/q µs: with q = 64
// (a policy whose emission interval is no whole number of microseconds), a
// clock set back 3 years waits 2^52/64 µs plus what a request needs, on
// Redis as in memory; a refund leaves such a backlog alone.
func TestClockStepsBackYears(t *testing.T) {
	client := newClient(t, singleNode(t))
	p := core.Policy{Limit: 999_999_937, Window: core.MaxWindow}
	if q := p.Emission().Scale; q != 64 {
		t.Fatalf("policy %v has scale %d, want 64", p, q)
	}
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mc, rc := core.NewManualClock(start), core.NewManualClock(start)
	mem, err := core.New(p, core.WithClock(mc))
	if err != nil {
		t.Fatal(err)
	}
	red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
	if _, err := mem.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := red.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	// The clock back 3 years: the backlog is more than 2^52/64 µs (2.2
	// years).
	for _, c := range []*core.ManualClock{mc, rc} {
		c.Advance(-3 * 365 * 24 * time.Hour)
	}
	if err := red.Refund(ctx, "k", p.Capacity(), 0); err != nil {
		t.Fatal(err)
	}
	if err := mem.Refund(ctx, "k", p.Capacity(), 0); err != nil {
		t.Fatal(err)
	}
	md, _ := mem.Peek(ctx, "k", 1)
	rd, err := red.Peek(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if md != rd {
		t.Fatalf("3 years back:\nmemory %+v\n redis %+v", md, rd)
	}
	e := p.Emission()
	if want := time.Duration((1<<52+e.Interval-e.Capacity+63)/64) * time.Microsecond; rd.Allowed || rd.RetryAfter != want {
		t.Fatalf("3 years back: %+v, want denied with RetryAfter %v", rd, want)
	}
}
