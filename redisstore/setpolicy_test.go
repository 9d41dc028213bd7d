package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// changePolicies are the numbers the policy-change tests move between:
// whole and fractional emission intervals (3/s; 97/1m, whose Scale is
// capped), bursts, and windows that grow and shrink.
var changePolicies = []core.Policy{
	{Limit: 10, Window: time.Second},
	{Limit: 3, Window: time.Second},
	{Limit: 25, Window: 2 * time.Second, Burst: 30},
	{Limit: 7, Window: 700 * time.Millisecond, Burst: 2},
	{Limit: 97, Window: time.Minute},
	{Limit: 100, Window: time.Second},
	{Limit: 5, Window: 5 * time.Second},
}

// changePolicy returns changePolicies[i] named "p" with algorithm a.
func changePolicy(i int, a core.Algorithm) core.Policy {
	p := changePolicies[i]
	p.Name, p.Algorithm = "p", a
	if !a.Burstable() {
		p.Burst = 0
	}
	return p
}

// The same random traffic on the memory store and on Redis, both on a
// manual clock, through random changes of policy on both: every Decision
// must be equal, field for field. Every key is decided on between two
// changes (Redis converts a key at its first call after a change).
func TestSetPolicySameDecisionsAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	keys := []string{"a", "b", "c"}
	for _, a := range core.Algorithms() {
		for seed := range 3 {
			t.Run(fmt.Sprintf("%v/%d", a, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(a)))
				p := changePolicy(rng.IntN(len(changePolicies)), a)
				start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
				mc, rc := core.NewManualClock(start), core.NewManualClock(start)
				mem, err := core.New(p, core.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
				changes := 0
				for i := range 300 {
					if i > 0 && rng.IntN(8) == 0 {
						p = changePolicy(rng.IntN(len(changePolicies)), a)
						if err := mem.SetPolicy(p); err != nil {
							t.Fatal(err)
						}
						if err := red.SetPolicy(p); err != nil {
							t.Fatal(err)
						}
						changes++
					}
					W := int64(p.Window / time.Microsecond)
					step := max(W/p.Limit, 1)
					var dt time.Duration
					if rng.IntN(15) == 0 {
						dt = time.Duration(rng.Int64N(2*W)) * time.Microsecond
					} else {
						dt = time.Duration(rng.Int64N(step+2))*time.Microsecond + time.Duration(rng.IntN(1000))
					}
					mc.Advance(dt)
					rc.Advance(dt)
					for _, k := range keys {
						n := 1 + rng.Int64N(min(p.Capacity(), 3))
						if rng.IntN(8) == 0 {
							n = 1 + rng.Int64N(p.Capacity())
						}
						for _, commit := range []bool{false, true} {
							var md, rd core.Decision
							var merr, rerr error
							if commit {
								md, merr = mem.AllowN(ctx, k, n)
								rd, rerr = red.AllowN(ctx, k, n)
							} else {
								md, merr = mem.Peek(ctx, k, n)
								rd, rerr = red.Peek(ctx, k, n)
							}
							if merr != nil || rerr != nil {
								t.Fatalf("request %d: memory err %v, redis err %v", i, merr, rerr)
							}
							if md != rd {
								t.Fatalf("request %d (%q, n=%d, commit=%v, at %v, %d changes):\nmemory %+v\n redis %+v", i, k, n, commit, mc.Now().Sub(start), changes, md, rd)
							}
						}
					}
				}
				if changes < 10 {
					t.Fatalf("%d changes of policy, want at least 10", changes)
				}
			})
		}
	}
}

// A Layered's SetPolicies: the same decisions as a core.Layered over Memory
// layers changed by SetPolicy, on one key and on a key per layer.
func TestLayeredSetPoliciesSameAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for seed := range 6 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 99))
			algs := core.Algorithms()
			pick := func() []core.Policy {
				ps := make([]core.Policy, 2)
				for i := range ps {
					ps[i] = changePolicy(rng.IntN(len(changePolicies)), algs[(seed+i)%len(algs)])
					ps[i].Name = fmt.Sprint("layer", i)
				}
				return ps
			}
			ps := pick()
			start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
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
			for i := range 200 {
				if i > 0 && rng.IntN(10) == 0 {
					ps = pick()
					for j, m := range mems {
						if err := m.SetPolicy(ps[j]); err != nil {
							t.Fatal(err)
						}
					}
					if err := red.SetPolicies(ps); err != nil {
						t.Fatal(err)
					}
				}
				dt := time.Duration(rng.Int64N(300_000)) * time.Microsecond
				mc.Advance(dt)
				rc.Advance(dt)
				n := 1 + rng.Int64N(min(ps[0].Capacity(), ps[1].Capacity(), 2))
				md, merr := mem.AllowLayers(ctx, "k", n)
				rd, rerr := red.AllowLayers(ctx, "k", n)
				if merr != nil || rerr != nil {
					t.Fatalf("request %d: memory err %v, redis err %v", i, merr, rerr)
				}
				if fmt.Sprint(md) != fmt.Sprint(rd) {
					t.Fatalf("request %d (n=%d, at %v):\nmemory %+v\n redis %+v", i, n, mc.Now().Sub(start), md, rd)
				}
			}
		})
	}
}

// 100 changes of policy while 8 goroutines spend on one key, on a clock
// that stands still: no error, and never more allowed than the largest
// capacity (usage carries over, rounding towards less room), whatever
// policy each decision was made by. After the changes, the key has exactly
// what is left of the last policy's capacity (the windows and the log
// carry their units exactly; the buckets round up, so at most that).
func TestSetPolicyUnderTraffic(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, a := range core.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			rc := core.NewManualClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
			ps := []core.Policy{
				{Name: "p", Algorithm: a, Limit: 40, Window: time.Minute},
				{Name: "p", Algorithm: a, Limit: 120, Window: time.Minute},
				{Name: "p", Algorithm: a, Limit: 60, Window: 2 * time.Minute},
				{Name: "p", Algorithm: a, Limit: 90, Window: 30 * time.Second},
			}
			var most int64
			for _, p := range ps {
				most = max(most, p.Capacity())
			}
			red := mustNew(t, client, ps[0], WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			var allowed atomic.Int64
			var stop atomic.Bool
			errs := make(chan error, 9)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for !stop.Load() {
						d, err := red.AllowN(ctx, "k", 1)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							allowed.Add(1)
						}
					}
				}()
			}
			close(start)
			for i := range 100 {
				if err := red.SetPolicy(ps[(i+1)%len(ps)]); err != nil {
					errs <- err
					break
				}
			}
			stop.Store(true)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			last := red.Policy()
			if last != ps[100%len(ps)] {
				t.Fatalf("policy in force %v, want %v", last, ps[100%len(ps)])
			}
			got := allowed.Load()
			if got > most {
				t.Fatalf("%d allowed, at most %d", got, most)
			}
			// Once every goroutine has stopped, the last policy alone:
			// what it leaves is what it allows.
			d, err := red.Peek(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			want := max(last.Capacity()-got, 0)
			exact := a == core.FixedWindow || a == core.SlidingLog || a == core.SlidingWindow
			if d.Remaining > want || exact && d.Remaining != want {
				t.Fatalf("%d allowed; remaining %d under %v, want %d", got, d.Remaining, last, want)
			}
			for range d.Remaining {
				if d, err := red.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("remaining unit denied: %+v, %v", d, err)
				}
			}
			if d, err := red.AllowN(ctx, "k", 1); err != nil || d.Allowed {
				t.Fatalf("a unit beyond the remaining: %+v, %v", d, err)
			}
		})
	}
}

// A process "restart": a new Limiter with a changed limit on the same
// Redis and prefix keeps every key's usage, as Memory.SetPolicy would: a
// key that used 80 of 100 and is given 200 has 120 left; given 50, it is
// denied until its usage has aged out, with the memory store's RetryAfter.
func TestRestartKeepsUsage(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, a := range core.Algorithms() {
		for _, limit := range []int64{200, 50} {
			t.Run(fmt.Sprintf("%v/%d", a, limit), func(t *testing.T) {
				before := core.Policy{Name: "api", Algorithm: a, Limit: 100, Window: time.Minute}
				after := before
				after.Limit = limit
				start := time.Date(2026, 3, 1, 0, 0, 10, 0, time.UTC)
				mc, rc := core.NewManualClock(start), core.NewManualClock(start)
				prefix := uniquePrefix(t.Name())
				mem, err := core.New(before, core.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				old := mustNew(t, client, before, WithClock(rc), WithPrefix(prefix))
				md, _ := mem.AllowN(ctx, "k", 80)
				if rd, err := old.AllowN(ctx, "k", 80); err != nil || rd != md || !rd.Allowed {
					t.Fatalf("80 of 100: memory %+v\n redis %+v, %v", md, rd, err)
				}
				mc.Advance(time.Second)
				rc.Advance(time.Second)
				if err := mem.SetPolicy(after); err != nil {
					t.Fatal(err)
				}
				restarted := mustNew(t, client, after, WithClock(rc), WithPrefix(prefix))
				mc.Advance(time.Millisecond)
				rc.Advance(time.Millisecond)
				md, _ = mem.Peek(ctx, "k", 1)
				rd, err := restarted.Peek(ctx, "k", 1)
				if err != nil || rd != md {
					t.Fatalf("after the restart:\nmemory %+v\n redis %+v, %v", md, rd, err)
				}
				if limit == 200 && a != core.TokenBucket && a != core.LeakyBucket && rd.Remaining != 120 {
					t.Fatalf("remaining %d of 200 after 80 of 100, want 120", rd.Remaining)
				}
				if limit == 50 && rd.Allowed {
					t.Fatalf("80 used, lowered to 50: allowed %+v", rd)
				}
				for i := range 150 {
					n := int64(1 + i%3)
					md, _ := mem.AllowN(ctx, "k", n)
					rd, err := restarted.AllowN(ctx, "k", n)
					if err != nil || rd != md {
						t.Fatalf("request %d after the restart:\nmemory %+v\n redis %+v, %v", i, md, rd, err)
					}
					mc.Advance(time.Second / 3)
					rc.Advance(time.Second / 3)
				}
			})
		}
	}
}

// The buckets: 80 of 100/1m used at once, restarted at 200/1m at the same
// instant, leave exactly 120.
func TestRestartBucketExact(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		rc := core.NewManualClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
		prefix := uniquePrefix(t.Name() + a.String())
		p := core.Policy{Name: "api", Algorithm: a, Limit: 100, Window: time.Minute}
		if d, err := mustNew(t, client, p, WithClock(rc), WithPrefix(prefix)).AllowN(ctx, "k", 80); err != nil || !d.Allowed {
			t.Fatalf("%v: 80 of 100: %+v, %v", a, d, err)
		}
		p.Limit = 200
		d, err := mustNew(t, client, p, WithClock(rc), WithPrefix(prefix)).Peek(ctx, "k", 1)
		if err != nil || d.Remaining != 120 {
			t.Fatalf("%v: after 80 of 100, given 200: %+v, %v; want 120 left", a, d, err)
		}
	}
}

func TestSetPolicyErrors(t *testing.T) {
	nowhere := newClient(t, "127.0.0.1:1")
	named := core.Policy{Name: "api", Limit: 10, Window: time.Minute}
	l := mustNew(t, nowhere, named, WithTimeout(time.Millisecond))
	for _, tt := range []struct {
		p    core.Policy
		want string
	}{
		{core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute}, "algorithm"},
		{core.Policy{Name: "web", Limit: 10, Window: time.Minute}, "named"},
		{core.Policy{Limit: 10, Window: time.Minute}, "named"},
		{core.Policy{Name: "api", Limit: 0, Window: time.Minute}, "Limit"},
	} {
		err := l.SetPolicy(tt.p)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "redisstore: SetPolicy: ") {
			t.Errorf("SetPolicy(%v) = %v, want an error about %s", tt.p, err, tt.want)
		}
		if l.Policy() != named {
			t.Errorf("after SetPolicy(%v) failed: policy %v", tt.p, l.Policy())
		}
	}
	unnamed := core.Policy{Limit: 10, Window: time.Minute}
	u := mustNew(t, nowhere, unnamed, WithTimeout(time.Millisecond))
	if err := u.SetPolicy(unnamed); err != nil {
		t.Errorf("SetPolicy to the unnamed policy in force: %v", err)
	}
	other := unnamed
	other.Limit = 20
	if err := u.SetPolicy(other); err == nil || !strings.Contains(err.Error(), "no Name") {
		t.Errorf("SetPolicy of an unnamed policy to other numbers: %v, want an error", err)
	}
	ll := mustLayered(t, nowhere, []core.Policy{named, {Name: "day", Limit: 100, Window: 24 * time.Hour}}, WithTimeout(time.Millisecond))
	if err := ll.SetPolicies([]core.Policy{named}); err == nil {
		t.Error("SetPolicies with one policy for two layers: no error")
	}
	if err := ll.SetPolicies([]core.Policy{named, {Name: "week", Limit: 100, Window: 24 * time.Hour}}); err == nil || !strings.Contains(err.Error(), "layer 1") {
		t.Errorf("SetPolicies renaming layer 1: %v, want an error naming it", err)
	}
	var pe *core.PolicyError
	if err := l.SetPolicy(core.Policy{Name: "api", Window: time.Minute}); !errors.As(err, &pe) {
		t.Logf("SetPolicy of an invalid policy: %v (not a *core.PolicyError)", err)
	}
}

// Named policies without changes: the same decisions as the memory store,
// as for unnamed ones (their states are stored in another format).
func TestNamedSameDecisionsAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, base := range parityPolicies[:5] {
		for _, a := range core.Algorithms() {
			p := base
			p.Name, p.Algorithm = "named", a
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
				rng := rand.New(rand.NewPCG(uint64(p.Limit), uint64(p.Algorithm)))
				W := int64(p.Window / time.Microsecond)
				step := max(W/p.Limit, 1)
				for i := range 200 {
					var dt time.Duration
					switch r := rng.IntN(20); {
					case r == 0:
						dt = -time.Duration(rng.Int64N(2*W)+1) * time.Microsecond
					case r == 1:
						dt = time.Duration(rng.Int64N(3*W)) * time.Microsecond
					default:
						dt = time.Duration(rng.Int64N(2*step+2))*time.Microsecond + time.Duration(rng.IntN(1000))
					}
					mc.Advance(dt)
					rc.Advance(dt)
					n := 1 + rng.Int64N(min(p.Capacity(), 3))
					md, merr := mem.AllowN(ctx, "k", n)
					rd, rerr := red.AllowN(ctx, "k", n)
					if merr != nil || rerr != nil || md != rd {
						t.Fatalf("request %d (n=%d, at %v):\nmemory %+v, %v\n redis %+v, %v", i, n, mc.Now().Sub(start), md, merr, rd, rerr)
					}
				}
			})
		}
	}
}

// On the server's TIME: a restart with a higher limit keeps the log's
// units (an hour's window: nothing leaves during the test).
func TestRestartServerTime(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	prefix := uniquePrefix(t.Name())
	p := core.Policy{Name: "api", Algorithm: core.SlidingLog, Limit: 100, Window: time.Hour}
	if d, err := mustNew(t, client, p, WithPrefix(prefix)).AllowN(ctx, "k", 80); err != nil || !d.Allowed {
		t.Fatalf("80 of 100: %+v, %v", d, err)
	}
	p.Limit = 200
	l := mustNew(t, client, p, WithPrefix(prefix))
	if d, err := l.Peek(ctx, "k", 1); err != nil || d.Remaining != 120 {
		t.Fatalf("after 80 of 100, given 200: %+v, %v; want 120 left", d, err)
	}
	p.Limit = 50
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || d.Allowed || d.Remaining != 0 {
		t.Fatalf("after 80, lowered to 50: %+v, %v; want denied", d, err)
	}
}

// Two servers on one key during a deploy, one built long ago with the old
// numbers and one with the new: each converts the other's writes as of
// the write, never as of its own (much earlier) policy change, so the key
// is never locked out, and once both have been idle for a while it is
// full again for each.
func TestMixedFleet(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, a := range core.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			rc := core.NewManualClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
			prefix := uniquePrefix(t.Name())
			oldP := core.Policy{Name: "api", Algorithm: a, Limit: 100, Window: time.Minute}
			newP := core.Policy{Name: "api", Algorithm: a, Limit: 30, Window: 2 * time.Minute}
			old := mustNew(t, client, oldP, WithClock(rc), WithPrefix(prefix))
			rc.Advance(24 * time.Hour)
			cur := mustNew(t, client, newP, WithClock(rc), WithPrefix(prefix))
			allowed := 0
			for i := range 200 {
				l := old
				if i%2 == 1 {
					l = cur
				}
				d, err := l.AllowN(ctx, "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					allowed++
				}
				if d.RetryAfter > 2*time.Minute {
					t.Fatalf("request %d: RetryAfter %v, beyond either window", i, d.RetryAfter)
				}
				rc.Advance(time.Second)
			}
			if allowed == 0 {
				t.Fatal("nothing allowed")
			}
			rc.Advance(10 * time.Minute)
			for _, l := range []*Limiter{old, cur} {
				d, err := l.Peek(ctx, "k", 1)
				if err != nil || d.Remaining != l.Policy().Capacity() {
					t.Fatalf("%v after 10 idle minutes: %+v, %v; want full", l.Policy(), d, err)
				}
			}
		})
	}
}

// Changes between the parity policies, the largest limits and windows
// included, where the buckets' conversion ceil(d·T'/T) forms products far
// beyond 2^53: the same decisions as the memory store.
func TestSetPolicyLargeNumbers(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, a := range core.Algorithms() {
		for i, from := range parityPolicies {
			to := parityPolicies[(i*5+3)%len(parityPolicies)]
			from.Name, from.Algorithm, to.Name, to.Algorithm = "big", a, "big", a
			if !a.Burstable() {
				from.Burst, to.Burst = 0, 0
			}
			start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			mem, err := core.New(from, core.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			red := mustNew(t, client, from, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			step := func(what string, n int64) {
				t.Helper()
				md, merr := mem.AllowN(ctx, "k", n)
				rd, rerr := red.AllowN(ctx, "k", n)
				if merr != nil || rerr != nil || md != rd {
					t.Fatalf("%v to %v, %s (n=%d):\nmemory %+v, %v\n redis %+v, %v", from, to, what, n, md, merr, rd, rerr)
				}
			}
			step("first", max(from.Capacity()/2, 1))
			step("second", max(from.Capacity()/3, 1))
			w := from.Window / 7
			mc.Advance(w)
			rc.Advance(w)
			if err := mem.SetPolicy(to); err != nil {
				t.Fatal(err)
			}
			if err := red.SetPolicy(to); err != nil {
				t.Fatal(err)
			}
			for j := range 4 {
				step(fmt.Sprint("after ", j), max(to.Capacity()/(int64(j)+2), 1))
				mc.Advance(to.Window / 5)
				rc.Advance(to.Window / 5)
			}
		}
	}
}

// calendarChanges are the named fixed windows the calendar change tests
// move between: epoch windows, calendar days in two zones, a week, a
// month, and a change of the limit alone.
var calendarChanges = []string{
	"5/1d algorithm=fixed-window name=q",
	"3/6h algorithm=fixed-window name=q",
	"3/1d tz=Europe/Berlin name=q",
	"2/1d tz=Europe/Berlin name=q",
	"4/1d tz=America/New_York name=q",
	"6/1w tz=Europe/Berlin name=q",
	"7/1mo name=q",
	"7/1mo tz=UTC name=q",
}

// The same random traffic and refunds on the memory store and on Redis,
// through random changes between epoch and calendar windows, periods,
// zones and limits: every Decision must be equal, field for field. (The
// clock only goes forwards: Redis converts a state no earlier than its
// window's start, its last write as far as it knows, which a clock set
// back before the change would move, as for every fixed window.)
func TestSetPolicyCalendarSameAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	keys := []string{"a", "b"}
	for seed := range 8 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 77))
			pick := func() core.Policy {
				p, err := core.ParsePolicy(calendarChanges[rng.IntN(len(calendarChanges))])
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			p := pick()
			start := time.Date(2026, 3, 27, 20, 0, 0, 0, time.UTC) // Berlin's DST change on the 29th
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			mem, err := core.New(p, core.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			changes := 0
			for i := range 300 {
				if i > 0 && rng.IntN(6) == 0 {
					p = pick()
					if err := mem.SetPolicy(p); err != nil {
						t.Fatal(err)
					}
					if err := red.SetPolicy(p); err != nil {
						t.Fatal(err)
					}
					changes++
				}
				var dt time.Duration
				switch r := rng.IntN(30); {
				case r < 3:
					dt = time.Duration(rng.Int64N(int64(72 * time.Hour)))
				default:
					dt = time.Duration(rng.Int64N(int64(2*time.Hour))) + time.Duration(rng.IntN(1000))
				}
				mc.Advance(dt)
				rc.Advance(dt)
				for _, k := range keys {
					n := 1 + rng.Int64N(min(p.Limit, 2))
					for _, op := range []int{0, 1, 2} {
						var md, rd core.Decision
						var merr, rerr error
						switch op {
						case 0:
							md, merr = mem.Peek(ctx, k, n)
							rd, rerr = red.Peek(ctx, k, n)
						case 1:
							md, merr = mem.AllowN(ctx, k, n)
							rd, rerr = red.AllowN(ctx, k, n)
						case 2:
							if rng.IntN(5) != 0 {
								continue
							}
							e := time.Duration(rng.Int64N(int64(time.Hour)))
							merr = mem.Refund(ctx, k, n, e)
							rerr = red.Refund(ctx, k, n, e)
						}
						if merr != nil || rerr != nil {
							t.Fatalf("request %d: memory err %v, redis err %v", i, merr, rerr)
						}
						if md != rd {
							t.Fatalf("request %d (%q, op %d, n=%d, at %v, policy %v, %d changes):\nmemory %+v\n redis %+v", i, k, op, n, mc.Now().UTC(), p, changes, md, rd)
						}
					}
				}
			}
			if changes < 20 {
				t.Fatalf("%d changes of policy, want at least 20", changes)
			}
		})
	}
}
