package core_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/observe"
)

func TestMemoryRefund(t *testing.T) {
	limitertest.RunRefund(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustNew(t, p, clock)
	})
}

// A single layer gives back exactly as its Memory.
func TestLayeredRefund(t *testing.T) {
	limitertest.RunRefund(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustLayered(t, mustNew(t, p, clock))
	})
}

// refundModel runs a key through random AllowN, Refund and clock moves, and
// beside it a replay: a second limiter given only the allowed requests that
// were not refunded, at their times. After every step, the key must never
// have more room than the replay (a refund gives back at most what the
// refunded requests still weigh), and, while every refund so far gave back
// a request at the instant it was allowed with elapsed 0 on a clock that
// never went back, exactly as much.
//
// The clock sometimes steps back; elapsed is then measured as a caller
// does, on a monotonic clock that a step back does not move. The buckets
// stay comparable: a request only ever adds to the backlog later decisions
// see. The windows and the log do not: a request rolls the key's counters
// into its window, or drops the log entries that have left the window at
// its time, and a clock that then steps back finds them gone where the
// replay without the request still has them. That is the algorithms' own
// behaviour on a clock that goes back, refunds or not, so for them the
// comparison stops at the first step back.
//
// Input: byte 0 picks the algorithm, bytes 1-3 the policy, then each pair
// of bytes is one step: the first says how far the clock moves and what
// the step does, the second is its argument.
func refundModel(t *testing.T, data []byte) {
	if len(data) < 4 {
		return
	}
	p := core.Policy{
		Algorithm: core.Algorithms()[int(data[0])%len(core.Algorithms())],
		Limit:     1 + int64(data[1]%10),
		Window:    time.Duration(1+data[2]%3) * time.Second,
	}
	if p.Algorithm.Burstable() {
		p.Burst = int64(data[3] % 16)
	}
	data = data[4:]
	if len(data) > 400 {
		data = data[:400]
	}
	ctx := context.Background()
	start := time.Unix(1_700_000_040, 0)
	clock := core.NewManualClock(start)
	lim := mustNew(t, p, clock)
	c := p.Capacity()

	// Real time, as a caller measures elapsed (monotonically): it moves
	// with the clock, except that a step back takes none.
	var real time.Duration
	type request struct {
		at       time.Time
		real     time.Duration
		n        int64
		refunded bool
	}
	var reqs []*request
	replayClock := core.NewManualClock(start)
	var replay *core.Memory
	exact, compare := true, true
	rebuild := func() {
		replay = mustNew(t, p, replayClock)
		for _, r := range reqs {
			if r.refunded {
				continue
			}
			replayClock.Set(r.at)
			if d, err := replay.AllowN(ctx, "k", r.n); compare && (err != nil || !d.Allowed) {
				t.Fatalf("replay of %d units at +%v: %+v %v", r.n, r.at.Sub(start), d, err)
			}
		}
	}
	rebuild()
	give := func(r *request, elapsed time.Duration) {
		if err := lim.Refund(ctx, "k", r.n, elapsed); err != nil {
			t.Fatal(err)
		}
		r.refunded = true
		rebuild()
	}
	for i := 0; i+1 < len(data); i += 2 {
		b, arg := data[i], data[i+1]
		move := time.Duration(b>>3)*p.Window/64 + time.Duration(arg%3)*time.Microsecond
		if b>>3 == 31 {
			move = -p.Window / 3 // the clock steps back
			exact = false
			compare = compare && p.Algorithm.Burstable()
		}
		clock.Advance(move)
		real += max(move, 0)
		now := clock.Now()
		n := 1 + int64(arg)%c
		switch b & 7 {
		case 0, 1, 2, 3: // a request
			d, err := lim.AllowN(ctx, "k", n)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				r := &request{at: now, real: real, n: n}
				reqs = append(reqs, r)
				replayClock.Set(now)
				if rd, err := replay.AllowN(ctx, "k", n); compare && (err != nil || !rd.Allowed) {
					t.Fatalf("step %d: %d units allowed at +%v, but not in the replay: %+v %v", i/2, n, now.Sub(start), rd, err)
				}
			}
		case 4, 5: // a refund of an earlier request, elapsed measured generously
			var open []*request
			for _, r := range reqs {
				if !r.refunded {
					open = append(open, r)
				}
			}
			if len(open) == 0 {
				continue
			}
			r := open[int(arg)%len(open)]
			elapsed := real - r.real + time.Duration(arg>>5)*p.Window/8 + time.Duration(arg%2)
			if elapsed != 0 {
				exact = false
			}
			give(r, elapsed)
		case 6: // a request given back at once
			d, err := lim.AllowN(ctx, "k", n)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				r := &request{at: now, real: real, n: n}
				reqs = append(reqs, r)
				give(r, 0)
			}
		case 7: // the clock moves, nothing else
		}
		if !compare {
			continue
		}
		replayClock.Set(now)
		for m := int64(1); m <= c; m++ {
			got, err := lim.Peek(ctx, "k", m)
			if err != nil {
				t.Fatal(err)
			}
			want, err := replay.Peek(ctx, "k", m)
			if err != nil {
				t.Fatal(err)
			}
			// Remaining is after the request when allowed, before it when
			// denied: compare like with like.
			if got.Allowed && !want.Allowed || got.Allowed == want.Allowed && got.Remaining > want.Remaining ||
				!got.Allowed && !want.Allowed && got.RetryAfter < want.RetryAfter {
				t.Fatalf("step %d (%v, at +%v): Peek(%d) has more room than the replay without the refunded requests:\n got %+v\nwant %+v",
					i/2, p, now.Sub(start), m, got, want)
			}
			if exact && got != want {
				t.Fatalf("step %d (%v, at +%v): Peek(%d) after exact refunds differs from the replay:\n got %+v\nwant %+v",
					i/2, p, now.Sub(start), m, got, want)
			}
		}
	}
}

// TestRefundModel runs refundModel on 500 random inputs, every algorithm in
// turn; FuzzRefund explores further.
func TestRefundModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 500 {
		data := make([]byte, 4+2*(20+rng.IntN(120)))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		data[0] = byte(i) // every algorithm in turn
		t.Run(fmt.Sprint(i), func(t *testing.T) { refundModel(t, data) })
		if t.Failed() {
			return
		}
	}
}

// FuzzRefund is TestRefundModel's check on fuzzed input.
func FuzzRefund(f *testing.F) {
	f.Add([]byte{0, 3, 0, 4, 0, 2, 0, 2, 4, 1, 6, 3, 40, 1, 5, 0})
	f.Add([]byte{1, 4, 1, 0, 8, 3, 16, 1, 4, 0, 252, 1, 5, 33, 7, 9})
	f.Add([]byte{2, 4, 2, 0, 0, 1, 80, 2, 4, 3, 160, 1, 5, 64, 6, 1})
	f.Add([]byte{3, 9, 0, 0, 64, 9, 128, 5, 4, 1, 200, 3, 5, 2, 6, 4})
	f.Add([]byte{4, 3, 1, 5, 0, 2, 0, 3, 6, 1, 4, 1, 248, 1, 7, 30})
	f.Fuzz(refundModel)
}

// Each wrapper around a Memory gives back as the Memory does.
func TestWrappersRefund(t *testing.T) {
	wrappers := []struct {
		name string
		wrap func(t *testing.T, m *core.Memory, p core.Policy, clock *core.ManualClock) core.Limiter
	}{
		{"observed", func(t *testing.T, m *core.Memory, _ core.Policy, clock *core.ManualClock) core.Limiter {
			return mustObserved(t, m, &recorder{}, observe.WithClock(clock))
		}},
		{"shadow", func(t *testing.T, m *core.Memory, p core.Policy, clock *core.ManualClock) core.Limiter {
			return mustShadow(t, m, mustNew(t, p, clock), &recorder{}, observe.WithClock(clock))
		}},
		{"denial-cache", func(t *testing.T, m *core.Memory, _ core.Policy, clock *core.ManualClock) core.Limiter {
			return mustDenialCache(t, m, hotkey.WithClock(clock))
		}},
		{"failover", func(t *testing.T, m *core.Memory, p core.Policy, clock *core.ManualClock) core.Limiter {
			return mustFailover(t, m, core.WithErrorPolicy(core.Fallback(mustNew(t, p, clock))), core.WithClock(clock))
		}},
		{"tiered", func(t *testing.T, _ *core.Memory, p core.Policy, clock *core.ManualClock) core.Limiter {
			tl, err := core.NewTiered(map[string]core.Policy{"plan": p},
				func(context.Context, string) (string, error) { return "plan", nil }, core.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			return tl
		}},
	}
	for _, w := range wrappers {
		t.Run(w.name, func(t *testing.T) {
			limitertest.RunRefund(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
				return w.wrap(t, mustNew(t, p, clock), p, clock)
			})
		})
	}
}

// hidden hides every method of a limiter but those of core.Limiter: a
// store that cannot refund.
type hidden struct{ core.Limiter }

// A wrapper around a limiter that cannot refund says so, with ErrNoRefund,
// and core.As sees through it; so does one around a Leased limiter.
func TestNoRefund(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	p := core.Policy{Limit: 10, Window: time.Minute}
	plain := hidden{mustNew(t, p, clock)}
	leased := mustLeased(t, mustNew(t, p, clock), 2, hotkey.WithClock(clock))
	if _, ok := core.Limiter(leased).(core.Refunder); ok {
		t.Errorf("Leased is a Refunder")
	}
	wrappers := map[string]func(core.Limiter) core.Limiter{
		"observed":     func(l core.Limiter) core.Limiter { return mustObserved(t, l, &recorder{}) },
		"shadow":       func(l core.Limiter) core.Limiter { return mustShadow(t, l, mustNew(t, p, clock), &recorder{}) },
		"denial-cache": func(l core.Limiter) core.Limiter { return mustDenialCache(t, l) },
		"failover": func(l core.Limiter) core.Limiter {
			return mustFailover(t, l, core.WithErrorPolicy(core.Fallback(mustNew(t, p, clock))))
		},
	}
	for name, wrap := range wrappers {
		for _, inner := range []core.Limiter{plain, leased, mustDenialCache(t, plain)} {
			l := wrap(inner)
			if _, ok := core.As[core.Refunder](l); ok {
				t.Errorf("%s around %T: As[Refunder] says it can refund", name, inner)
			}
			err := l.(core.Refunder).Refund(ctx, "k", 1, 0)
			if !errors.Is(err, core.ErrNoRefund) || !core.CallerError(ctx, err) {
				t.Errorf("%s around %T: Refund: %v, want ErrNoRefund", name, inner, err)
			}
		}
		if _, ok := core.As[core.Refunder](wrap(mustObserved(t, mustNew(t, p, clock), &recorder{}))); !ok {
			t.Errorf("%s around an Observed Memory: As[Refunder] says it cannot refund", name)
		}
	}
	for _, l := range []core.Limiter{mustNew(t, p, clock), mustLayered(t, mustNew(t, p, clock))} {
		if _, ok := core.As[core.Refunder](l); !ok {
			t.Errorf("As[Refunder](%T) = false", l)
		}
	}
	if _, ok := core.As[core.Refunder](plain); ok {
		t.Errorf("As[Refunder] of a limiter without Refund = true")
	}
}

// Refunding a key the Memory does not hold stores nothing.
func TestMemoryRefundCreatesNoKey(t *testing.T) {
	for _, a := range core.Algorithms() {
		m := mustNew(t, core.Policy{Algorithm: a, Limit: 5, Window: time.Minute}, core.NewManualClock(layeredStart))
		for i := range 100 {
			if err := m.Refund(ctx, fmt.Sprint("absent-", i), 1, 0); err != nil {
				t.Fatal(err)
			}
		}
		if got := m.Stats().Keys; got != 0 {
			t.Errorf("%v: %d keys after refunding keys never seen, want 0", a, got)
		}
	}
}

// A layered limiter gives back in every layer, by each layer's key, and
// gives back nowhere when the arguments fail for one layer.
func TestLayeredRefundKeys(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	ip := mustNew(t, core.Policy{Name: "ip", Limit: 3, Window: time.Minute}, clock)
	account := mustNew(t, core.Policy{Name: "account", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}, clock)
	l := mustLayered(t, ip, account)
	keys := []string{"10.0.0.1", "alice"}
	for range 2 {
		if d, _ := l.AllowKeys(ctx, keys, 1); !d.Allowed {
			t.Fatalf("AllowKeys denied: %+v", d)
		}
	}
	if err := l.RefundKeys(ctx, keys, 3, 0); !errors.Is(err, core.ErrCostTooHigh) {
		t.Fatalf("refund of 3 with an account limit of 2: %v, want ErrCostTooHigh", err)
	}
	if err := l.RefundKeys(ctx, keys[:1], 1, -1); !errors.Is(err, core.ErrInvalidElapsed) {
		t.Fatalf("negative elapsed: %v, want ErrInvalidElapsed", err)
	}
	if err := l.RefundKeys(ctx, []string{"a", "b", "c"}, 1, 0); err == nil {
		t.Fatalf("three keys for two layers: no error")
	}
	if d, _ := account.Peek(ctx, "alice", 1); d.Allowed {
		t.Fatalf("a refund that failed gave back in a layer: %+v", d)
	}
	if err := l.RefundKeys(ctx, keys, 2, 0); err != nil {
		t.Fatal(err)
	}
	if d, _ := ip.Peek(ctx, "10.0.0.1", 3); !d.Allowed {
		t.Errorf("ip layer after the refund: %+v, want 3 units free", d)
	}
	if d, _ := account.Peek(ctx, "alice", 2); !d.Allowed {
		t.Errorf("account layer after the refund: %+v, want 2 units free", d)
	}
}

// flakyRefunder is a flakyStore whose Refund fails while it is down.
type flakyRefunder struct{ *flakyStore }

func (s flakyRefunder) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	if err := s.Call(); err != nil {
		return fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.Refund(ctx, key, n, elapsed)
}

// A Failover gives back in the remote limiter and, in an outage, in the
// local fallback, which decided the requests then.
func TestFailoverRefund(t *testing.T) {
	p := core.Policy{Limit: 2, Window: time.Hour}
	clock := core.NewManualClock(layeredStart)
	remote := flakyRefunder{newFlaky(t, p, clock)}
	local := mustNew(t, p, clock)
	var hooked []error
	f := mustFailover(t, remote, core.WithErrorPolicy(core.Fallback(local)), core.WithBreaker(2, time.Minute), core.WithClock(clock),
		core.WithErrorHook(func(err error) { hooked = append(hooked, err) }))

	allow(t, f, "k", 2)
	if err := f.Refund(ctx, "k", 1, 0); err != nil {
		t.Fatal(err)
	}
	if d, _ := remote.Memory.Peek(ctx, "k", 1); !d.Allowed {
		t.Fatalf("remote after the refund: %+v, want a unit free", d)
	}

	remote.Down.Store(true)
	allow(t, f, "outage", 2) // decided by the local limiter
	if err := f.Refund(ctx, "outage", 2, 0); err != nil {
		t.Fatalf("refund in an outage: %v, want the local refund's nil", err)
	}
	if d, _ := local.Peek(ctx, "outage", 2); !d.Allowed {
		t.Fatalf("local after the refund in an outage: %+v, want 2 units free", d)
	}
	if !f.BreakerOpen() || len(hooked) != 2 {
		t.Fatalf("breaker open = %v after %d hooked errors; want the refund's error counted, breaker open", f.BreakerOpen(), len(hooked))
	}
	calls := remote.Calls.Load()
	allow(t, f, "open", 1)
	if err := f.Refund(ctx, "open", 1, 0); err != nil {
		t.Fatalf("refund with the breaker open: %v", err)
	}
	if remote.Calls.Load() != calls {
		t.Fatalf("the open breaker let the refund call the store")
	}
	if d, _ := local.Peek(ctx, "open", 2); !d.Allowed {
		t.Fatalf("local after the refund with the breaker open: %+v", d)
	}

	open := mustFailover(t, remote, core.WithErrorPolicy(core.FailOpen()), core.WithBreaker(1, time.Minute), core.WithClock(clock))
	if err := open.Refund(ctx, "k", 1, 0); !errors.Is(err, errDown) {
		t.Fatalf("fail-open refund in an outage: %v, want the store's error", err)
	}
	if err := open.Refund(ctx, "k", 1, 0); !errors.Is(err, core.ErrBreakerOpen) {
		t.Fatalf("fail-open refund with the breaker open: %v, want ErrBreakerOpen", err)
	}
	if err := open.Refund(ctx, "k", 3, 0); !errors.Is(err, core.ErrCostTooHigh) {
		t.Fatalf("refund above capacity: %v, want ErrCostTooHigh", err)
	}
}

// A tiered limiter gives back in the plan the key is on, and asks no plan
// for bad arguments.
func TestTieredRefund(t *testing.T) {
	tl, pl, _ := newTiered(t)
	pl.set("k", "pro")
	allow(t, tl, "k", 10)
	if err := tl.Refund(ctx, "k", 4, 0); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, tl, "k", 4); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("pro after the refund: %+v, want 4 allowed, 0 left", d)
	}
	if err := tl.Refund(ctx, "k", 11, 0); !errors.Is(err, core.ErrCostTooHigh) {
		t.Fatalf("refund above pro's capacity: %v, want ErrCostTooHigh", err)
	}
	pl.set("bad", "gold")
	if err := tl.Refund(ctx, "bad", 1, 0); !errors.Is(err, core.ErrUnknownPlan) {
		t.Fatalf("refund on an unknown plan: %v, want ErrUnknownPlan", err)
	}
	if err := tl.Refund(ctx, "bad", 1, -time.Second); !errors.Is(err, core.ErrInvalidElapsed) {
		t.Fatalf("negative elapsed: %v, want ErrInvalidElapsed before the plan is asked", err)
	}
}

// An Observed limiter reports refunds; a Shadow gives back in the enforced
// limiter only.
func TestObservedAndShadowRefund(t *testing.T) {
	clock := core.NewManualClock(layeredStart)
	p := core.Policy{Name: "api", Limit: 2, Window: time.Hour}
	rec := &recorder{}
	o := mustObserved(t, mustNew(t, p, clock), rec, observe.WithClock(clock))
	if err := o.Refund(ctx, "k", 2, 0); err != nil {
		t.Fatal(err)
	}
	_ = o.Refund(ctx, "", 1, 0)
	checkEvents(t, rec.Take(), []eventSummary{
		{Op: observe.OpRefund, Policy: "api", Cost: 2, Outcome: observe.OutcomeAllowed},
		{Op: observe.OpRefund, Policy: "api", Cost: 1, Outcome: observe.OutcomeError, Err: "core: key is empty"},
	})
	if err := mustObserved(t, hidden{mustNew(t, p, clock)}, rec).Refund(ctx, "k", 1, 0); !errors.Is(err, core.ErrNoRefund) {
		t.Fatalf("observed non-refunder: %v", err)
	}
	if ev := rec.Take(); len(ev) != 1 || !errors.Is(ev[0].Err, core.ErrNoRefund) {
		t.Fatalf("events %+v, want one refund event with ErrNoRefund", ev)
	}

	enforced, candidate := mustNew(t, p, clock), mustNew(t, p, clock)
	s := mustShadow(t, enforced, candidate, rec)
	allow(t, s, "k", 2)
	if err := s.Refund(ctx, "k", 2, 0); err != nil {
		t.Fatal(err)
	}
	if d, _ := enforced.Peek(ctx, "k", 2); !d.Allowed {
		t.Errorf("enforced after the refund: %+v, want 2 free", d)
	}
	if d, _ := candidate.Peek(ctx, "k", 1); d.Allowed {
		t.Errorf("candidate after the refund: %+v, want it untouched", d)
	}
}

func allow(t *testing.T, l core.Limiter, key string, n int64) core.Decision {
	t.Helper()
	d, err := l.AllowN(ctx, key, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", key, n, err)
	}
	return d
}
