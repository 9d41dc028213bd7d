package observe_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/ratekit/ratekit/observe"
)

// slowStore decides by a Memory limiter and advances the clock by lag on
// every call, so that an observer on the same clock measures exactly lag.
type slowStore struct {
	*core.Memory
	clock *core.ManualClock
	lag   time.Duration
	err   error // returned instead of deciding when set
}

func (s *slowStore) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	s.clock.Advance(s.lag)
	if s.err != nil {
		return core.Decision{}, s.err
	}
	return s.Memory.AllowN(ctx, key, n)
}

func (s *slowStore) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	s.clock.Advance(s.lag)
	if s.err != nil {
		return core.Decision{}, s.err
	}
	return s.Memory.Peek(ctx, key, n)
}

func (s *slowStore) Reset(ctx context.Context, key string) error {
	s.clock.Advance(s.lag)
	if s.err != nil {
		return s.err
	}
	return s.Memory.Reset(ctx, key)
}

// noPolicy hides a limiter's Policy method.
type noPolicy struct{ core.Limiter }

func mustObserved(t testing.TB, l core.Limiter, obs observe.Observer, opts ...observe.Option) *observe.Limiter {
	t.Helper()
	o, err := observe.New(l, obs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mustMemory(t testing.TB, p core.Policy, clock core.Clock) *core.Memory {
	t.Helper()
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestObservedEvents(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	store := &slowStore{Memory: mustMemory(t, core.Policy{Name: "api", Limit: 2, Window: time.Minute}, clock), clock: clock, lag: 3 * time.Millisecond}
	rec := &recorder{}
	class := func(key string) string {
		if strings.HasPrefix(key, "sk_") {
			return "api-key"
		}
		return "ip"
	}
	l := mustObserved(t, store, rec, observe.WithClock(clock), observe.WithKeyClass(class))
	if got := l.Policy().Name; got != "api" {
		t.Errorf("Policy().Name = %q, want api", got)
	}
	ms := time.Millisecond
	steps := []struct {
		do   func() (core.Decision, error)
		want eventSummary
	}{
		{func() (core.Decision, error) { return l.AllowN(ctx, "203.0.113.7", 1) },
			eventSummary{Op: observe.OpAllow, Policy: "api", KeyClass: "ip", Cost: 1, Outcome: observe.OutcomeAllowed, Remaining: 1, Latency: 3 * ms}},
		{func() (core.Decision, error) { return l.Peek(ctx, "203.0.113.7", 2) },
			eventSummary{Op: observe.OpPeek, Policy: "api", KeyClass: "ip", Cost: 2, Outcome: observe.OutcomeDenied, Remaining: 1, Latency: 3 * ms}},
		{func() (core.Decision, error) { return l.Allow(ctx, "sk_live_1") },
			eventSummary{Op: observe.OpAllow, Policy: "api", KeyClass: "api-key", Cost: 1, Outcome: observe.OutcomeAllowed, Remaining: 1, Latency: 3 * ms}},
		{func() (core.Decision, error) { return l.AllowN(ctx, "sk_live_1", 2) },
			eventSummary{Op: observe.OpAllow, Policy: "api", KeyClass: "api-key", Cost: 2, Outcome: observe.OutcomeDenied, Remaining: 1, Latency: 3 * ms}},
		{func() (core.Decision, error) { return l.AllowN(ctx, "sk_live_1", 3) },
			eventSummary{Op: observe.OpAllow, Policy: "api", KeyClass: "api-key", Cost: 3, Outcome: observe.OutcomeError, Latency: 3 * ms,
				Err: "core: cost 3, at most 2: cost exceeds what the policy can ever allow"}},
		{func() (core.Decision, error) { return core.Decision{}, l.Reset(ctx, "sk_live_1") },
			eventSummary{Op: observe.OpReset, Policy: "api", KeyClass: "api-key", Outcome: observe.OutcomeAllowed, Latency: 3 * ms}},
	}
	for i, s := range steps {
		d, err := s.do()
		ev := rec.Take()
		checkEvents(t, ev, []eventSummary{s.want})
		if len(ev) == 1 && (ev[0].Decision != d || ev[0].Err != err) {
			t.Errorf("step %d: event carries %+v, %v; the call returned %+v, %v", i, ev[0].Decision, ev[0].Err, d, err)
		}
	}
}

func TestObservedKeyAndPolicy(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	m := mustMemory(t, core.Policy{Name: "login", Limit: 1, Window: time.Minute}, clock)
	rec := &recorder{}

	// Without a Policy method, each Decision names the policy; the raw key
	// comes only with WithRawKey.
	l := mustObserved(t, noPolicy{m}, rec, observe.WithClock(clock), observe.WithRawKey())
	l.Allow(ctx, "ana@example.com")
	// WithPolicyName overrides the limiter's name; no key by default.
	l2 := mustObserved(t, m, rec, observe.WithClock(clock), observe.WithPolicyName("login-v2"))
	l2.Allow(ctx, "ana@example.com")
	checkEvents(t, rec.Take(), []eventSummary{
		{Op: observe.OpAllow, Policy: "login", Key: "ana@example.com", Cost: 1, Outcome: observe.OutcomeAllowed},
		{Op: observe.OpAllow, Policy: "login-v2", Cost: 1, Outcome: observe.OutcomeDenied},
	})
}

func TestObservedErrors(t *testing.T) {
	m := mustMemory(t, core.Policy{Limit: 1, Window: time.Minute}, core.SystemClock{})
	obs := observe.ObserverFunc(func(context.Context, observe.Event) {})
	for _, tt := range []struct {
		name string
		l    core.Limiter
		obs  observe.Observer
		opts []observe.Option
		want string
	}{
		{"nil limiter", nil, obs, nil, "observe: New: a limiter is required"},
		{"nil observer", m, nil, nil, "observe: New: an observer is required"},
		{"nil option", m, obs, []observe.Option{nil}, "observe: New: option 1 is nil"},
		{"nil clock", m, obs, []observe.Option{observe.WithClock(nil)}, "observe: New: WithClock(nil): a clock is required"},
	} {
		_, err := observe.New(tt.l, tt.obs, tt.opts...)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
	if _, err := observe.NewShadow(nil, m, obs); err == nil {
		t.Error("NewShadow(nil, ...) succeeded")
	}
	if _, err := observe.NewShadow(m, nil, obs); err == nil {
		t.Error("NewShadow(..., nil, ...) succeeded")
	}
}

func TestObservedConformance(t *testing.T) {
	obs := observe.Observers(&recorder{}, observe.NewSlog(nil, nil))
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustObserved(t, mustMemory(t, p, clock), obs, observe.WithClock(clock))
	})
	// On a clock of its own, the observer times the call itself, and the
	// Memory decides by its clock: the other path.
	t.Run("own clock", func(t *testing.T) {
		limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
			return mustObserved(t, mustMemory(t, p, clock), obs, observe.WithClock(core.NewManualClock(time.Unix(0, 0))))
		})
	})
}

// Over a Memory on the same stopped clock, the latency is exactly 0.
func TestObservedLatencyOnTheMemorysClock(t *testing.T) {
	clock := core.NewManualClock(time.Unix(1_800_000_000, 0))
	m := mustMemory(t, core.Policy{Limit: 1, Window: time.Minute}, clock)
	var got []time.Duration
	l := mustObserved(t, m, observe.ObserverFunc(func(_ context.Context, e observe.Event) { got = append(got, e.Latency) }), observe.WithClock(clock))
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("AllowN: %+v, %v", d, err)
	}
	if d, _ := l.Peek(ctx, "k", 1); d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("Peek: %+v, want denied for a minute", d)
	}
	if len(got) != 2 || got[0] != 0 || got[1] != 0 {
		t.Fatalf("latencies %v, want two of 0 on a stopped clock", got)
	}
}

// TestObservedAllocs checks that observing costs no allocation beyond the
// observer's own: the hot path of a hook that counts stays allocation-free.
func TestObservedAllocs(t *testing.T) {
	m := mustMemory(t, core.Policy{Limit: core.MaxLimit, Window: time.Millisecond}, core.SystemClock{})
	var n int
	l := mustObserved(t, m, observe.ObserverFunc(func(_ context.Context, e observe.Event) { n += int(e.Cost) }),
		observe.WithKeyClass(func(string) string { return "ip" }))
	if a := testing.AllocsPerRun(100, func() { l.AllowN(ctx, "203.0.113.7", 1) }); a != 0 {
		t.Errorf("Observed.AllowN: %v allocs per run, want 0", a)
	}
}

func TestObserveFailover(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	store := newFlaky(t, core.Policy{Name: "api", Limit: 10, Window: time.Minute}, clock)
	rec := &recorder{}
	var hooked []string
	own := observe.ObserverFunc(func(_ context.Context, e observe.Event) { // a hook of one's own, kept
		if e.Err != nil {
			hooked = append(hooked, e.Err.Error())
		} else {
			hooked = append(hooked, fmt.Sprint("open=", e.Op == observe.OpBreakerOpen))
		}
	})
	f := mustFailover(t, store, append([]core.FailoverOption{core.WithClock(clock), core.WithBreaker(2, 5*time.Second)},
		observe.FailoverHooks(observe.Observers(own, rec), "api")...)...)
	if f.BreakerOpen() {
		t.Fatal("breaker open before any request")
	}
	store.Down.Store(true)
	for range 3 { // two errors open the breaker; the third is not sent
		if _, err := f.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if !f.BreakerOpen() {
		t.Error("breaker closed after 2 errors")
	}
	clock.Advance(5 * time.Second)
	f.Allow(ctx, "k") // the probe fails: open for another cool-down, no transition
	store.Down.Store(false)
	clock.Advance(5 * time.Second)
	f.Allow(ctx, "k") // the probe succeeds: closed
	f.Allow(ctx, "k")
	if f.BreakerOpen() {
		t.Error("breaker open after a successful probe")
	}
	errText := "flaky: " + errDown.Error()
	checkEvents(t, rec.Take(), []eventSummary{
		{Op: observe.OpStoreError, Policy: "api", Outcome: observe.OutcomeError, Err: errText},
		{Op: observe.OpStoreError, Policy: "api", Outcome: observe.OutcomeError, Err: errText},
		{Op: observe.OpBreakerOpen, Policy: "api"},
		{Op: observe.OpStoreError, Policy: "api", Outcome: observe.OutcomeError, Err: errText},
		{Op: observe.OpBreakerClose, Policy: "api"},
	})
	want := []string{errText, errText, "open=true", errText, "open=false"}
	if !reflect.DeepEqual(hooked, want) {
		t.Errorf("earlier hooks saw %q, want %q", hooked, want)
	}
}

// TestBreakerChangeRace checks that racing failures report one opening.
func TestBreakerChangeRace(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	store := newFlaky(t, core.Policy{Limit: 10, Window: time.Minute}, clock)
	store.Down.Store(true)
	var mu sync.Mutex
	opens := 0
	f := mustFailover(t, store, core.WithClock(clock), core.WithBreaker(1, time.Minute),
		core.WithBreakerHook(func(open bool) {
			mu.Lock()
			if open {
				opens++
			}
			mu.Unlock()
		}))
	limitercheck.Race(8, func(int) { f.Allow(ctx, "k") })
	if opens != 1 {
		t.Errorf("breaker reported open %d times, want 1", opens)
	}
}

func TestOutcomeAndOpNames(t *testing.T) {
	var got []string
	for o := range observe.OutcomeError + 2 {
		got = append(got, o.String())
	}
	for op := range observe.OpRefund + 2 {
		got = append(got, op.String())
	}
	want := []string{"allowed", "denied", "error", "Outcome(3)",
		"allow", "peek", "reset", "store-error", "breaker-open", "breaker-close", "refund", "Op(7)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("names = %q, want %q", got, want)
	}
}

func TestCallerError(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{ctx, fmt.Errorf("x: %w", core.ErrCostTooHigh), true},
		{ctx, core.ErrEmptyKey, true},
		{ctx, core.ErrInvalidCost, true},
		{ctx, fmt.Errorf("core: %w", core.ErrInvalidElapsed), true},
		{ctx, fmt.Errorf("core: %w", core.ErrNoRefund), true},
		{done, fmt.Errorf("redisstore: %w", context.Canceled), true},
		{nil, core.ErrEmptyKey, true},
		// A store's own deadline, the caller's context going on: the store's.
		{ctx, fmt.Errorf("redisstore: %w", context.DeadlineExceeded), false},
		{nil, context.Canceled, false},
		{ctx, errDown, false},
		{done, nil, false},
		{ctx, errors.New("x"), false},
	} {
		if got := core.CallerError(tt.ctx, tt.err); got != tt.want {
			t.Errorf("CallerError(%v, %v) = %v, want %v", tt.ctx, tt.err, got, tt.want)
		}
	}
}

func TestObserversFanOut(t *testing.T) {
	a, b := &recorder{}, &recorder{}
	obs := observe.Observers(a, nil, b)
	obs.Observe(ctx, observe.Event{Op: observe.OpReset, Policy: "p"})
	if len(a.Take()) != 1 || len(b.Take()) != 1 {
		t.Error("each observer should see the event once")
	}
	if one := observe.Observers(nil, a); one != observe.Observer(a) {
		t.Errorf("Observers of one = %T, want the observer itself", one)
	}
}

// An Observed layered limiter keeps its layers: the HTTP middleware writes
// one RateLimit member per layer, and the events are those of AllowN.
func TestObservedLayersInHeaders(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	l := layeredOf(t, clock,
		core.Policy{Name: "burst", Limit: 2, Window: time.Second},
		core.Policy{Name: "daily", Algorithm: core.FixedWindow, Limit: 1000, Window: 24 * time.Hour})
	rec := &recorder{}
	e := httplimit.MustNew(mustObserved(t, l, rec, observe.WithClock(clock)))
	const policy = `"burst";q=2;w=1, "daily";q=1000;w=86400`
	for i, want := range []httpStep{
		{Served: true, Policy: policy, RateLimit: `"burst";r=1;t=1, "daily";r=999;t=43200`},
		{Served: true, Policy: policy, RateLimit: `"burst";r=0;t=1, "daily";r=998;t=43200`},
		{Served: false, Policy: policy, RateLimit: `"burst";r=0;t=1, "daily";r=998;t=43200`},
	} {
		checkHTTP(t, e, i, want)
	}
	checkOps(t, rec.Take(), []string{"allow burst allowed", "allow burst allowed", "allow burst denied"})
}

// Over a limiter that is not layered, AllowLayers and PeekLayers return
// one layer: the Decision of AllowN and Peek.
func TestObservedOneLayer(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	rec := &recorder{}
	o := mustObserved(t, mustMemory(t, core.Policy{Name: "api", Limit: 2, Window: time.Minute}, clock), rec, observe.WithClock(clock))
	ld, err := o.PeekLayers(ctx, "k", 1)
	if err != nil || !ld.Allowed || ld.Remaining != 2 || ld.Layer != 0 || len(ld.Layers) != 1 || ld.Layers[0] != ld.Decision {
		t.Errorf("PeekLayers: %+v, %v; want one allowed layer, Remaining 2", ld, err)
	}
	ld, err = o.AllowLayers(ctx, "k", 3)
	if !errors.Is(err, core.ErrCostTooHigh) || ld.Layers != nil {
		t.Errorf("AllowLayers of 3 over a limit of 2: %+v, %v; want ErrCostTooHigh, no layers", ld, err)
	}
	checkOps(t, rec.Take(), []string{"peek api allowed", "allow api error"})
}

// checkOps compares the op, policy and outcome of each event with want.
func checkOps(t *testing.T, got []observe.Event, want []string) {
	t.Helper()
	g := make([]string, len(got))
	for i, e := range got {
		g[i] = fmt.Sprintf("%v %s %v", e.Op, e.Policy, e.Outcome())
	}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("events:\n got %q\nwant %q", g, want)
	}
}
