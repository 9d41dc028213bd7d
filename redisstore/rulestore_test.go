package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/textproto"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/rules"
	"github.com/redis/go-redis/v9"
)

var ruleStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// ruleRequest is a keyfunc.Request built directly.
type ruleRequest struct {
	route, remote string
	header        textproto.MIMEHeader
}

func newRuleRequest(route, key, ip string) *ruleRequest {
	r := &ruleRequest{route: route, remote: ip + ":1234", header: textproto.MIMEHeader{}}
	if key != "" {
		r.header.Set("X-Key", key)
	}
	return r
}

func (r *ruleRequest) RemoteAddr() string             { return r.remote }
func (r *ruleRequest) Header(name string) []string    { return r.header.Values(name) }
func (r *ruleRequest) Method() string                 { return "GET" }
func (r *ruleRequest) Route() string                  { return r.route }
func (r *ruleRequest) Context() context.Context       { return context.Background() }
func (r *ruleRequest) Field(string) (string, error)   { return "", nil }
func (r *ruleRequest) String() string                 { return r.route + " " + r.header.Get("X-Key") + " " + r.remote }
func ruleHeaderKey(r keyfunc.Request) (string, error) { return headerOf(r) }

func headerOf(r keyfunc.Request) (string, error) {
	if v := r.Header("X-Key"); len(v) > 0 && v[0] != "" {
		return v[0], nil
	}
	return "", fmt.Errorf("X-Key: %w", keyfunc.ErrNoKey)
}

func mustRuleStore(t testing.TB, c redis.UniversalClient, opts ...Option) *RuleStore {
	t.Helper()
	s, err := NewRuleStore(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustStoreLimiter(t testing.TB, src rules.Loader, s rules.Store) *rules.Limiter {
	t.Helper()
	l, err := rules.NewStoreLimiter(src, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mustRuleSet(t testing.TB, file string, opts ...rules.Option) *rules.Set {
	t.Helper()
	opts = append([]rules.Option{rules.WithKeyFunc("tenant", ruleHeaderKey)}, opts...)
	s, err := rules.Parse("rules.yaml", []byte(file), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openRules writes file and opens a Source of it.
func openRules(t testing.TB, file string, opts ...rules.Option) (*rules.Source, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, file)
	opts = append([]rules.Option{rules.WithKeyFunc("tenant", ruleHeaderKey)}, opts...)
	src, err := rules.Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return src, path
}

func writeRules(t testing.TB, path, file string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func reloadRules(t testing.TB, src *rules.Source, path, file string) {
	t.Helper()
	writeRules(t, path, file)
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
}

// peekRule returns what key has left in the limit id of l's set on Redis,
// read by a Limiter of the key's policy under the rule's prefix: the keys
// are where RuleStore documents them.
func peekRule(t testing.TB, c redis.UniversalClient, prefix string, clock core.Clock, l *rules.Limiter, id, key string) int64 {
	t.Helper()
	lim := l.Set().Limit(id)
	p, err := lim.PolicyFor(key)
	if err != nil {
		t.Fatal(err)
	}
	r := mustNew(t, c, p, WithClock(clock), WithPrefix(prefix+":"+lim.Rule()))
	d, err := r.Peek(context.Background(), key, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

const parityRules = `
defaults: {algorithm: fixed-window}
rules:
  - name: login
    match: {routes: [/login]}
    limits:
      - {name: per-user, rate: 3/1m, key: tenant}
      - {name: per-ip, rate: 8/1m algorithm=sliding-window, key: ip, cost: 2}
      - {name: watch, rate: 2/1m, key: ip, shadow: true}
  - name: api
    limits:
      - {name: per-ip, rate: 10/10s algorithm=token-bucket burst=4, key: ip}
      - {name: per-key, rate: 20/1m algorithm=sliding-log, key: tenant, cost: 2}
      - {name: global, rate: 60/1m, key: route}
overrides:
  - {limit: api/per-key, key: gold, rate: 40/1m}
  - {limit: login/per-user, key: gold, rate: 6/1m}
`

// The same random traffic through a rule set in memory and on Redis, on
// manual clocks moved alike: every decision is the same, layer for layer,
// shadow limits and overrides (from the file and from an OverrideFunc)
// included, and so are the refunds.
func TestRuleStoreSameAsMemory(t *testing.T) {
	for name, newClient := range map[string]func(t *testing.T) redis.UniversalClient{
		"single":  func(t *testing.T) redis.UniversalClient { return newClient(t, singleNode(t)) },
		"cluster": func(t *testing.T) redis.UniversalClient { return newClusterClient(t, cluster(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			client := newClient(t)
			override := rules.WithOverride(func(rule, limit, key string) (core.Policy, bool, error) {
				if limit == "per-ip" && key == "198.51.100.9" {
					return core.Policy{Algorithm: core.TokenBucket, Limit: 30, Window: 10 * time.Second, Burst: 8}, true, nil
				}
				return core.Policy{}, false, nil
			})
			mc, rc := core.NewManualClock(ruleStart), core.NewManualClock(ruleStart)
			mem, err := rules.NewLimiter(mustRuleSet(t, parityRules, override), core.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			prefix := uniquePrefix(t.Name())
			red := mustStoreLimiter(t, mustRuleSet(t, parityRules, override), mustRuleStore(t, client, WithClock(rc), WithPrefix(prefix)))
			rng := rand.New(rand.NewPCG(7, 7))
			routes := []string{"/login", "/items", "/login", "/other"}
			users := []string{"alice", "bob", "gold", ""}
			ips := []string{"203.0.113.7", "198.51.100.9", "192.0.2.1"}
			var md, rd rules.Decision
			for i := range 600 {
				dt := time.Duration(rng.IntN(1500)) * time.Millisecond
				mc.Advance(dt)
				rc.Advance(dt)
				req := newRuleRequest(routes[rng.IntN(len(routes))], users[rng.IntN(len(users))], ips[rng.IntN(len(ips))])
				merr := mem.Decide(context.Background(), req, &md)
				rerr := red.Decide(context.Background(), req, &rd)
				if (merr == nil) != (rerr == nil) {
					t.Fatalf("request %d (%v): memory err %v, redis err %v", i, req, merr, rerr)
				}
				if merr != nil {
					continue
				}
				if !limitercheck.SameLayered(md.LayeredDecision, rd.LayeredDecision) {
					t.Fatalf("request %d (%v):\nmemory %+v\n redis %+v", i, req, md.LayeredDecision, rd.LayeredDecision)
				}
				if len(md.Shadow) != len(rd.Shadow) {
					t.Fatalf("request %d: %d shadow decisions in memory, %d on redis", i, len(md.Shadow), len(rd.Shadow))
				}
				for j := range md.Shadow {
					if md.Shadow[j].Decision != rd.Shadow[j].Decision {
						t.Fatalf("request %d, shadow %d:\nmemory %+v\n redis %+v", i, j, md.Shadow[j].Decision, rd.Shadow[j].Decision)
					}
				}
				if md.Allowed && rng.IntN(6) == 0 {
					if err := md.Refund(context.Background()); err != nil {
						t.Fatal(err)
					}
					if err := rd.Refund(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

func reloadFile(perKey int, override bool) string {
	over := ""
	if override {
		over = "overrides:\n  - {limit: api/per-key, key: k0, rate: 300/1h algorithm=fixed-window}\n"
	}
	return fmt.Sprintf(`
rules:
  - name: other
    match: {routes: [/other]}
    limits:
      - {name: per-key, rate: 1/1h algorithm=fixed-window, key: tenant}
  - name: api
    limits:
      - {name: per-key, rate: %d/1h algorithm=fixed-window, key: tenant}
      - {name: global, rate: 100000/1h algorithm=fixed-window, key: route}
%s`, perKey, over)
}

// A reload keeps each key's usage on Redis: raised, lowered, back, and
// through an override gained and lost. Two rules' limits of one name
// count apart.
func TestRuleStoreReload(t *testing.T) {
	client := newClient(t, singleNode(t))
	clock := core.NewManualClock(ruleStart)
	prefix := uniquePrefix(t.Name())
	src, path := openRules(t, reloadFile(100, false))
	l := mustStoreLimiter(t, src, mustRuleStore(t, client, WithClock(clock), WithPrefix(prefix)))
	var d rules.Decision
	for range 80 {
		if err := l.Decide(context.Background(), newRuleRequest("/x", "k", "203.0.113.7"), &d); err != nil || !d.Allowed {
			t.Fatalf("%v, %+v", err, d.LayeredDecision)
		}
	}
	if err := l.Decide(context.Background(), newRuleRequest("/other", "k", "203.0.113.7"), &d); err != nil || !d.Allowed {
		t.Fatalf("other/per-key shares api/per-key's state: %v, %+v", err, d.LayeredDecision)
	}
	for _, step := range []struct {
		name string
		file string
		want int64
	}{
		{"raised to 200", reloadFile(200, false), 120},
		{"lowered to 50", reloadFile(50, false), 0},
		{"back to 100", reloadFile(100, false), 20},
		{"k0 given an override", reloadFile(100, true), 20},
		{"k0's override lost", reloadFile(100, false), 20},
	} {
		reloadRules(t, src, path, step.file)
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		if got := peekRule(t, client, prefix, clock, l, "api/per-key", "k"); got != step.want {
			t.Errorf("%s: %d left, want %d", step.name, got, step.want)
		}
	}
	// An override gained and lost keeps k0's usage.
	reloadRules(t, src, path, reloadFile(100, false))
	for range 80 {
		if err := l.Decide(context.Background(), newRuleRequest("/x", "k0", "203.0.113.7"), &d); err != nil || !d.Allowed {
			t.Fatalf("%v, %+v", err, d.LayeredDecision)
		}
	}
	reloadRules(t, src, path, reloadFile(100, true))
	if err := l.Decide(context.Background(), newRuleRequest("/x", "k0", "203.0.113.7"), &d); err != nil || !d.Allowed || d.Layers[0].Remaining != 300-81 {
		t.Fatalf("k0 under its override: %v, %+v; want %d left", err, d.LayeredDecision, 300-81)
	}
	reloadRules(t, src, path, reloadFile(100, false))
	if err := l.Decide(context.Background(), newRuleRequest("/x", "k0", "203.0.113.7"), &d); err != nil || !d.Allowed || d.Layers[0].Remaining != 100-82 {
		t.Fatalf("k0 back under the limit: %v, %+v; want %d left", err, d.LayeredDecision, 100-82)
	}
	if got := peekRule(t, client, prefix, clock, l, "other/per-key", "k"); got != 0 {
		t.Errorf("other/per-key: %d left, want 0", got)
	}
}

// An OverrideFunc's answers on Redis: a key given a policy of its own
// keeps its usage, and so does one that loses it; an OverrideFunc's error
// decides the key by the policy it last had.
func TestRuleStoreOverrideFunc(t *testing.T) {
	client := newClient(t, singleNode(t))
	clock := core.NewManualClock(ruleStart)
	prefix := uniquePrefix(t.Name())
	var answer atomic.Int64 // the limit of k's override; 0: none; -1: an error
	override := rules.WithOverride(func(rule, limit, key string) (core.Policy, bool, error) {
		switch n := answer.Load(); {
		case key != "k" || limit != "per-key" || n == 0:
			return core.Policy{}, false, nil
		case n < 0:
			return core.Policy{}, false, errors.New("the database is down")
		default:
			return core.Policy{Algorithm: core.FixedWindow, Limit: n, Window: time.Hour}, true, nil
		}
	})
	set := mustRuleSet(t, reloadFile(100, false), override, rules.WithOverrideCache(10, time.Nanosecond), rules.WithClock(clock))
	l := mustStoreLimiter(t, set, mustRuleStore(t, client, WithClock(clock), WithPrefix(prefix)))
	var d rules.Decision
	decide := func(want int64) {
		t.Helper()
		clock.Advance(time.Millisecond) // past the cache's TTL
		err := l.Decide(context.Background(), newRuleRequest("/x", "k", "203.0.113.7"), &d)
		if err != nil || !d.Allowed || d.Layers[0].Remaining != want {
			t.Fatalf("%v, %+v; want %d left", err, d.LayeredDecision, want)
		}
	}
	for i := range 10 {
		decide(100 - int64(i) - 1)
	}
	answer.Store(500)
	decide(500 - 11)
	answer.Store(-1)
	decide(500 - 12)
	if d.OverrideErr == nil {
		t.Error("no OverrideErr")
	}
	answer.Store(0)
	decide(100 - 13)
}

// Goroutines decide on Redis while 100 reloads cycle per-key's limit
// through 100, 200 and 50 an hour and give k0 an override of 300 every
// other reload. The clock stands still, in one window: no key is admitted
// more than the largest limit it had, and at the end each key's usage on
// Redis is exactly what it was admitted, under the last set.
//
// On a Cluster the per-key and global limits' keys lie in different slots,
// so every request is decided slot by slot, refusals given back: the same
// bounds and exact remainders hold.
func TestRuleStoreReloadUnderTraffic(t *testing.T) {
	t.Run("single", func(t *testing.T) { reloadUnderTraffic(t, newClient(t, singleNode(t))) })
	t.Run("cluster", func(t *testing.T) { reloadUnderTraffic(t, newClusterClient(t, cluster(t))) })
}

func reloadUnderTraffic(t *testing.T, client redis.UniversalClient) {
	const (
		goroutines = 4
		reloads    = 100
		nkeys      = 8
	)
	clock := core.NewManualClock(ruleStart)
	prefix := uniquePrefix(t.Name())
	version := func(v int) string { return reloadFile([]int{100, 200, 50}[v%3], v%2 == 1) }
	src, path := openRules(t, version(0))
	l := mustStoreLimiter(t, src, mustRuleStore(t, client, WithClock(clock), WithPrefix(prefix)))
	var (
		admitted  [nkeys]atomic.Int64
		decisions atomic.Int64
		errs      atomic.Int64
		wg        sync.WaitGroup
	)
	stop := make(chan struct{})
	progress := make(chan struct{}, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			var d rules.Decision
			reqs := make([]*ruleRequest, nkeys)
			for k := range reqs {
				reqs[k] = newRuleRequest("/x", fmt.Sprintf("k%d", k), "203.0.113.7")
			}
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
	for v := 1; v <= reloads; v++ {
		for range 8 {
			<-progress
		}
		reloadRules(t, src, path, version(v))
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
		key := fmt.Sprintf("k%d", k)
		bound := int64(200)
		if k == 0 {
			bound = 300
		}
		over = max(over, n-bound)
		if n > bound {
			t.Errorf("%s admitted %d times, bound %d", key, n, bound)
		}
		if got, want := peekRule(t, client, prefix, clock, l, "api/per-key", key), max(final-n, 0); got != want {
			t.Errorf("%s: admitted %d, %d left under %d, want %d", key, n, got, final, want)
		}
	}
	if got := peekRule(t, client, prefix, clock, l, "api/global", "/x"); got != 100000-total {
		t.Errorf("global: %d left after %d admitted, want %d", got, total, 100000-total)
	}
	t.Logf("%s: %d decisions, %d reloads, %d admitted, %d errors, worst over-admission %d", t.Name(), decisions.Load(), reloads, total, errs.Load(), max(over, 0))
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// With Redis down, each limit's failure policy decides: open allows,
// closed refuses with a core.UnavailableError, fallback decides by a
// memory share of the limit (4 an hour among 2 instances: 2), and a rule
// of several limits is still all or nothing.
func TestRuleStoreFailurePolicies(t *testing.T) {
	file := `
defaults: {instances: 2, algorithm: fixed-window}
rules:
  - name: open
    match: {routes: [/open]}
    limits:
      - {name: l, rate: 4/1h, key: tenant, failure: open}
  - name: closed
    match: {routes: [/closed]}
    limits:
      - {name: l, rate: 4/1h, key: tenant, failure: closed}
  - name: fallback
    match: {routes: [/fallback]}
    limits:
      - {name: l, rate: 4/1h, key: tenant, failure: fallback}
  - name: mixed
    match: {routes: [/mixed]}
    limits:
      - {name: a, rate: 100/1h, key: tenant, failure: fallback}
      - {name: b, rate: 6/1h, key: ip, failure: fallback}
`
	client := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	clock := core.NewManualClock(ruleStart)
	var hooked atomic.Int64
	store := mustRuleStore(t, client, WithClock(clock), WithTimeout(time.Second),
		WithFailover(core.WithErrorHook(func(error) { hooked.Add(1) })))
	l := mustStoreLimiter(t, mustRuleSet(t, file), store)
	var d rules.Decision
	ip := "203.0.113.7"
	decide := func(route, key string) (bool, error) {
		err := l.Decide(context.Background(), newRuleRequest(route, key, ip), &d)
		return d.Allowed, err
	}
	for i := range 10 {
		if ok, err := decide("/open", "k"); err != nil || !ok {
			t.Fatalf("open, request %d: %v, allowed %v", i, err, ok)
		}
		var u *core.UnavailableError
		if _, err := decide("/closed", "k"); !errors.As(err, &u) {
			t.Fatalf("closed, request %d: %v, want a core.UnavailableError", i, err)
		}
		ok, err := decide("/fallback", "k")
		if err != nil || ok != (i < 2) {
			t.Fatalf("fallback, request %d: %v, allowed %v, want %v", i, err, ok, i < 2)
		}
	}
	// mixed: b (6/1h, a share of 3, per ip) refuses the 4th request of
	// any tenant from the ip; a (100, 50) counts only the admitted ones.
	for i := range 6 {
		ok, err := decide("/mixed", fmt.Sprint("t", i%2))
		if err != nil || ok != (i < 3) {
			t.Fatalf("mixed, request %d: %v, allowed %v, want %v", i, err, ok, i < 3)
		}
	}
	// t1 was admitted once (request 1); its refusals counted nothing in a.
	ip = "192.0.2.1"
	if ok, err := decide("/mixed", "t1"); err != nil || !ok || d.Layers[0].Remaining != 50-2 {
		t.Fatalf("mixed from another ip: %v, %+v; want allowed, %d left in a", err, d.LayeredDecision, 50-2)
	}
	ip = "203.0.113.7"
	if hooked.Load() == 0 {
		t.Error("the error hook saw no outage")
	}
	if ok, err := decide("/fallback", "k"); err != nil || ok {
		t.Fatalf("fallback after the others: %v, allowed %v", err, ok)
	}
}

// On a Cluster, a rule whose limits key a request by different keys (in
// different slots) is decided slot by slot: the decisions are memory's,
// and a request refused by a later limit leaves nothing counted in the
// earlier ones.
func TestRuleStoreClusterCrossSlot(t *testing.T) {
	client := newClusterClient(t, cluster(t))
	file := `
defaults: {algorithm: fixed-window}
rules:
  - name: login
    limits:
      - {name: per-user, rate: 5/1m, key: tenant}
      - {name: per-ip, rate: 3/1m, key: ip}
      - {name: daily, rate: 4/1d algorithm=fixed-window, key: tenant}
`
	mc, rc := core.NewManualClock(ruleStart), core.NewManualClock(ruleStart)
	mem, err := rules.NewLimiter(mustRuleSet(t, file), core.WithClock(mc))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	prefix := uniquePrefix(t.Name())
	red := mustStoreLimiter(t, mustRuleSet(t, file), mustRuleStore(t, client, WithClock(rc), WithPrefix(prefix)))
	user, ip := "alice", "203.0.113.7"
	if keySlot(tagOf(user)) == keySlot(tagOf(ip)) {
		t.Fatalf("%q and %q share a slot", user, ip)
	}
	var md, rd rules.Decision
	admitted := map[string]int64{}
	for i := range 12 {
		req := newRuleRequest("/x", user, ip)
		if i%3 == 1 {
			req = newRuleRequest("/x", fmt.Sprint("u", i), ip)
		}
		if err := mem.Decide(context.Background(), req, &md); err != nil {
			t.Fatal(err)
		}
		if err := red.Decide(context.Background(), req, &rd); err != nil {
			t.Fatal(err)
		}
		same := md.Allowed == rd.Allowed && md.Layer == rd.Layer && md.Decision == rd.Decision
		if md.Allowed {
			// Every slot counted: the layers are memory's, field for field.
			same = same && limitercheck.SameLayered(md.LayeredDecision, rd.LayeredDecision)
			for j, id := range []string{"per-user", "per-ip", "daily"} {
				admitted[id+"|"+md.Keys[j]]++
			}
		}
		if !same {
			t.Fatalf("request %d (%v):\nmemory %+v\n redis %+v", i, req, md.LayeredDecision, rd.LayeredDecision)
		}
		// Nothing stays counted for a refused request, in any slot.
		for j, id := range []string{"per-user", "per-ip", "daily"} {
			lim := red.Set().Limit("login/" + id)
			got := peekRule(t, client, prefix, rc, red, lim.ID(), rd.Keys[j])
			if want := max(lim.Policy().Limit-admitted[id+"|"+rd.Keys[j]], 0); got != want {
				t.Fatalf("request %d: %s of %q: %d left, want %d", i, id, rd.Keys[j], got, want)
			}
		}
	}
}

// A rule with a calendar limit on Redis decides as in memory, across a
// month's end in Berlin: the calendar limit is decided on its own, the
// others in one script, all or nothing.
func TestRuleStoreCalendar(t *testing.T) {
	file := `
rules:
  - name: api
    limits:
      - {name: burst, rate: 3/1m algorithm=fixed-window, key: tenant}
      - {name: monthly, rate: 5/1mo tz=Europe/Berlin, key: tenant}
      - {name: per-ip, rate: 4/1m algorithm=sliding-window, key: ip}
`
	client := newClient(t, singleNode(t))
	start := time.Date(2026, 1, 31, 22, 50, 0, 0, time.UTC) // 23:50 in Berlin
	mc, rc := core.NewManualClock(start), core.NewManualClock(start)
	mem, err := rules.NewLimiter(mustRuleSet(t, file), core.WithClock(mc))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red := mustStoreLimiter(t, mustRuleSet(t, file), mustRuleStore(t, client, WithClock(rc), WithPrefix(uniquePrefix(t.Name()))))
	var md, rd rules.Decision
	for i := range 40 {
		mc.Advance(50 * time.Second)
		rc.Advance(50 * time.Second)
		req := newRuleRequest("/x", []string{"a", "b"}[i%2], []string{"203.0.113.7", "192.0.2.1", "192.0.2.2"}[i%3])
		if err := mem.Decide(context.Background(), req, &md); err != nil {
			t.Fatal(err)
		}
		if err := red.Decide(context.Background(), req, &rd); err != nil {
			t.Fatal(err)
		}
		if !limitercheck.SameLayered(md.LayeredDecision, rd.LayeredDecision) {
			t.Fatalf("request %d at %v (%v):\nmemory %+v\n redis %+v", i, mc.Now(), req, md.LayeredDecision, rd.LayeredDecision)
		}
	}
}

func reloadParityFile(v int) string {
	return fmt.Sprintf(`
rules:
  - name: api
    limits:
      - {name: per-key, rate: %d/10m algorithm=token-bucket burst=%d, key: tenant}
      - {name: per-ip, rate: %d/1m algorithm=sliding-window, key: ip}
      - {name: log, rate: %d/30s algorithm=sliding-log, key: tenant}
overrides:
  - {limit: api/per-key, key: gold, rate: 50/10m}
`, []int{10, 20, 5}[v/3%3], []int{4, 8, 2}[v/3%3], []int{30, 31, 60, 15}[v%4], []int{12, 6}[v/2%2])
}

// Memory and Redis follow the same Source through reloads that change the
// limits under random traffic, on manual clocks moved alike: every
// decision is the same. A key untouched across several reloads is
// converted on Redis as of the reload that changed its numbers, as memory
// converts it, whatever reloads came between.
func TestRuleStoreReloadSameAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	src, path := openRules(t, reloadParityFile(0))
	mc, rc := core.NewManualClock(ruleStart), core.NewManualClock(ruleStart)
	mem, err := rules.NewLimiter(src, core.WithClock(mc))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red := mustStoreLimiter(t, src, mustRuleStore(t, client, WithClock(rc), WithPrefix(uniquePrefix(t.Name()))))
	rng := rand.New(rand.NewPCG(3, 3))
	users := []string{"alice", "bob", "gold", "carol"}
	ips := []string{"203.0.113.7", "198.51.100.9"}
	var md, rd rules.Decision
	v := 0
	for i := range 500 {
		dt := time.Duration(rng.IntN(1200)) * time.Millisecond
		mc.Advance(dt)
		rc.Advance(dt)
		if i%25 == 24 {
			v++
			reloadRules(t, src, path, reloadParityFile(v))
		}
		user := users[rng.IntN(len(users))]
		if i < 300 && user == "carol" {
			user = "alice" // carol first comes after several reloads
		}
		if i >= 60 && i < 120 && user == "bob" {
			user = "gold" // bob is away for several reloads
		}
		req := newRuleRequest("/x", user, ips[rng.IntN(len(ips))])
		if i == 100 {
			req = newRuleRequest("/x", "carol", ips[0])
		}
		if err := mem.Decide(context.Background(), req, &md); err != nil {
			t.Fatal(err)
		}
		if err := red.Decide(context.Background(), req, &rd); err != nil {
			t.Fatal(err)
		}
		if !limitercheck.SameLayered(md.LayeredDecision, rd.LayeredDecision) {
			t.Fatalf("request %d (%v, version %d):\nmemory %+v\n redis %+v", i, req, v, md.LayeredDecision, rd.LayeredDecision)
		}
	}
}
