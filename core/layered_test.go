package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/ratekit/ratekit/observe"
)

var layeredStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustNew(t testing.TB, p core.Policy, clock core.Clock) *core.Memory {
	t.Helper()
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustLayered(t testing.TB, layers ...*core.Memory) *core.Layered {
	t.Helper()
	l, err := core.NewLayered(layers...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A single layer decides exactly as its Memory: the whole suite applies.
func TestLayeredConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustLayered(t, mustNew(t, p, clock))
	})
}

// The layered suite, on Memory layers; each layer alone is its Memory.
func TestLayeredSuite(t *testing.T) {
	limitertest.RunLayered(t, func(t *testing.T, ps []core.Policy, clock *core.ManualClock) (core.MultiKeyLimiter, []core.Limiter) {
		var mems []*core.Memory
		var alone []core.Limiter
		for _, p := range ps {
			m := mustNew(t, p, clock)
			mems, alone = append(mems, m), append(alone, m)
		}
		return mustLayered(t, mems...), alone
	})
}

// Per IP and per account: each layer counts by its own key.
func TestLayeredKeys(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	ip := mustNew(t, core.Policy{Name: "ip", Limit: 3, Window: time.Minute}, clock)
	account := mustNew(t, core.Policy{Name: "account", Limit: 2, Window: time.Minute}, clock)
	l := mustLayered(t, ip, account)
	for i, tc := range []struct {
		ip, account string
		allowed     bool
		layer       int
	}{
		{"1.1.1.1", "ana", true, 1},
		{"1.1.1.1", "ana", true, 1},
		{"1.1.1.1", "ana", false, 1}, // ana's account is spent
		{"1.1.1.1", "bob", true, 0},  // the IP's third, bob's first: ip has 0 left
		{"1.1.1.1", "bob", false, 0}, // the IP is spent
		{"2.2.2.2", "bob", true, 1},
	} {
		d, err := l.AllowKeys(ctx, []string{tc.ip, tc.account}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != tc.allowed || d.Layer != tc.layer {
			t.Errorf("request %d (%s, %s): allowed=%v layer=%d, want %v, %d", i, tc.ip, tc.account, d.Allowed, d.Layer, tc.allowed, tc.layer)
		}
	}
	if err := l.ResetKeys(ctx, []string{"1.1.1.1", "ana"}); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.AllowKeys(ctx, []string{"1.1.1.1", "ana"}, 1); !d.Allowed {
		t.Errorf("after ResetKeys: %+v, want allowed", d)
	}
}

func TestLayeredErrors(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	small := mustNew(t, core.Policy{Name: "small", Limit: 5, Window: time.Second}, clock)
	big := mustNew(t, core.Policy{Name: "big", Limit: 100, Window: time.Hour}, clock)
	for _, layers := range [][]*core.Memory{nil, {small, nil}, {small, big, small}} {
		if _, err := core.NewLayered(layers...); err == nil {
			t.Errorf("NewLayered(%d layers with a nil or repeated one): no error", len(layers))
		}
	}
}

func withDelay(d core.Decision, delay time.Duration) core.Decision {
	d.Delay = delay
	return d
}

// Many goroutines on two accounts that share one IP layer: neither limit
// is ever exceeded, and the shared one is reached exactly. A second
// limiter over the same Memory limiters in the opposite order runs at the
// same time: the global lock order keeps them from deadlocking.
func TestLayeredSharedLayerRace(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	account := mustNew(t, core.Policy{Limit: 50, Window: time.Hour}, clock)
	ip := mustNew(t, core.Policy{Limit: 70, Window: time.Hour}, clock)
	forward := mustLayered(t, account, ip)
	backward := mustLayered(t, ip, account)
	var perAccount [2]atomic.Int64
	var next atomic.Int64
	limitercheck.Race(16, func(int) {
		g := next.Add(1)
		a := int(g % 2)
		for range 20 {
			var d core.Decision
			var err error
			if g%4 < 2 {
				var ld core.LayeredDecision
				ld, err = forward.AllowKeys(ctx, []string{fmt.Sprint("acct-", a), "10.0.0.1"}, 1)
				d = ld.Decision
			} else {
				var ld core.LayeredDecision
				ld, err = backward.AllowKeys(ctx, []string{"10.0.0.1", fmt.Sprint("acct-", a)}, 1)
				d = ld.Decision
			}
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				perAccount[a].Add(1)
			}
		}
	})
	a0, a1 := perAccount[0].Load(), perAccount[1].Load()
	if a0 > 50 || a1 > 50 || a0+a1 != 70 {
		t.Fatalf("allowed %d and %d (total %d): want each at most 50 and 70 in all", a0, a1, a0+a1)
	}
}

// TestLayeredRandom runs the FuzzLayered property on random inputs.
func TestLayeredRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range 300 {
		data := make([]byte, 8+rng.IntN(300))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		checkLayered(t, data)
		if t.Failed() {
			t.Fatalf("input %q", data)
		}
	}
}

// FuzzLayered drives a layered limiter of one to three random policies,
// keyed by one of three accounts or one of two IPs per layer, with random
// traffic and costs on a manual clock. Beside it, one shadow Memory limiter
// per layer sees only the requests the layered limiter allowed. After every
// request it checks:
//   - the request is allowed exactly when every shadow allows it, and each
//     layer's Decision equals its shadow's: the layered limiter never lets
//     through more than any one layer alone would (each layer's allowed
//     traffic is traffic its policy alone allows in full), and a denial
//     counts nothing in any layer;
//   - PeekKeys predicted AllowKeys;
//   - the Decision is the most restrictive layer's: the largest RetryAfter
//     of the denying layers, or the smallest Remaining;
//   - sometimes, after a denial: denied 1µs before RetryAfter, allowed at it.
//
// Input: byte 0 the number of layers and which key each uses, then three
// bytes per layer for its policy, then two bytes per request: how far the
// clock moves, and the cost and keys.
func FuzzLayered(f *testing.F) {
	f.Add([]byte{1, 0, 2, 0, 1, 9, 0, 10, 1, 0, 1, 0, 1, 0, 5, 200, 2, 0, 3})
	f.Add([]byte{5, 2, 4, 2, 4, 9, 2, 3, 40, 1, 0, 7, 0, 250, 0, 10, 3, 2, 1})
	f.Add([]byte{2, 4, 3, 1, 0, 1, 0, 1, 0, 20, 0, 9, 33, 7, 7, 7, 100, 3, 0, 4})
	f.Fuzz(checkLayered)
}

func checkLayered(t *testing.T, data []byte) {
	if len(data) < 1 {
		return
	}
	nLayers := 1 + int(data[0]%3)
	ipLayers := data[0] / 3
	data = data[1:]
	if len(data) < 3*nLayers {
		return
	}
	clock := core.NewManualClock(time.Unix(1_700_000_040, 0))
	var layers, shadows []*core.Memory
	maxCost := int64(4)
	for i := range nLayers {
		b := data[3*i : 3*i+3]
		p := core.Policy{
			Algorithm: core.Algorithms()[int(b[0])%len(core.Algorithms())],
			Limit:     1 + int64(b[1]%10),
			Window:    time.Duration(1+b[2]%4) * time.Second,
		}
		if p.Algorithm.Burstable() {
			p.Burst = int64(b[0] / 5 % 12)
		}
		layers = append(layers, mustNew(t, p, clock))
		shadows = append(shadows, mustNew(t, p, clock))
		maxCost = min(maxCost, p.Capacity())
	}
	data = data[3*nLayers:]
	if len(data) > 400 {
		data = data[:400]
	}
	l := mustLayered(t, layers...)
	keys := make([]string, nLayers)
	for r := 0; r+1 < len(data); r += 2 {
		clock.Advance(time.Duration(data[r]) * 10 * time.Millisecond)
		n := 1 + int64(data[r+1]%4)%maxCost
		for i := range keys {
			if ipLayers>>i&1 != 0 {
				keys[i] = fmt.Sprint("ip-", data[r+1]>>2%2)
			} else {
				keys[i] = fmt.Sprint("acct-", data[r+1]>>3%3)
			}
		}
		want := make([]core.Decision, nLayers)
		pass := true
		for i, s := range shadows {
			want[i], _ = s.Peek(ctx, keys[i], n)
			pass = pass && want[i].Allowed
		}
		pd, err := l.PeekKeys(ctx, keys, n)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.AllowKeys(ctx, keys, n)
		if err != nil {
			t.Fatal(err)
		}
		if !core.PeekPredictsLayered(pd, d, n) {
			t.Fatalf("request %d: PeekKeys %+v, AllowKeys %+v", r/2, pd, d)
		}
		if pass {
			for i, s := range shadows {
				want[i], _ = s.AllowN(ctx, keys[i], n)
			}
		}
		if d.Allowed != pass {
			t.Fatalf("request %d (n=%d, keys %q): allowed=%v, the layers alone say %v", r/2, n, keys, d.Allowed, pass)
		}
		for i := range want {
			if d.Layers[i] != want[i] {
				t.Fatalf("request %d: layer %d decided %+v, alone it decides %+v", r/2, i, d.Layers[i], want[i])
			}
		}
		if best := mostRestrictive(want, pass); d.Layer != best || d.Decision != withDelay(want[best], d.Delay) {
			t.Fatalf("request %d: layer %d's decision %+v, want layer %d's", r/2, d.Layer, d.Decision, best)
		}
		if !pass && data[r]%4 == 0 {
			clock.Advance(d.RetryAfter - time.Microsecond)
			if e, _ := l.PeekKeys(ctx, keys, n); e.Allowed {
				t.Fatalf("request %d: allowed 1µs before RetryAfter %v", r/2, d.RetryAfter)
			}
			clock.Advance(time.Microsecond)
			if e, _ := l.PeekKeys(ctx, keys, n); !e.Allowed {
				t.Fatalf("request %d: denied at RetryAfter %v: %+v", r/2, d.RetryAfter, e)
			}
		}
	}
}

// mostRestrictive is the definition in Layered's documentation, written
// independently.
func mostRestrictive(ds []core.Decision, pass bool) int {
	best := -1
	for i, d := range ds {
		if pass && (best < 0 || d.Remaining < ds[best].Remaining) {
			best = i
		}
		if !pass && !d.Allowed && (best < 0 || d.RetryAfter > ds[best].RetryAfter) {
			best = i
		}
	}
	return best
}

// Ten per second and 25 per calendar day on one key: a request passes only
// if both limits allow it, and a denied one counts in neither. The daily
// window is a calendar day: it starts again at midnight UTC.
func ExampleNewLayered() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	perSecond, _ := core.New(core.Policy{Name: "burst", Limit: 10, Window: time.Second}, core.WithClock(clock))
	perDay, _ := core.New(core.Policy{Name: "daily", Algorithm: core.FixedWindow, Limit: 25, Window: 24 * time.Hour},
		core.WithClock(clock))
	limiter, err := core.NewLayered(perSecond, perDay)
	if err != nil {
		panic(err)
	}
	for range 4 {
		allowed := 0
		var d core.Decision
		for range 12 {
			if d, _ = limiter.Allow(ctx, "api-key-1"); d.Allowed {
				allowed++
			}
		}
		fmt.Printf("%d of 12 allowed; denied by %s, retry in %v\n", allowed, d.Policy.Name, d.RetryAfter)
		clock.Advance(time.Second)
	}

	ld, _ := limiter.PeekKeys(ctx, []string{"api-key-1"}, 1)
	for _, d := range ld.Layers {
		fmt.Printf("%s: allowed=%v remaining=%d\n", d.Policy.Name, d.Allowed, d.Remaining)
	}
	// Output:
	// 10 of 12 allowed; denied by burst, retry in 100ms
	// 10 of 12 allowed; denied by burst, retry in 100ms
	// 5 of 12 allowed; denied by daily, retry in 11h59m58s
	// 0 of 12 allowed; denied by daily, retry in 11h59m57s
	// burst: allowed=true remaining=10
	// daily: allowed=false remaining=0
}

// AllowLayers and PeekLayers are AllowKeys and PeekKeys with one key, and
// AllowN's Decision is theirs; MostRestrictive of no layers is Layer -1.
func TestLayeredLimiterInterface(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	a, b := mustLayered(t,
		mustNew(t, core.Policy{Name: "s", Limit: 3, Window: time.Second}, clock),
		mustNew(t, core.Policy{Name: "m", Algorithm: core.SlidingLog, Limit: 5, Window: time.Minute}, clock)),
		mustLayered(t,
			mustNew(t, core.Policy{Name: "s", Limit: 3, Window: time.Second}, clock),
			mustNew(t, core.Policy{Name: "m", Algorithm: core.SlidingLog, Limit: 5, Window: time.Minute}, clock))
	var l core.LayeredLimiter = a
	for i := range 8 {
		clock.Advance(200 * time.Millisecond)
		p, err := l.PeekLayers(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := b.PeekKeys(ctx, []string{"k"}, 1)
		if !limitercheck.SameLayered(p, want) {
			t.Fatalf("request %d: PeekLayers %+v, PeekKeys %+v", i, p, want)
		}
		d, err := l.AllowLayers(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := b.AllowN(ctx, "k", 1); d.Decision != want {
			t.Fatalf("request %d: AllowLayers %+v, AllowN %+v", i, d.Decision, want)
		}
		if !core.PeekPredictsLayered(p, d, 1) || len(d.Layers) != 2 {
			t.Fatalf("request %d: AllowLayers %+v, PeekLayers %+v", i, d, p)
		}
	}
	if ld := core.MostRestrictive(nil); ld.Layer != -1 || ld.Allowed || ld.Layers != nil {
		t.Errorf("MostRestrictive(nil) = %+v, want Layer -1", ld)
	}
}

// As finds LayeredLimiter along the Unwrap chain only: a Failover's
// fallback is not on it, so a Failover over a plain remote is plain.
func TestAsLayeredLimiter(t *testing.T) {
	plain, _ := core.New(core.Policy{Limit: 10, Window: time.Second})
	a, _ := core.New(core.Policy{Name: "a", Limit: 10, Window: time.Second})
	b, _ := core.New(core.Policy{Name: "b", Limit: 100, Window: time.Minute})
	layered, err := core.NewLayered(a, b)
	if err != nil {
		t.Fatal(err)
	}
	nop := observe.ObserverFunc(func(context.Context, observe.Event) {})
	overPlain, _ := core.NewFailover(plain)
	overLayered, _ := core.NewFailover(plain, core.WithErrorPolicy(core.Fallback(layered)))
	observedPlain, _ := observe.New(overPlain, nop)
	observedLayered, _ := observe.New(overLayered, nop)
	shadowPlain, _ := observe.NewShadow(observedPlain, layered, nop)
	shadowLayered, _ := observe.NewShadow(layered, plain, nop)
	for _, c := range []struct {
		name string
		l    core.Limiter
		want bool
	}{
		{"memory", plain, false},
		{"layered", layered, true},
		{"failover over memory", overPlain, false},
		{"failover with a layered fallback", overLayered, false},
		{"observed failover over memory", observedPlain, false},
		{"observed failover with a layered fallback", observedLayered, false},
		{"shadow enforcing memory, layered candidate", shadowPlain, false},
		{"shadow enforcing layered", shadowLayered, true},
	} {
		if _, got := core.As[core.LayeredLimiter](c.l); got != c.want {
			t.Errorf("core.As[core.LayeredLimiter](%s) = %v, want %v", c.name, got, c.want)
		}
	}
}
