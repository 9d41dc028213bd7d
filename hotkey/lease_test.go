package hotkey_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/internal/flakystore"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

func mustLeased(t testing.TB, remote core.Limiter, batch int64, opts ...hotkey.LeaseOption) *hotkey.Leased {
	t.Helper()
	l, err := hotkey.NewLeased(remote, batch, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The take size starts at the cost, doubles while leases are spent in
// time, halves when one expires with units left; Remaining is the lease's
// units plus the store's at the last take.
func TestLeasedSteps(t *testing.T) {
	ms := time.Millisecond
	p := core.Policy{Limit: 1000, Window: time.Hour} // no refill to speak of
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newCounting(t, p, clock)
	l := mustLeased(t, remote, 8, hotkey.WithClock(clock), hotkey.WithLeaseTime(100*ms))
	steps := []struct {
		at            time.Duration
		n             int64
		wantRemaining int64
		wantTakes     int64
		wantCounted   int64 // units counted by the remote limiter
	}{
		{0, 1, 999, 1, 1},  // takes 1 (the cost)
		{0, 1, 998, 2, 3},  // the lease was spent in time: takes 2
		{0, 1, 997, 2, 3},  // from the lease
		{0, 1, 996, 3, 7},  // takes 4
		{0, 3, 993, 3, 7},  // spends 3 of them
		{0, 1, 992, 4, 15}, // takes 8, the batch
		{0, 2, 990, 4, 15},
		{99 * ms, 1, 989, 4, 15},
		// At 100ms the 4 units left expire, the take size halves to 4,
		// and (the lease was not spent in time) does not double.
		{100 * ms, 1, 984, 5, 19},
	}
	for i, s := range steps {
		clock.Set(limitercheck.StartTime().Add(s.at))
		d, err := l.AllowN(ctx, "k", s.n)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !d.Allowed || d.Remaining != s.wantRemaining || d.Limit != 1000 || d.Policy != p {
			t.Errorf("step %d (at %v, n=%d): allowed=%v remaining=%d limit=%d, want allowed, remaining %d, limit 1000",
				i, s.at, s.n, d.Allowed, d.Remaining, d.Limit, s.wantRemaining)
		}
		if got := remote.allows.Load(); got != s.wantTakes {
			t.Errorf("step %d: %d takes, want %d", i, got, s.wantTakes)
		}
		if store, _ := remote.Memory.Peek(ctx, "k", 1); p.Limit-store.Remaining != s.wantCounted {
			t.Errorf("step %d: the remote counted %d units, want %d", i, p.Limit-store.Remaining, s.wantCounted)
		}
	}
	if st := l.Stats(); st.Keys != 1 || st.Takes != 5 || st.Dropped != 4 {
		t.Errorf("Stats() = %+v, want 1 key, 5 takes, 4 dropped", st)
	}
	// Peek: from the lease when it holds n, else the remote for the rest;
	// either way the key as it is, 3 units leased and 981 left remotely,
	// as the last AllowN reported it.
	peeks := remote.peeks.Load()
	if d, _ := l.Peek(ctx, "k", 3); !d.Allowed || d.Remaining != 984 || remote.peeks.Load() != peeks {
		t.Errorf("Peek 3: %+v, %d remote peeks; want allowed, 984 left, none", d, remote.peeks.Load()-peeks)
	}
	if d, _ := l.Peek(ctx, "k", 4); !d.Allowed || d.Remaining != 984 || remote.peeks.Load() != peeks+1 {
		t.Errorf("Peek 4: %+v, %d remote peeks; want allowed, 984 left, one", d, remote.peeks.Load()-peeks)
	}
	// A cost above the batch goes to the remote as it is.
	if d, _ := l.AllowN(ctx, "k", 9); !d.Allowed || d.Remaining != 972 || remote.allows.Load() != 6 {
		t.Errorf("cost 9: %+v, %d takes; want allowed with 972 left, 6 takes", d, remote.allows.Load())
	}
	// Reset drops the lease and resets the remote.
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Keys != 0 || st.Dropped != 7 {
		t.Errorf("after Reset: Stats() = %+v, want 0 keys, 7 dropped", st)
	}
	if d, _ := l.Allow(ctx, "k"); d.Remaining != 999 {
		t.Errorf("after Reset: %+v, want 999 left", d)
	}
}

// A key near its limit is not starved by the batch: when the batch is
// denied, the units missing are asked for; when those are denied, the
// remote limiter's Decision says when to come back.
func TestLeasedNearLimit(t *testing.T) {
	p := core.Policy{Limit: 10, Window: time.Second} // a unit per 100ms
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newCounting(t, p, clock)
	other := mustLeased(t, remote, 100, hotkey.WithClock(clock))
	l := mustLeased(t, remote, 100, hotkey.WithClock(clock))
	// The batch is capped at the capacity, 10.
	for range 7 {
		if d, _ := l.Allow(ctx, "k"); !d.Allowed {
			t.Fatal("denied")
		}
	}
	// l took 1+2+4 = 7, 3 are left. The other instance takes 1, then 2,
	// spends its lease, then asks for 4: denied, so it asks for 1: denied.
	for i, want := range []bool{true, true, true, false} {
		d, err := other.Allow(ctx, "k")
		if err != nil || d.Allowed != want {
			t.Fatalf("other request %d: %+v, %v; want allowed=%v", i, d, err, want)
		}
		if !want && (d.RetryAfter != 100*time.Millisecond || d.Remaining != 0) {
			t.Errorf("denied: %+v, want RetryAfter 100ms, nothing left", d)
		}
	}
	if st := other.Stats(); st.Takes != 4 {
		t.Errorf("other: %d takes, want 4 (1, 2, 4 denied, 1 denied)", st.Takes)
	}
	clock.Advance(100 * time.Millisecond)
	if d, _ := other.Allow(ctx, "k"); !d.Allowed {
		t.Errorf("after RetryAfter: %+v, want allowed", d)
	}
}

// Eight goroutines on one instance and a new key: exactly the limit is
// allowed, however the leases are taken (a single instance never
// over-admits from a standing start).
func TestLeasedRace(t *testing.T) {
	p := core.Policy{Limit: 100, Window: time.Hour}
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newCounting(t, p, clock)
	l := mustLeased(t, remote, 10, hotkey.WithClock(clock))
	got := limitercheck.CountAllowed(t, 8, 50, func(int) (core.Decision, error) { return l.Allow(ctx, "shared") })
	if got != 100 {
		t.Errorf("%d of 400 allowed, want exactly 100", got)
	}
}

func TestLeasedErrors(t *testing.T) {
	p := core.Policy{Limit: 10, Window: time.Second}
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newCounting(t, p, clock)
	for _, tt := range []struct {
		name  string
		batch int64
		opts  []hotkey.LeaseOption
	}{
		{"batch 0", 0, nil},
		{"WithLeaseTime(0)", 10, []hotkey.LeaseOption{hotkey.WithLeaseTime(0)}},
		{"WithClock(nil)", 10, []hotkey.LeaseOption{hotkey.WithClock(nil)}},
		{"WithMaxKeys(0)", 10, []hotkey.LeaseOption{hotkey.WithMaxKeys(0)}},
	} {
		if _, err := hotkey.NewLeased(remote, tt.batch, tt.opts...); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
	if _, err := hotkey.NewLeased(nil, 10); err == nil {
		t.Error("NewLeased(nil): no error")
	}
	leaky := newCounting(t, core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: time.Second}, clock)
	if _, err := hotkey.NewLeased(leaky, 10); err == nil {
		t.Error("a leaky bucket: no error")
	}
	l := mustLeased(t, remote, 5, hotkey.WithClock(clock))
	if _, err := l.AllowN(ctx, "", 1); !errors.Is(err, core.ErrEmptyKey) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := l.Peek(ctx, "k", 0); !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("cost 0: %v", err)
	}
	if _, err := l.AllowN(ctx, "k", 11); !errors.Is(err, core.ErrCostTooHigh) {
		t.Errorf("cost 11: %v", err)
	}
	// A request waiting for the key's lock honours its context.
	f := &flakystore.Store{Memory: remote.Memory, Gate: make(chan struct{}), Entered: make(chan struct{})}
	slow := mustLeased(t, f, 5, hotkey.WithClock(clock))
	go slow.Allow(ctx, "k")
	<-f.Entered
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := slow.Allow(cctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while waiting: %v, want context.Canceled", err)
	}
	close(f.Gate)
}

// WithMaxKeys bounds the keys held; an evicted lease's units are dropped.
func TestLeasedMaxKeys(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	remote := newCounting(t, core.Policy{Limit: 100, Window: time.Hour}, clock)
	l := mustLeased(t, remote, 10, hotkey.WithClock(clock), hotkey.WithMaxKeys(2))
	for _, k := range []string{"a", "a", "b", "c"} {
		l.Allow(ctx, k)
	}
	if st := l.Stats(); st.Keys != 2 || st.Dropped != 1 {
		t.Errorf("Stats() = %+v, want 2 keys, 1 unit dropped (a's)", st)
	}
}

// Remote calls per 10,000 allowed requests, with and without leases, for
// one instance and for four sharing the key, below the key's limit (a key
// at 20,000 per minute).
func TestLeasedCalls(t *testing.T) {
	p := core.Policy{Limit: 20000, Window: time.Minute}
	for _, instances := range []int{1, 4} {
		clock := core.NewManualClock(limitercheck.StartTime())
		remote := newCounting(t, p, clock)
		var ls []*hotkey.Leased
		for range instances {
			ls = append(ls, mustLeased(t, remote, 100, hotkey.WithClock(clock)))
		}
		// 300 requests a second in all, round robin over the instances.
		allowed := 0
		for i := 0; allowed < 10000; i++ {
			d, err := ls[i%instances].Allow(ctx, "hot")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
			clock.Advance(time.Second / 300)
		}
		calls := remote.allows.Load()
		t.Logf("%d instance(s), batch 100: %d remote calls per 10,000 allowed (%.0fx fewer than 10,000)",
			instances, calls, 10000/float64(calls))
		if calls*50 > 10000 {
			t.Errorf("%d instance(s): %d remote calls per 10,000 allowed, want at most 200", instances, calls)
		}
	}
}

// Four instances with leases of up to 100 hammer one key through phases
// below, above and far above its limit, and a quiet spell: in no span of
// time is the key allowed more than the policy allows plus 4×100.
func TestLeasedOverAdmission(t *testing.T) {
	p := core.Policy{Limit: 6000, Window: time.Minute, Burst: 500} // 100/s
	const step = time.Millisecond
	for _, tt := range []struct {
		batch   int64
		denials bool // a DenialCache in front of each instance's lease
	}{{1, false}, {100, false}, {100, true}} {
		batch := tt.batch
		clock := core.NewManualClock(limitercheck.StartTime())
		remote := newCounting(t, p, clock)
		var ls []core.Limiter
		var leases []*hotkey.Leased
		for range 4 {
			l := mustLeased(t, remote, batch, hotkey.WithClock(clock))
			leases = append(leases, l)
			if tt.denials {
				ls = append(ls, mustDenialCache(t, l, hotkey.WithClock(clock)))
			} else {
				ls = append(ls, l)
			}
		}
		var admitted []int64
		var total int64
		// Requests per ms per instance in each 1 s phase.
		for _, perMs := range []float64{0.02, 0.02, 0.1, 0.1, 0, 0.5, 0.02, 0, 0.3, 0.3} {
			acc := 0.0
			for range 1000 {
				var a int64
				acc += perMs
				for ; acc >= 1; acc-- {
					for _, l := range ls {
						d, err := l.AllowN(ctx, "hot", 1)
						if err != nil {
							t.Fatal(err)
						}
						if d.Allowed {
							a++
						}
					}
				}
				admitted = append(admitted, a)
				total += a
				clock.Advance(step)
			}
		}
		over := limitercheck.OverAdmission(p, step, admitted)
		var dropped uint64
		for _, l := range leases {
			dropped += l.Stats().Dropped
		}
		t.Logf("batch %d, denial cache %v: %d allowed in 10 s, worst over-admission %d (bound 4x%d = %d), %d units dropped, %d remote calls",
			batch, tt.denials, total, over, batch, 4*batch, dropped, remote.allows.Load())
		if over > 4*batch {
			t.Errorf("batch %d: over-admitted by %d in some span, want at most %d", batch, over, 4*batch)
		}
	}
}

// A remote whose Policy method returns the zero Policy (a DenialCache over
// a store that reports none) has an unknown policy, not a capacity of 0:
// units are still taken in batches, learning the policy from the remote's
// Decisions.
func TestLeasedUnknownPolicy(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	p := core.Policy{Name: "api", Limit: 100, Window: time.Minute}
	store := newCounting(t, p, clock)
	l := mustLeased(t, mustDenialCache(t, policyless{store}, hotkey.WithClock(clock)), 8, hotkey.WithClock(clock))
	for i := range 15 {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v; want allowed", i, d, err)
		}
	}
	// Takes of 1, 2, 4, 8: four remote calls for 15 requests.
	if got := store.allows.Load(); got != 4 {
		t.Errorf("%d remote AllowN calls for 15 requests, want 4 (batches of 1, 2, 4, 8)", got)
	}
	if got := l.Policy(); got != p {
		t.Errorf("Policy() = %v, want %v, learned from the remote's Decisions", got, p)
	}
}
