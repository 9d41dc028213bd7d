package metricstest

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/rules"
)

// RulesFile is the rule set RunRules decides requests by: two rules with a
// limit of one name, per-ip, and a shadow limit in the first.
const RulesFile = `
rules:
  - name: login
    match: {routes: [/login]}
    limits:
      - {name: per-ip, rate: 2/1m algorithm=fixed-window, key: ip}
      - {name: watch, rate: 1/1m algorithm=fixed-window, key: ip, shadow: true}
  - name: api
    limits:
      - {name: per-ip, rate: 3/1m algorithm=fixed-window, key: ip}
`

// RunRules decides requests by [RulesFile] through a rules Limiter that
// reports to obs, on clock (so every latency is 0):
//   - 3 to /login: login/per-ip allows 2 (the second near its limit) and
//     denies 1; its shadow limit watch allows the first, would deny the
//     second, and is peeked (denied) for the third, which per-ip refused;
//   - 2 to /api: api/per-ip allows both;
//
// and one AllowN through observe.New of a Memory limiter whose policy is
// also named per-ip, allowed, outside the rule set.
func RunRules(t testing.TB, clock *core.ManualClock, obs observe.Observer) {
	t.Helper()
	ctx := context.Background()
	set, err := rules.Parse("rules.yaml", []byte(RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	l, err := rules.NewObservedLimiter(set, obs, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var d rules.Decision
	for _, route := range []string{"/login", "/login", "/login", "/api", "/api"} {
		req := httptest.NewRequest("GET", route, nil)
		req.RemoteAddr = "203.0.113.7:1234"
		if err := l.Decide(ctx, httpview.New(req, route), &d); err != nil {
			t.Fatal(err)
		}
	}
	o, err := observe.New(NewMemory(t, core.Policy{Name: "per-ip", Limit: 10, Window: time.Minute}, clock), obs, observe.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	o.Allow(ctx, "203.0.113.7")
}

// openRules is a rule set of one rule whose two limits allow every request
// of a benchmark, and a shadow limit.
const openRules = `
rules:
  - name: api
    limits:
      - {name: per-ip, rate: 1000000000/1h, key: ip}
      - {name: per-route, rate: 1000000000/1h, key: route}
      - {name: watch, rate: 1000000000/1h, key: ip, shadow: true}
`

// openLimiter returns a rules Limiter of openRules on the system clock,
// reporting to obs unless it is nil, and a request it decides, with the
// series of its limits made.
func openLimiter(t testing.TB, obs observe.Observer) (*rules.Limiter, *httpview.Request) {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(openRules))
	if err != nil {
		t.Fatal(err)
	}
	var l *rules.Limiter
	if obs != nil {
		l, err = rules.NewObservedLimiter(set, obs)
	} else {
		l, err = rules.NewLimiter(set)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	req := httptest.NewRequest("GET", "/api", nil)
	req.RemoteAddr = "203.0.113.7:1234"
	v := httpview.New(req, "/api")
	var d rules.Decision
	if err := l.Decide(context.Background(), v, &d); err != nil {
		t.Fatal(err)
	}
	return l, v
}

// DecideAllocs returns the allocations of one Decide, with a Decision
// reused, by a rules Limiter of two enforced limits and a shadow limit
// that reports to obs: what the exporter adds to a rule set's decision
// (a Decide of its own allocates nothing).
func DecideAllocs(t testing.TB, obs observe.Observer) float64 {
	l, req := openLimiter(t, obs)
	var d rules.Decision
	return testing.AllocsPerRun(100, func() { l.Decide(context.Background(), req, &d) })
}

// BenchDecide measures what an exporter adds to a rule set's decision: a
// rules Limiter of two enforced limits and a shadow limit, all allowing,
// on the system clock, bare (hook=none) and reporting its three events
// to the observer newObs returns (hook=name).
func BenchDecide(b *testing.B, name string, newObs func(testing.TB) observe.Observer) {
	for _, hook := range []string{"none", name} {
		b.Run("hook="+hook, func(b *testing.B) {
			var obs observe.Observer
			if hook != "none" {
				obs = newObs(b)
			}
			l, req := openLimiter(b, obs)
			var d rules.Decision
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l.Decide(context.Background(), req, &d)
			}
		})
	}
}
