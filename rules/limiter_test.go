package rules

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// limiterStart is a multiple of every window the tests use.
var limiterStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// headerKey keys by the X-Key header, as the caller wrote it.
func headerKey(r keyfunc.Request) (string, error) {
	if v := r.Header("X-Key"); len(v) > 0 && v[0] != "" {
		return v[0], nil
	}
	return "", fmt.Errorf("X-Key: %w", keyfunc.ErrNoKey)
}

func mustParseSet(t testing.TB, file string, opts ...Option) *Set {
	t.Helper()
	s, err := Parse("rules.yaml", []byte(file), append([]Option{WithKeyFunc("tenant", headerKey)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustLimiter(t testing.TB, src Loader, clock core.Clock) *Limiter {
	t.Helper()
	l, err := NewLimiter(src, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func tenantRequest(route, key string) *fakeRequest {
	return newRequest("GET", route, map[string]string{"X-Key": key})
}

// remaining returns what key has left in the limit id of l's set, as
// Decide would decide it: through its own limiter if it has one.
func remaining(t *testing.T, l *Limiter, id, key string) int64 {
	t.Helper()
	e := l.cur.Load()
	ls := e.limits[e.set.Limit(id).index]
	m, held, err := ls.memFor(key)
	if held != nil {
		defer held.mu.RUnlock()
	}
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Peek(context.Background(), key, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

const decideFile = `
rules:
  - name: login
    match: {routes: [/login]}
    limits:
      - {name: per-user, rate: 3/1m algorithm=fixed-window, key: tenant}
      - {name: per-ip, rate: 5/1m algorithm=fixed-window, key: ip, cost: 2}
      - {name: watch, rate: 2/1m algorithm=fixed-window, key: ip, shadow: true}
  - name: dry
    match: {routes: [/dry]}
    limits:
      - {name: only, rate: 1/1m algorithm=fixed-window, key: ip, shadow: true}
`

// Every enforced limit decides as one layer, all or nothing; shadow limits
// count what was let through and never refuse; Refund gives all back.
func TestLimiterDecide(t *testing.T) {
	clock := core.NewManualClock(limiterStart)
	l := mustLimiter(t, mustParseSet(t, decideFile), clock)
	ctx := context.Background()
	var d Decision
	for i, tc := range []struct {
		at          time.Duration
		user        string
		allowed     bool
		layer       int
		user1, ip   int64 // left after, in per-user (for user) and per-ip
		shadowAllow bool
		watchLeft   int64
	}{
		{0, "a", true, 0, 2, 3, true, 1},
		{0, "b", true, 1, 2, 1, true, 0},
		// per-ip has 1 of the 2 units: refused; c's per-user is charged
		// nothing, and watch, which would refuse, counts nothing either.
		{0, "c", false, 1, 3, 1, false, 0},
		{time.Minute, "a", true, 0, 2, 3, true, 1},
	} {
		clock.Advance(tc.at)
		if err := l.Decide(ctx, tenantRequest("/login", tc.user), &d); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if d.Rule.Name() != "login" || d.Allowed != tc.allowed || d.Layer != tc.layer || len(d.Layers) != 2 || len(d.Limits) != 2 {
			t.Fatalf("request %d: rule %v allowed=%v layer=%d layers=%d, want login, %v, %d, 2", i, d.Rule.Name(), d.Allowed, d.Layer, len(d.Layers), tc.allowed, tc.layer)
		}
		if d.Limits[1].ID() != "login/per-ip" || d.Keys[0] != tc.user || d.Keys[1] != "203.0.113.7" || d.Costs[1] != 2 {
			t.Errorf("request %d: limits %v keys %q costs %v", i, d.Limits, d.Keys, d.Costs)
		}
		if got := remaining(t, l, "login/per-user", tc.user); got != tc.user1 {
			t.Errorf("request %d: per-user %s has %d left, want %d", i, tc.user, got, tc.user1)
		}
		if got := remaining(t, l, "login/per-ip", "203.0.113.7"); got != tc.ip {
			t.Errorf("request %d: per-ip has %d left, want %d", i, got, tc.ip)
		}
		if len(d.Shadow) != 1 || d.Shadow[0].Limit.ID() != "login/watch" || d.Shadow[0].Decision.Allowed != tc.shadowAllow || d.Shadow[0].Decision.Remaining != tc.watchLeft {
			t.Errorf("request %d: shadow %+v, want allowed=%v, %d left", i, d.Shadow, tc.shadowAllow, tc.watchLeft)
		}
	}
	// The last request is given back, in every limit that counted it; a
	// second Refund gives nothing more.
	for range 2 {
		if err := d.Refund(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if u, ip, w := remaining(t, l, "login/per-user", "a"), remaining(t, l, "login/per-ip", "203.0.113.7"), remaining(t, l, "login/watch", "203.0.113.7"); u != 3 || ip != 5 || w != 2 {
		t.Errorf("after Refund: per-user %d, per-ip %d, watch %d left; want 3, 5, 2", u, ip, w)
	}

	// No rule: allowed, unlimited. Only shadow limits: allowed, reported.
	if err := l.Decide(ctx, tenantRequest("/none", "a"), &d); err != nil || !d.Allowed || d.Rule != nil || d.Layer != -1 {
		t.Errorf("no rule: %+v, %v", d, err)
	}
	for i, want := range []bool{true, false} {
		if err := l.Decide(ctx, tenantRequest("/dry", "a"), &d); err != nil || !d.Allowed || d.Layer != -1 || len(d.Layers) != 0 {
			t.Fatalf("dry %d: %+v, %v", i, d, err)
		}
		if len(d.Shadow) != 1 || d.Shadow[0].Decision.Allowed != want {
			t.Errorf("dry %d: shadow %+v, want allowed=%v", i, d.Shadow, want)
		}
	}
}

// An enforced limit's missing key is an error that counts nothing; a
// shadow limit's is reported and refuses nothing.
func TestLimiterKeyErrors(t *testing.T) {
	clock := core.NewManualClock(limiterStart)
	l := mustLimiter(t, mustParseSet(t, `
rules:
  - name: api
    match: {routes: [/api]}
    limits:
      - {name: per-ip, rate: 5/1m algorithm=fixed-window, key: ip}
      - {name: per-user, rate: 5/1m algorithm=fixed-window, key: tenant}
  - name: shadowed
    limits:
      - {name: per-ip, rate: 5/1m algorithm=fixed-window, key: ip}
      - {name: per-user, rate: 5/1m algorithm=fixed-window, key: tenant, shadow: true}
`), clock)
	var d Decision
	err := l.Decide(context.Background(), newRequest("GET", "/api", nil), &d)
	if !errors.Is(err, keyfunc.ErrNoKey) || d.Allowed {
		t.Errorf("enforced key missing: %v, allowed=%v; want ErrNoKey, refused", err, d.Allowed)
	}
	if got := remaining(t, l, "api/per-ip", "203.0.113.7"); got != 5 {
		t.Errorf("per-ip was charged: %d left", got)
	}
	if err := l.Decide(context.Background(), newRequest("GET", "/other", nil), &d); err != nil || !d.Allowed {
		t.Fatalf("shadow key missing: %v, allowed=%v; want allowed", err, d.Allowed)
	}
	if len(d.Shadow) != 1 || !errors.Is(d.Shadow[0].Err, keyfunc.ErrNoKey) {
		t.Errorf("shadow: %+v, want ErrNoKey", d.Shadow)
	}
	l.Close()
	if err := l.Decide(context.Background(), newRequest("GET", "/other", nil), &d); !errors.Is(err, ErrClosed) || d.Allowed {
		t.Errorf("after Close: %v, allowed=%v", err, d.Allowed)
	}
}

func spendN(t *testing.T, l *Limiter, route, key string, n int) {
	t.Helper()
	var d Decision
	for i := range n {
		if err := l.Decide(context.Background(), tenantRequest(route, key), &d); err != nil || !d.Allowed {
			t.Fatalf("request %d of %d for %s: allowed=%v, %v", i+1, n, key, d.Allowed, err)
		}
	}
}

// reloadTo writes file to path and reloads src from it.
func reloadTo(t *testing.T, src *Source, path, file string) {
	t.Helper()
	writeAtomic(t, path, file)
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
}

func openSource(t *testing.T, file string) (*Source, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeAtomic(t, path, file)
	src, err := Open(path, WithKeyFunc("tenant", headerKey))
	if err != nil {
		t.Fatal(err)
	}
	return src, path
}

func apiFile(perKey string, keySpec string, overrides string) string {
	return fmt.Sprintf(`
rules:
  - name: api
    limits:
      - {name: per-key, rate: %s, key: %s}
      - {name: global, rate: 100000/1h algorithm=fixed-window, key: route}
%s`, perKey, keySpec, overrides)
}

// A reload keeps each key's usage as Compare allows: converted when the
// policy changes within an algorithm, kept when the limit is unchanged,
// dropped when the key spec or the algorithm changes.
func TestLimiterReload(t *testing.T) {
	clock := core.NewManualClock(limiterStart)
	src, path := openSource(t, apiFile("100/1h algorithm=fixed-window", "tenant", ""))
	l := mustLimiter(t, src, clock)
	spendN(t, l, "/x", "k", 80)
	for _, step := range []struct {
		name       string
		file       string
		key        string
		want, glob int64
	}{
		{"raised to 200", apiFile("200/1h algorithm=fixed-window", "tenant", ""), "k", 120, 100000 - 80},
		{"lowered to 50", apiFile("50/1h algorithm=fixed-window", "tenant", ""), "k", 0, 100000 - 80},
		{"back to 100", apiFile("100/1h algorithm=fixed-window", "tenant", ""), "k", 20, 100000 - 80},
		{"another algorithm", apiFile("100/1h algorithm=sliding-window", "tenant", ""), "k", 100, 100000 - 80},
		{"another key spec", apiFile("100/1h algorithm=sliding-window", "[tenant, ip]", ""), "k|203.0.113.7", 100, 100000 - 80},
	} {
		reloadTo(t, src, path, step.file)
		if err := l.Err(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if l.Set() != src.Load() {
			t.Fatalf("%s: the limiter's set is not the source's", step.name)
		}
		if got := remaining(t, l, "api/per-key", step.key); got != step.want {
			t.Errorf("%s: %d left, want %d", step.name, got, step.want)
		}
		if got := remaining(t, l, "api/global", "/x"); got != step.glob {
			t.Errorf("%s: global has %d left, want %d (unchanged: the same limiter)", step.name, got, step.glob)
		}
	}
}

// A key that gains an override keeps its usage, converted; losing it, the
// usage goes back to the limit's shared limiter.
func TestLimiterOverrideReload(t *testing.T) {
	clock := core.NewManualClock(limiterStart)
	fw := "100/1h algorithm=fixed-window"
	over := func(rate string) string {
		return "overrides:\n  - {limit: api/per-key, key: acme, rate: " + rate + "}\n"
	}
	src, path := openSource(t, apiFile(fw, "tenant", ""))
	l := mustLimiter(t, src, clock)
	spendN(t, l, "/x", "acme", 80)
	spendN(t, l, "/x", "other", 10)
	reloadTo(t, src, path, apiFile(fw, "tenant", over("200/1h")))
	if got := remaining(t, l, "api/per-key", "acme"); got != 120 {
		t.Fatalf("acme given 200: %d left, want 120", got)
	}
	spendN(t, l, "/x", "acme", 70) // 150 of 200
	if got := remaining(t, l, "api/per-key", "other"); got != 90 {
		t.Errorf("other: %d left, want 90", got)
	}
	// The override's rate changes: converted in its own limiter.
	reloadTo(t, src, path, apiFile(fw, "tenant", over("300/1h")))
	if got := remaining(t, l, "api/per-key", "acme"); got != 150 {
		t.Errorf("acme given 300: %d left, want 150", got)
	}
	// The base policy changes too, but acme keeps its own.
	reloadTo(t, src, path, apiFile("110/1h algorithm=fixed-window", "tenant", over("300/1h")))
	if a, o := remaining(t, l, "api/per-key", "acme"), remaining(t, l, "api/per-key", "other"); a != 150 || o != 100 {
		t.Errorf("base raised to 110: acme %d, other %d left; want 150, 100", a, o)
	}
	// The override goes: 150 used of 110, denied.
	reloadTo(t, src, path, apiFile("110/1h algorithm=fixed-window", "tenant", ""))
	if got := remaining(t, l, "api/per-key", "acme"); got != 0 {
		t.Errorf("override removed: acme %d left, want 0", got)
	}
	var d Decision
	if err := l.Decide(context.Background(), tenantRequest("/x", "acme"), &d); err != nil || d.Allowed {
		t.Errorf("override removed: allowed=%v, %v; want refused", d.Allowed, err)
	}
	reloadTo(t, src, path, apiFile("200/1h algorithm=fixed-window", "tenant", ""))
	if got := remaining(t, l, "api/per-key", "acme"); got != 50 {
		t.Errorf("base raised to 200: acme %d left, want 50", got)
	}
}

// An OverrideFunc's answers: a key with its own policy decides by it, and a
// key evicted from the table of own limiters keeps its usage.
func TestLimiterOverrideFunc(t *testing.T) {
	clock := core.NewManualClock(limiterStart)
	own := core.Policy{Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour}
	set := mustParseSet(t, apiFile("5/1h algorithm=fixed-window", "tenant", ""),
		WithOverride(func(_, limit, key string) (core.Policy, bool, error) {
			if key == "broken" {
				return core.Policy{}, false, errors.New("directory down")
			}
			return own, limit == "per-key" && key != "plain", nil
		}))
	l := mustLimiter(t, set, clock)
	spendN(t, l, "/x", "k0", 10)
	spendN(t, l, "/x", "plain", 5)
	var d Decision
	for _, key := range []string{"k0", "plain"} {
		if err := l.Decide(context.Background(), tenantRequest("/x", key), &d); err != nil || d.Allowed {
			t.Errorf("%s past its limit: allowed=%v, %v", key, d.Allowed, err)
		}
	}
	if d.Layers[0].Limit != 5 {
		t.Errorf("plain decided by %d, want its limit's 5", d.Layers[0].Limit)
	}
	if err := l.Decide(context.Background(), tenantRequest("/x", "broken"), &d); err != nil || !d.Allowed || d.OverrideErr == nil || d.Layers[0].Limit != 5 {
		t.Errorf("broken: allowed=%v limit=%d overrideErr=%v, %v; want allowed by the limit's policy, the error reported", d.Allowed, d.Layers[0].Limit, d.OverrideErr, err)
	}
	// MaxOverrideKeys more keys push k0 out of the table: its usage goes
	// back to the shared limiter (10 of 5) and comes out again with it.
	e := l.cur.Load()
	ov := e.limits[set.Limit("api/per-key").index].ov
	for i := range MaxOverrideKeys {
		if _, held := ov.settle(ov.limit, fmt.Sprintf("n%d", i), own, false); held != nil {
			held.mu.RUnlock()
		}
	}
	if _, ok := ov.lru.Peek("k0"); ok {
		t.Fatal("k0 is still in the table")
	}
	if d, _ := e.limits[0].mem.Peek(context.Background(), "k0", 1); d.Allowed {
		t.Errorf("k0 evicted: the shared limiter lets it through: %+v", d)
	}
	if err := l.Decide(context.Background(), tenantRequest("/x", "k0"), &d); err != nil || d.Allowed || d.Layers[0].Limit != 10 {
		t.Errorf("k0 back: allowed=%v limit=%d, %v; want refused by its own 10", d.Allowed, d.Layers[0].Limit, err)
	}
}

// enforceVersion is rule set v of the reload test: per-key alternates 100,
// 200 and 50 an hour; odd versions give key k0 300 of its own; global never
// changes.
func enforceVersion(v int) string {
	over := ""
	if v%2 == 1 {
		over = "overrides:\n  - {limit: api/per-key, key: k0, rate: 300/1h algorithm=fixed-window}\n"
	}
	return apiFile(fmt.Sprintf("%d/1h algorithm=fixed-window", []int{100, 200, 50}[v%3]), "tenant", over)
}

// Goroutines decide while 100 reloads alternate the limits. The clock
// stands still, in one window: a key's count carries over every change of
// policy exactly, and every move of k0 between its own limiter and the
// shared one too, so no key is ever admitted more than the largest limit
// it had (200; k0 300), and each one's usage at the end is what it was
// admitted, under the last set: nothing reset, nothing lost.
func TestLimiterReloadUnderTraffic(t *testing.T) {
	const (
		goroutines = 4
		reloads    = 100
		nkeys      = 8
	)
	clock := core.NewManualClock(limiterStart)
	src, path := openSource(t, enforceVersion(0))
	l := mustLimiter(t, src, clock)
	var (
		admitted  [nkeys]atomic.Int64
		decisions atomic.Int64
		errs      atomic.Int64
		wg        sync.WaitGroup
	)
	stop := make(chan struct{})
	progress := make(chan struct{}, goroutines)
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			var d Decision
			reqs := make([]*fakeRequest, nkeys)
			for k := range reqs {
				reqs[k] = tenantRequest("/x", fmt.Sprintf("k%d", k))
			}
			<-start
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % nkeys
				if err := l.Decide(context.Background(), reqs[k], &d); err != nil {
					errs.Add(1)
					t.Error(err)
					return
				}
				decisions.Add(1)
				if d.Allowed {
					admitted[k].Add(1)
				}
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		})
	}
	close(start)
	for v := 1; v <= reloads; v++ {
		// Some decisions between reloads, however the goroutines are
		// scheduled.
		for range 3 {
			<-progress
		}
		reloadTo(t, src, path, enforceVersion(v))
		if err := l.Err(); err != nil {
			errs.Add(1)
			t.Error(err)
		}
	}
	for range 3 {
		<-progress
	}
	close(stop)
	wg.Wait()

	final := []int64{100, 200, 50}[reloads%3]
	var total, over int64
	for k := range nkeys {
		n := admitted[k].Load()
		total += n
		bound := int64(200)
		key := fmt.Sprintf("k%d", k)
		if k == 0 {
			bound = 300
		}
		over = max(over, n-bound)
		if n > bound {
			t.Errorf("%s admitted %d times, bound %d", key, n, bound)
		}
		if got, want := remaining(t, l, "api/per-key", key), max(final-n, 0); got != want {
			t.Errorf("%s: admitted %d, %d left under %d, want %d", key, n, got, final, want)
		}
	}
	if got := remaining(t, l, "api/global", "/x"); got != 100000-total {
		t.Errorf("global: %d left after %d admitted, want %d", got, total, 100000-total)
	}
	t.Logf("%d decisions, %d reloads, %d admitted, %d errors, worst over-admission %d", decisions.Load(), reloads, total, errs.Load(), over)
}

// A Decide on known keys allocates nothing.
func TestLimiterDecideAllocs(t *testing.T) {
	clock := core.NewManualClock(limiterStart)
	l := mustLimiter(t, mustParseSet(t, apiFile("1000000000/1h algorithm=fixed-window", "tenant", "")), clock)
	req := tenantRequest("/x", "k")
	var d Decision
	if err := l.Decide(context.Background(), req, &d); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := l.Decide(context.Background(), req, &d); err != nil || !d.Allowed {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Decide: %v allocs, want 0", n)
	}
}

func BenchmarkLimiterDecide(b *testing.B) {
	l, err := NewLimiter(mustParseSet(b, apiFile("1000000000/1h", "tenant", "")))
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
}

// A key with an override is decided by its own limiter, in layers built
// for the request.
func BenchmarkLimiterDecideOverride(b *testing.B) {
	set := mustParseSet(b, apiFile("1000000000/1h", "tenant", "overrides:\n  - {limit: api/per-key, key: k, rate: 999999999/1h}\n"))
	l, err := NewLimiter(set)
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
}

// An override applies to shadow limits too, and Refund gives back to the
// key's own limiter; a new key spec drops the keys' own limiters with
// their meaning.
func TestLimiterOverrideShadowRefund(t *testing.T) {
	clock := core.NewManualClock(limiterStart)
	file := func(key string) string {
		return fmt.Sprintf(`
rules:
  - name: api
    limits:
      - {name: per-key, rate: 5/1h algorithm=fixed-window, key: %s}
      - {name: watch, rate: 5/1h algorithm=fixed-window, key: tenant, shadow: true}
overrides:
  - {limit: api/per-key, key: acme, rate: 10/1h}
  - {limit: api/watch, key: acme, rate: 20/1h}
`, key)
	}
	src, path := openSource(t, file("tenant"))
	l := mustLimiter(t, src, clock)
	spendN(t, l, "/x", "acme", 7)
	var d Decision
	if err := l.Decide(context.Background(), tenantRequest("/x", "acme"), &d); err != nil || !d.Allowed {
		t.Fatalf("acme's 8th: allowed=%v, %v", d.Allowed, err)
	}
	if d.Layers[0].Limit != 10 || d.Layers[0].Remaining != 2 || d.Shadow[0].Decision.Limit != 20 || d.Shadow[0].Decision.Remaining != 12 {
		t.Errorf("acme: per-key %d of %d left, watch %d of %d; want 2 of 10, 12 of 20", d.Layers[0].Remaining, d.Layers[0].Limit, d.Shadow[0].Decision.Remaining, d.Shadow[0].Decision.Limit)
	}
	if err := d.Refund(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k, w := remaining(t, l, "api/per-key", "acme"), remaining(t, l, "api/watch", "acme"); k != 3 || w != 13 {
		t.Errorf("after Refund: per-key %d, watch %d left; want 3, 13", k, w)
	}
	// per-key now keys by [tenant, route]: a new limit for Compare, which
	// starts empty; watch, unchanged, keeps acme's own limiter.
	reloadTo(t, src, path, file("[tenant, route]"))
	if k, w := remaining(t, l, "api/per-key", "acme|/x"), remaining(t, l, "api/watch", "acme"); k != 5 || w != 13 {
		t.Errorf("new key spec: per-key %d, watch %d left; want 5, 13", k, w)
	}
}
