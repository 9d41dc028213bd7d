package redisstore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// The same random traffic on the memory store and on Redis, both on a
// manual clock: every Decision must be equal, field for field. The policies
// cover fractional emission intervals (3/s, 97/1m, whose Scale is capped),
// bursts, and the largest limits and windows, where the Lua arithmetic
// passes 2^53 without the exact paths.
func TestSameDecisionsAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	policies := []core.Policy{
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
	for _, base := range policies {
		for _, a := range core.Algorithms {
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
