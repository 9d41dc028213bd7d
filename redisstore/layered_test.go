package redisstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/redis/go-redis/v9"
)

var layeredStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustLayered(t testing.TB, c redis.UniversalClient, ps []core.Policy, opts ...Option) *Layered {
	t.Helper()
	l, err := NewLayered(c, ps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// One layer decides exactly as a Limiter of its policy: the whole suite
// applies.
func TestLayeredConformance(t *testing.T) {
	t.Parallel() // with the other conformance runs, after the package's other tests
	client := newClient(t, singleNode(t))
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustLayered(t, client, []core.Policy{p}, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
	})
}

// The layered suite on one Redis server: each layer alone is a Limiter of
// its policy under the same prefix, which shares the layer's keys.
func TestLayeredSuite(t *testing.T) {
	client := newClient(t, singleNode(t))
	limitertest.RunLayered(t, func(t *testing.T, ps []core.Policy, clock *core.ManualClock) (core.MultiKeyLimiter, []core.Limiter) {
		prefix := uniquePrefix(t.Name())
		var alone []core.Limiter
		for _, p := range ps {
			alone = append(alone, mustNew(t, client, p, WithClock(clock), WithPrefix(prefix)))
		}
		return mustLayered(t, client, ps, WithClock(clock), WithPrefix(prefix)), alone
	})
}

// randomLayers returns one to three random policies, named apart.
func randomLayers(rng *rand.Rand) []core.Policy {
	ps := make([]core.Policy, 1+rng.IntN(3))
	for i := range ps {
		p := core.Policy{
			Name:      fmt.Sprint("layer", i),
			Algorithm: core.Algorithms()[rng.IntN(len(core.Algorithms()))],
			Limit:     1 + rng.Int64N(10),
			Window:    time.Duration(1+rng.IntN(4)) * time.Second,
		}
		if p.Algorithm.Burstable() {
			p.Burst = rng.Int64N(12)
		}
		if rng.IntN(8) == 0 {
			p.Limit, p.Window = 97, time.Minute // a fractional emission interval
		}
		ps[i] = p
	}
	return ps
}

// layeredTraffic drives one random request: it moves the clocks (with
// backwards set, now and then backwards) and returns the keys (one for
// every layer, or one per layer among two IPs and three accounts) and the
// cost, sometimes above a layer's capacity.
func layeredTraffic(rng *rand.Rand, ps []core.Policy, backwards bool, clocks ...*core.ManualClock) ([]string, int64) {
	var dt time.Duration
	switch r := rng.IntN(30); {
	case r == 0 && backwards:
		dt = -time.Duration(rng.IntN(3000)) * time.Millisecond
	case r == 1:
		dt = time.Duration(rng.IntN(8000)) * time.Millisecond
	default:
		dt = time.Duration(rng.IntN(400))*time.Millisecond + time.Duration(rng.IntN(1000))*time.Microsecond
	}
	for _, c := range clocks {
		c.Advance(dt)
	}
	maxCost := int64(4)
	for _, p := range ps {
		maxCost = min(maxCost, p.Capacity())
	}
	n := 1 + rng.Int64N(maxCost)
	if rng.IntN(40) == 0 {
		n = 5 + rng.Int64N(10)
	}
	if rng.IntN(2) == 0 {
		return []string{fmt.Sprint("acct-", rng.IntN(3))}, n
	}
	keys := make([]string, len(ps))
	for i := range keys {
		if i%2 == 1 {
			keys[i] = fmt.Sprint("ip-", rng.IntN(2))
		} else {
			keys[i] = fmt.Sprint("acct-", rng.IntN(3))
		}
	}
	return keys, n
}

// The same random traffic on a core.Layered of Memory layers and on a
// Redis Layered of the same policies, both on a manual clock: every
// LayeredDecision must be equal, field for field and layer for layer, and
// every error the same.
//
// The clock only moves forward here. The memory store drops a key's state
// once it is fresh (a full bucket, an empty window) when it makes room for
// another key, which changes no decision while time moves forward; after
// the clock goes back, the dropped state would have mattered again, and
// Redis still has it. TestSameDecisionsAsMemory moves the clock back on
// one key per limiter, where nothing is dropped, and the layered script
// runs the same algorithm code.
func TestLayeredSameDecisionsAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	for cfg := range 40 {
		rng := rand.New(rand.NewPCG(uint64(cfg), 99))
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
			for i := range 150 {
				keys, n := layeredTraffic(rng, ps, false, mc, rc)
				for _, commit := range []bool{false, true} {
					var md, rd core.LayeredDecision
					var merr, rerr error
					if commit {
						md, merr = mem.AllowKeys(ctx, keys, n)
						rd, rerr = red.AllowKeys(ctx, keys, n)
					} else {
						md, merr = mem.PeekKeys(ctx, keys, n)
						rd, rerr = red.PeekKeys(ctx, keys, n)
					}
					if (merr == nil) != (rerr == nil) || merr != nil && !errors.Is(rerr, core.ErrCostTooHigh) {
						t.Fatalf("request %d (n=%d, keys %q): memory err %v, redis err %v", i, n, keys, merr, rerr)
					}
					if !limitercheck.SameLayered(md, rd) {
						t.Fatalf("request %d (n=%d, keys %q, commit=%v, policies %v):\nmemory %+v\n redis %+v", i, n, keys, commit, ps, md, rd)
					}
				}
			}
		})
	}
}

// The property of issue #7 on Redis: a layered limiter never lets through
// more than any one of its layers alone would. Beside it, one Limiter per
// layer, under another prefix, sees only the requests the layered limiter
// allowed: each must allow every one of them (each layer's allowed traffic
// is traffic its policy alone allows in full), and decide exactly as that
// layer did, so a denial counted nothing anywhere.
func TestLayeredNeverMoreThanOneLayer(t *testing.T) {
	client := newClient(t, singleNode(t))
	for cfg := range 25 {
		rng := rand.New(rand.NewPCG(uint64(cfg), 7))
		ps := randomLayers(rng)
		t.Run(fmt.Sprint(cfg), func(t *testing.T) {
			clock := core.NewManualClock(time.Unix(1_700_000_040, 0))
			l := mustLayered(t, client, ps, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
			shadowPrefix := uniquePrefix(t.Name() + "-alone")
			var shadows []*Limiter
			for _, p := range ps {
				shadows = append(shadows, mustNew(t, client, p, WithClock(clock), WithPrefix(shadowPrefix)))
			}
			for i := range 150 {
				keys, n := layeredTraffic(rng, ps, true, clock)
				d, err := l.AllowKeys(ctx, keys, n)
				if errors.Is(err, core.ErrCostTooHigh) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				pass := true
				want := make([]core.Decision, len(ps))
				for j, s := range shadows {
					if want[j], err = s.Peek(ctx, layerKey(keys, j), n); err != nil {
						t.Fatal(err)
					}
					pass = pass && want[j].Allowed
				}
				if d.Allowed != pass {
					t.Fatalf("request %d (n=%d, keys %q): allowed=%v, the layers alone say %v", i, n, keys, d.Allowed, pass)
				}
				if pass {
					for j, s := range shadows {
						if want[j], err = s.AllowN(ctx, layerKey(keys, j), n); err != nil || !want[j].Allowed {
							t.Fatalf("request %d: layer %d alone refuses what the layered limiter let through: %+v, %v", i, j, want[j], err)
						}
					}
				}
				for j := range want {
					if d.Layers[j] != want[j] {
						t.Fatalf("request %d: layer %d decided %+v, alone %+v", i, j, d.Layers[j], want[j])
					}
				}
			}
		})
	}
}

// Every decision is one command, whatever the number of layers.
func TestLayeredOneRoundTrip(t *testing.T) {
	client := newClient(t, singleNode(t))
	var sent atomic.Int64
	client.AddHook(countHook{&sent})
	l := mustLayered(t, client, []core.Policy{
		{Name: "s", Limit: 5, Window: time.Second},
		{Name: "m", Algorithm: core.SlidingLog, Limit: 50, Window: time.Minute},
		{Name: "h", Algorithm: core.SlidingWindow, Limit: 500, Window: time.Hour},
		{Name: "d", Algorithm: core.FixedWindow, Limit: 5000, Window: 24 * time.Hour},
	}, WithPrefix(uniquePrefix(t.Name())))
	l.Allow(ctx, "warm") // the script is loaded
	sent.Store(0)
	const decisions = 50
	for i := range decisions {
		if _, err := l.AllowKeys(ctx, []string{fmt.Sprint("k", i%3)}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := sent.Load(); got != decisions {
		t.Errorf("client sent %d commands for %d decisions, want one each", got, decisions)
	}
}

// Every key a layered decision writes has an expiry; Reset and ResetKeys
// delete every layer's keys; after SCRIPT and FUNCTION FLUSH the next
// decision runs (its library loaded again).
func TestLayeredKeysExpiryReset(t *testing.T) {
	addr := singleNode(t)
	client := newClient(t, addr)
	prefix := uniquePrefix(t.Name())
	clock := core.NewManualClock(layeredStart)
	l := mustLayered(t, client, []core.Policy{
		{Name: "ip", Limit: 3, Window: time.Minute},
		{Name: "account", Algorithm: core.SlidingLog, Limit: 2, Window: time.Minute},
	}, WithPrefix(prefix), WithClock(clock))
	for i, tc := range []struct {
		ip, account string
		allowed     bool
		layer       int
	}{
		{"1.1.1.1", "ana", true, 1},
		{"1.1.1.1", "ana", true, 1},
		{"1.1.1.1", "ana", false, 1}, // ana's account is spent
		{"1.1.1.1", "bob", true, 0},  // the IP's third, bob's first
		{"1.1.1.1", "bob", false, 0}, // the IP is spent
		{"2.2.2.2", "{bob}", true, 1},
	} {
		d, err := l.AllowKeys(ctx, []string{tc.ip, tc.account}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != tc.allowed || d.Layer != tc.layer {
			t.Errorf("request %d (%s, %s): allowed=%v layer=%d, want %v, %d", i, tc.ip, tc.account, d.Allowed, d.Layer, tc.allowed, tc.layer)
		}
	}
	keys := scanKeys(t, client, prefix+":*")
	if len(keys) != 2+3 { // two IPs, three accounts
		t.Errorf("keys %q, want 5", keys)
	}
	for _, k := range keys {
		if ttl, err := client.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
			t.Errorf("key %s: PTTL %v, %v; want an expiry", k, ttl, err)
		}
	}
	if err := l.ResetKeys(ctx, []string{"1.1.1.1", "ana"}); err != nil {
		t.Fatal(err)
	}
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := l.AllowKeys(ctx, []string{"1.1.1.1", "ana"}, 1); err != nil || !d.Allowed {
		t.Errorf("after ResetKeys and SCRIPT and FUNCTION FLUSH: %+v, %v; want allowed", d, err)
	}
	if err := l.Reset(ctx, "{bob}"); err != nil {
		t.Fatal(err)
	}
	for _, k := range scanKeys(t, client, prefix+":*") {
		if strings.Contains(k, "%7Bbob%7D") {
			t.Errorf("key %s left after Reset", k)
		}
	}
}

func TestLayeredErrors(t *testing.T) {
	client := newClient(t, singleNode(t))
	small := core.Policy{Name: "small", Limit: 5, Window: time.Second}
	big := core.Policy{Name: "big", Limit: 100, Window: time.Hour}
	for _, tc := range []struct {
		name string
		c    redis.UniversalClient
		ps   []core.Policy
		opts []Option
	}{
		{"nil client", nil, []core.Policy{small}, nil},
		{"no policy", client, nil, nil},
		{"invalid policy", client, []core.Policy{small, {Limit: 0, Window: time.Second}}, nil},
		{"same policy twice", client, []core.Policy{small, big, small}, nil},
		{"prefix with a brace", client, []core.Policy{small}, []Option{WithPrefix("a{b")}},
		{"negative timeout", client, []core.Policy{small}, []Option{WithTimeout(-1)}},
		{"nil option", client, []core.Policy{small}, []Option{nil}},
	} {
		if _, err := NewLayered(tc.c, tc.ps, tc.opts...); err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") {
			t.Errorf("NewLayered with %s: err = %v, want a redisstore error", tc.name, err)
		}
	}
	if _, err := NewLayered(client, []core.Policy{small, {Limit: 0, Window: time.Second}}); !errors.Is(err, core.ErrInvalidPolicy) {
		t.Errorf("invalid policy: %v, want ErrInvalidPolicy", err)
	}
}

// keySlot agrees with CLUSTER KEYSLOT.
func TestKeySlot(t *testing.T) {
	client := newClient(t, singleNode(t))
	for _, k := range []string{"a", "123456789", "acct-1", "ip-1", "%7Bbob%7D", "ünïcödé", strings.Repeat("x", 300)} {
		want, err := client.Do(ctx, "CLUSTER", "KEYSLOT", "p:{"+k+"}").Int()
		if err != nil {
			t.Skipf("CLUSTER KEYSLOT on a single node: %v", err)
		}
		if got := keySlot(k); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", k, got, want)
		}
	}
}

// On a 3-master Cluster: one key for every layer works, whatever the key
// holds; a key per layer works when the keys share a slot, and otherwise
// fails with ErrCrossSlot, before sending with a Cluster client, and from
// Redis's own CROSSSLOT with a plain client of one node.
func TestLayeredCluster(t *testing.T) {
	addrs := cluster(t)
	client := newClusterClient(t, addrs)
	prefix := uniquePrefix("layered-cluster")
	clock := core.NewManualClock(layeredStart)
	ps := []core.Policy{
		{Name: "burst", Limit: 3, Window: time.Second},
		{Name: "log", Algorithm: core.SlidingLog, Limit: 5, Window: time.Minute},
		{Name: "daily", Algorithm: core.SlidingWindow, Limit: 4, Window: 24 * time.Hour},
	}
	l := mustLayered(t, client, ps, WithPrefix(prefix), WithClock(clock))
	for _, u := range []string{"alice", "{bob}", "c}a{rol", "}", "dave%7B"} {
		for i := range 5 {
			d, err := l.AllowLayers(ctx, u, 1)
			if err != nil {
				t.Fatalf("%q request %d: %v", u, i+1, err)
			}
			if want := i < 3; d.Allowed != want || (!want && d.Layer != 0) {
				t.Fatalf("%q request %d: allowed=%v layer %d, want %v", u, i+1, d.Allowed, d.Layer, want)
			}
		}
		clock.Advance(time.Second)
		if d, err := l.AllowN(ctx, u, 1); err != nil || !d.Allowed || d.Policy.Name != "daily" || d.Remaining != 0 {
			t.Fatalf("%q after a second: %+v, %v; want allowed with daily spent", u, d, err)
		}
		if err := l.Reset(ctx, u); err != nil {
			t.Fatalf("Reset(%q): %v", u, err)
		}
		if d, err := l.Peek(ctx, u, 3); err != nil || !d.Allowed {
			t.Fatalf("Peek(%q) after Reset: %+v, %v", u, d, err)
		}
	}

	// Keys per layer in different slots: refused before sending.
	var sent atomic.Int64
	client.AddHook(scriptHook{&sent})
	keys := []string{"acct-1", "ip-1", "acct-1"}
	if keySlot("acct-1") == keySlot("ip-1") {
		t.Fatal("acct-1 and ip-1 share a slot; pick other keys")
	}
	_, err := l.AllowKeys(ctx, keys, 1)
	if !errors.Is(err, ErrCrossSlot) || !strings.HasPrefix(err.Error(), "redisstore: ") {
		t.Errorf("keys in different slots: %v, want ErrCrossSlot", err)
	}
	if err := l.ResetKeys(ctx, keys); !errors.Is(err, ErrCrossSlot) {
		t.Errorf("ResetKeys in different slots: %v, want ErrCrossSlot", err)
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("%d scripts sent for keys in different slots, want none", n)
	}
	// Keys that share a slot by chance work.
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprint("ip-", i); keySlot(k) == keySlot("acct-1") {
			other = k
		}
	}
	if d, err := l.AllowKeys(ctx, []string{"acct-1", other, "acct-1"}, 1); err != nil || !d.Allowed {
		t.Errorf("keys %q and %q in one slot: %+v, %v; want allowed", "acct-1", other, d, err)
	}

	// A plain client of one node: Redis refuses with CROSSSLOT.
	node := newClient(t, addrs[0])
	plain := mustLayered(t, node, ps, WithPrefix(prefix), WithClock(clock))
	if _, err := plain.AllowKeys(ctx, keys, 1); !errors.Is(err, ErrCrossSlot) {
		t.Errorf("CROSSSLOT from Redis: %v, want it wrapped with ErrCrossSlot", err)
	}
}
