package rules

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
)

// eventLog is an observer that writes each event on a line.
type eventLog struct {
	mu    sync.Mutex
	lines []string
}

func (r *eventLog) Observe(_ context.Context, e observe.Event) {
	line := fmt.Sprintf("%s %s/%s %s cost=%d", e.Op, e.Rule, e.Policy, e.Outcome(), e.Cost)
	if e.Op == observe.OpAllow || e.Op == observe.OpPeek {
		line += fmt.Sprintf(" left=%d latency=%s", e.Decision.Remaining, e.Latency)
	}
	if e.Shadow {
		line += " shadow"
	}
	if e.Err != nil {
		line += " err=" + e.Err.Error()
	}
	r.mu.Lock()
	r.lines = append(r.lines, line)
	r.mu.Unlock()
}

// take returns the lines written since the last take.
func (r *eventLog) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.lines, "\n")
	r.lines = nil
	return s
}

// An observed Limiter reports one event per limit a request reached:
// enforced limits with their own layer's Decision, shadow limits marked,
// key errors on the limit whose key is missing, refunds and resets.
func TestLimiterObserved(t *testing.T) {
	clock := core.NewManualClock(limiterStart)
	var log eventLog
	l, err := NewObservedLimiter(mustParseSet(t, decideFile), &log, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	var d Decision
	for i, tc := range []struct {
		route, user string
		refund      bool
		want        string
	}{
		{"/login", "a", false, `allow login/per-user allowed cost=1 left=2 latency=0s
allow login/per-ip allowed cost=2 left=3 latency=0s
allow login/watch allowed cost=1 left=1 latency=0s shadow`},
		{"/login", "b", true, `allow login/per-user allowed cost=1 left=2 latency=0s
allow login/per-ip allowed cost=2 left=1 latency=0s
allow login/watch allowed cost=1 left=0 latency=0s shadow
refund login/per-user allowed cost=1
refund login/per-ip allowed cost=2
refund login/watch allowed cost=1 shadow`},
		{"/login", "b", false, `allow login/per-user allowed cost=1 left=2 latency=0s
allow login/per-ip allowed cost=2 left=1 latency=0s
allow login/watch allowed cost=1 left=0 latency=0s shadow`},
		// per-ip refuses; per-user would have allowed, and says so; the
		// shadow limit is peeked. Refund gives nothing back.
		{"/login", "c", true, `allow login/per-user allowed cost=1 left=3 latency=0s
allow login/per-ip denied cost=2 left=1 latency=0s
peek login/watch denied cost=1 left=0 latency=0s shadow`},
		// No tenant: per-user's key error; per-ip is not reached.
		{"/login", "", false, `allow login/per-user error cost=1 left=0 latency=0s err=rules: limit "login/per-user": key: X-Key: keyfunc: no key`},
		{"/dry", "", false, `allow dry/only allowed cost=1 left=0 latency=0s shadow`},
		{"/dry", "", false, `allow dry/only denied cost=1 left=0 latency=0s shadow`},
		// No rule matches: nothing decided, nothing reported.
		{"/other", "a", false, ``},
	} {
		err := l.Decide(ctx, tenantRequest(tc.route, tc.user), &d)
		if tc.refund {
			if err := d.Refund(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := log.take(); got != tc.want {
			t.Errorf("request %d (%s %q, err %v): events\n%s\nwant\n%s", i, tc.route, tc.user, err, got, tc.want)
		}
	}
	if err := l.Reset(ctx, "203.0.113.7"); err != nil {
		t.Fatal(err)
	}
	want := `reset login/per-user allowed cost=0
reset login/per-ip allowed cost=0
reset login/watch allowed cost=0 shadow
reset dry/only allowed cost=0 shadow`
	if got := log.take(); got != want {
		t.Errorf("Reset: events\n%s\nwant\n%s", got, want)
	}
}

// The latency of the enforced limits' decision is measured on the
// limiters' clock, one for all of them; shadow limits report none.
func TestLimiterObservedLatency(t *testing.T) {
	clock := core.NewManualClock(limiterStart)
	var lat []time.Duration
	obs := observe.ObserverFunc(func(_ context.Context, e observe.Event) { lat = append(lat, e.Latency) })
	l, err := NewObservedLimiter(mustParseSet(t, decideFile), obs, core.WithClock(tickClock{clock, time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var d Decision
	before := clock.Now()
	if err := l.Decide(context.Background(), tenantRequest("/login", "a"), &d); err != nil {
		t.Fatal(err)
	}
	// The clock moves on by a step at each reading: the decision's own
	// readings fall between Decide's two.
	took := clock.Now().Sub(before) - 2*time.Millisecond
	if len(lat) != 3 || lat[0] <= 0 || lat[0] > took || lat[1] != lat[0] || lat[2] != 0 {
		t.Errorf("latencies %v, want two equal, positive and at most %v, then 0", lat, took)
	}
}

// tickClock is a manual clock that moves on by step at every reading after
// the first of a Decide's: the layered decision reads it once itself.
type tickClock struct {
	clock *core.ManualClock
	step  time.Duration
}

func (c tickClock) Now() time.Time {
	now := c.clock.Now()
	c.clock.Advance(c.step)
	return now
}

func TestNewObservedLimiterErrors(t *testing.T) {
	set := mustParseSet(t, decideFile)
	for _, tc := range []struct {
		src  Loader
		obs  observe.Observer
		want string
	}{
		{set, nil, "rules: NewObservedLimiter: the observer is nil"},
		{nil, &eventLog{}, "rules: NewObservedLimiter: the loader is nil"},
	} {
		if _, err := NewObservedLimiter(tc.src, tc.obs); err == nil || err.Error() != tc.want {
			t.Errorf("NewObservedLimiter: %v, want %s", err, tc.want)
		}
	}
}

// countObserver counts events without allocating, as a metrics observer
// does.
type countObserver struct{ n int }

func (c *countObserver) Observe(context.Context, observe.Event) { c.n++ }

// Reporting costs a decision no allocation of its own.
func TestLimiterObservedAllocs(t *testing.T) {
	var obs countObserver
	l, err := NewObservedLimiter(mustParseSet(t, decideFile), &obs, core.WithClock(core.NewManualClock(limiterStart)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	req := tenantRequest("/login", "k")
	var d Decision
	l.Decide(context.Background(), req, &d)
	if n := testing.AllocsPerRun(100, func() { l.Decide(context.Background(), req, &d) }); n != 0 {
		t.Errorf("Decide: %v allocs, want 0", n)
	}
	if obs.n != 3*102 {
		t.Errorf("%d events, want %d", obs.n, 3*102)
	}
}

func BenchmarkLimiterDecideObserved(b *testing.B) {
	for _, observed := range []bool{false, true} {
		b.Run(fmt.Sprintf("observed=%v", observed), func(b *testing.B) {
			set := mustParseSet(b, apiFile("1000000000/1h", "tenant", ""))
			var l *Limiter
			var err error
			if observed {
				l, err = NewObservedLimiter(set, &countObserver{})
			} else {
				l, err = NewLimiter(set)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			req := tenantRequest("/x", "k")
			var d Decision
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Decide(context.Background(), req, &d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// tally counts events by op, limit and outcome.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tally) Observe(_ context.Context, e observe.Event) {
	c.mu.Lock()
	c.n[fmt.Sprintf("%s %s/%s %s", e.Op, e.Rule, e.Policy, e.Outcome())]++
	c.mu.Unlock()
}

// Requests in parallel from one address, each of its own user: every
// event is reported once, and the counts are exact whatever the order.
func TestLimiterObservedParallel(t *testing.T) {
	obs := &tally{n: map[string]int{}}
	l, err := NewObservedLimiter(mustParseSet(t, decideFile), obs, core.WithClock(core.NewManualClock(limiterStart)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const goroutines, each = 8, 50
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			var d Decision
			for i := range each {
				if err := l.Decide(context.Background(), tenantRequest("/login", fmt.Sprintf("u%d-%d", g, i)), &d); err != nil {
					t.Error(err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	// per-ip (5 a minute, cost 2) lets 2 requests through; per-user
	// never refuses a new user; watch (2 a minute) counts the 2 and is
	// peeked, empty, for the others.
	const n = goroutines * each
	want := map[string]int{
		"allow login/per-user allowed": n,
		"allow login/per-ip allowed":   2,
		"allow login/per-ip denied":    n - 2,
		"allow login/watch allowed":    2,
		"peek login/watch denied":      n - 2,
	}
	if fmt.Sprint(obs.n) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", obs.n, want)
	}
}
