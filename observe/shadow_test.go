package observe_test

import (
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/ratekit/ratekit/observe"
)

func mustShadow(t testing.TB, enforced, candidate core.Limiter, obs observe.Observer, opts ...observe.Option) *observe.Shadow {
	t.Helper()
	s, err := observe.NewShadow(enforced, candidate, obs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestShadowSteps runs a stricter candidate (2 per minute) next to the
// enforced policy (3 per minute): every request gets the enforced decision,
// and the candidate decides each one as if it alone were enforcing.
func TestShadowSteps(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	enforced := mustMemory(t, core.Policy{Name: "api", Limit: 3, Window: time.Minute, Algorithm: core.FixedWindow}, clock)
	candidate := mustMemory(t, core.Policy{Name: "api-v2", Limit: 2, Window: time.Minute, Algorithm: core.FixedWindow}, clock)
	rec := &recorder{}
	s := mustShadow(t, enforced, candidate, rec, observe.WithClock(clock))
	if got := s.Policy().Name; got != "api" {
		t.Errorf("Policy().Name = %q, want the enforced policy's, api", got)
	}
	steps := []struct {
		op                  string
		n                   int64
		wantAllowed         bool  // the enforced decision, returned
		wantRemaining       int64 // the enforced Remaining
		wantShadow          observe.Outcome
		wantShadowRemaining int64
	}{
		{"allow", 1, true, 2, observe.OutcomeAllowed, 1},
		{"peek", 2, true, 2, observe.OutcomeDenied, 1},
		{"allow", 1, true, 1, observe.OutcomeAllowed, 0},
		{"allow", 1, true, 0, observe.OutcomeDenied, 0},
		{"allow", 1, false, 0, observe.OutcomeDenied, 0},
		{"allow", 3, false, 0, observe.OutcomeError, 0}, // above the candidate's capacity
	}
	for i, st := range steps {
		var d core.Decision
		var err error
		op := observe.OpAllow
		if st.op == "peek" {
			op = observe.OpPeek
			d, err = s.Peek(ctx, "k", st.n)
		} else {
			d, err = s.AllowN(ctx, "k", st.n)
		}
		if err != nil || d.Allowed != st.wantAllowed || d.Remaining != st.wantRemaining || d.Policy.Name != "api" {
			t.Errorf("step %d: %s(%d) = %+v, %v; want the enforced Allowed %v, Remaining %d",
				i, st.op, st.n, d, err, st.wantAllowed, st.wantRemaining)
		}
		ev := rec.Take()
		if len(ev) != 1 {
			t.Fatalf("step %d: %d events, want 1", i, len(ev))
		}
		e := ev[0]
		if e.Op != op || !e.Shadow || e.Policy != "api-v2" || e.Cost != st.n || e.Outcome() != st.wantShadow || e.Decision.Remaining != st.wantShadowRemaining {
			t.Errorf("step %d: shadow event %+v, want op %v, policy api-v2, outcome %v, Remaining %d",
				i, e, op, st.wantShadow, st.wantShadowRemaining)
		}
	}
	if err := s.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, rec.Take(), []eventSummary{{Op: observe.OpReset, Policy: "api-v2", Outcome: observe.OutcomeAllowed, Shadow: true}})
	for _, l := range []*core.Memory{enforced, candidate} {
		if d, _ := l.Peek(ctx, "k", 1); d.Remaining != l.Policy().Limit {
			t.Errorf("after Reset, %s has %d left, want %d", l.Policy().Name, d.Remaining, l.Policy().Limit)
		}
	}
}

// TestShadowCandidateError checks that a broken candidate changes nothing
// for the caller: its error is reported, never returned.
func TestShadowCandidateError(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	enforced := mustMemory(t, core.Policy{Name: "api", Limit: 3, Window: time.Minute}, clock)
	broken := &slowStore{Memory: mustMemory(t, core.Policy{Name: "api-redis", Limit: 3, Window: time.Minute}, clock), clock: clock, err: errDown}
	rec := &recorder{}
	s := mustShadow(t, enforced, broken, rec, observe.WithClock(clock))
	d, err := s.Allow(ctx, "k")
	if err != nil || !d.Allowed {
		t.Errorf("Allow = %+v, %v; want allowed, no error", d, err)
	}
	if err := s.Reset(ctx, "k"); err != nil {
		t.Errorf("Reset = %v, want nil", err)
	}
	checkEvents(t, rec.Take(), []eventSummary{
		{Op: observe.OpAllow, Policy: "api-redis", Cost: 1, Outcome: observe.OutcomeError, Err: errDown.Error(), Shadow: true},
		{Op: observe.OpReset, Policy: "api-redis", Outcome: observe.OutcomeError, Err: errDown.Error(), Shadow: true},
	})
}

func TestShadowConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		half := p
		half.Limit = max(p.Limit/2, 1)
		half.Burst = 0
		return mustShadow(t, mustMemory(t, p, clock), mustMemory(t, half, clock), &recorder{}, observe.WithClock(clock))
	})
}

// A Shadow enforcing a layered limiter keeps its layers: the HTTP
// middleware writes one RateLimit member per enforced layer, and the
// candidate is still asked and reported.
func TestShadowLayersInHeaders(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	enforced := layeredOf(t, clock,
		core.Policy{Name: "burst", Limit: 2, Window: time.Second},
		core.Policy{Name: "daily", Algorithm: core.FixedWindow, Limit: 1000, Window: 24 * time.Hour})
	candidate := mustMemory(t, core.Policy{Name: "v2", Limit: 1, Window: time.Second}, clock)
	rec := &recorder{}
	e := httplimit.MustNew(mustShadow(t, enforced, candidate, rec, observe.WithClock(clock)))
	const policy = `"burst";q=2;w=1, "daily";q=1000;w=86400`
	for i, want := range []httpStep{
		{Served: true, Policy: policy, RateLimit: `"burst";r=1;t=1, "daily";r=999;t=43200`},
		{Served: true, Policy: policy, RateLimit: `"burst";r=0;t=1, "daily";r=998;t=43200`},
	} {
		checkHTTP(t, e, i, want)
	}
	checkOps(t, rec.Take(), []string{"allow v2 allowed", "allow v2 denied"})

	// PeekLayers asks the candidate's Peek.
	s := mustShadow(t, enforced, candidate, rec, observe.WithClock(clock))
	ld, err := s.PeekLayers(ctx, "k", 1)
	if err != nil || !ld.Allowed || len(ld.Layers) != 2 {
		t.Errorf("PeekLayers: %+v, %v; want allowed, 2 layers", ld, err)
	}
	checkOps(t, rec.Take(), []string{"peek v2 allowed"})
}
