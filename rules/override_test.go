package rules

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

const overrideYAML = `
rules:
  - name: api
    limits:
      - {name: per-tenant, rate: 100/1m algorithm=sliding-window, key: ip, cost: 2}
      - {name: per-ip, rate: 10/1s, key: peer}
overrides:
  - {limit: api/per-tenant, key: acme, rate: 20000/1m}
  - {limit: api/per-tenant, key: globex, rate: 500/1m algorithm=token-bucket burst=50}
`

func TestOverridesFromFile(t *testing.T) {
	s, err := Parse("o.yaml", []byte(overrideYAML))
	if err != nil {
		t.Fatal(err)
	}
	l := s.Limit("api/per-tenant")
	for key, want := range map[string]string{
		"acme":   "20000/1m algorithm=sliding-window name=per-tenant", // the limit's algorithm
		"globex": "500/1m burst=50 name=per-tenant",
		"other":  "100/1m algorithm=sliding-window name=per-tenant",
	} {
		p, err := l.PolicyFor(key)
		if err != nil || p.String() != want {
			t.Errorf("PolicyFor(%q) = %v, %v; want %s", key, p, err, want)
		}
	}
	if !l.HasOverrides() || s.Limit("api/per-ip").HasOverrides() {
		t.Errorf("HasOverrides: %v %v", l.HasOverrides(), s.Limit("api/per-ip").HasOverrides())
	}
	if _, err := s.PolicyFor("api/none", "acme"); err == nil {
		t.Error("PolicyFor of no limit: no error")
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = l.PolicyFor("acme") }); n != 0 {
		t.Errorf("PolicyFor allocates %v times", n)
	}
	// An override that cannot allow the limit's cost.
	_, err = Parse("o.yaml", []byte(strings.Replace(overrideYAML, "rate: 20000/1m}", "rate: 1/1m}", 1)))
	if err == nil || !strings.Contains(err.Error(), `o.yaml:8:46: overrides[0].rate: the limit's cost 2 exceeds what "1/1m" can ever allow (1)`) {
		t.Errorf("override below the cost: %v", err)
	}
}

func TestOverrideFunc(t *testing.T) {
	clock := core.NewManualClock(time.Unix(1_700_000_000, 0))
	var mu sync.Mutex
	calls := map[string]int{}
	contract := map[string]core.Policy{
		"initech": {Limit: 5000, Window: time.Minute},
		"tiny":    {Limit: 1, Window: time.Minute},             // below the cost
		"bad":     {Limit: 0, Window: time.Minute},             // not valid
		"acme":    {Limit: 1, Window: time.Second, Name: "xx"}, // the file's override wins
	}
	f := func(rule, limit, key string) (core.Policy, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[rule+"/"+limit+"/"+key]++
		if key == "down" {
			return core.Policy{}, false, errors.New("db down")
		}
		p, ok := contract[key]
		return p, ok, nil
	}
	s, err := Parse("o.yaml", []byte(overrideYAML), WithOverride(f), WithOverrideCache(2, time.Minute), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := s.Limit("api/per-tenant")
	if !s.Limit("api/per-ip").HasOverrides() {
		t.Error("with an OverrideFunc every limit may have overrides")
	}
	check := func(key, want string, wantErr string) {
		t.Helper()
		p, err := l.PolicyFor(key)
		if p.String() != want || (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("PolicyFor(%q) = %v, %v; want %s, %q", key, p, err, want, wantErr)
		}
	}
	base := "100/1m algorithm=sliding-window name=per-tenant"
	check("initech", "5000/1m name=per-tenant", "")
	check("initech", "5000/1m name=per-tenant", "")
	check("nobody", base, "")
	check("nobody", base, "")
	check("acme", "20000/1m algorithm=sliding-window name=per-tenant", "")
	check("tiny", base, "rules: api/per-tenant: override for a key: the limit's cost 2 exceeds what the policy 1/1m name=per-tenant can ever allow (1)")
	check("bad", base, "rules: api/per-tenant: override for a key: core: policy \"per-tenant\": Limit must be between 1 and 1000000000, got 0")
	check("down", base, "rules: api/per-tenant: override for a key: db down")
	check("down", base, "db down")
	want := map[string]int{"api/per-tenant/initech": 1, "api/per-tenant/nobody": 1, "api/per-tenant/tiny": 1, "api/per-tenant/bad": 1, "api/per-tenant/down": 2}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("calls %v, want %v", calls, want)
	}

	// The cache holds 2 answers: "initech" and "nobody" are cached; a third
	// key pushes out the least recently used.
	check("initech", "5000/1m name=per-tenant", "")
	if calls["api/per-tenant/initech"] != 1 {
		t.Errorf("initech asked again within its ttl: %d", calls["api/per-tenant/initech"])
	}
	check("third", base, "")
	check("nobody", base, "")
	if calls["api/per-tenant/nobody"] != 2 {
		t.Errorf("nobody not evicted: asked %d times", calls["api/per-tenant/nobody"])
	}
	// An answer ages out after the ttl.
	clock.Advance(time.Minute)
	contract["nobody"] = core.Policy{Limit: 7, Window: time.Second, Algorithm: core.FixedWindow}
	check("nobody", "7/1s algorithm=fixed-window name=per-tenant", "")
	// Limits are cached apart.
	if p, err := s.Limit("api/per-ip").PolicyFor("nobody"); err != nil || p.String() != "7/1s algorithm=fixed-window name=per-ip" {
		t.Errorf("per-ip nobody: %v %v", p, err)
	}
}

func TestOverrideFuncConcurrent(t *testing.T) {
	f := func(rule, limit, key string) (core.Policy, bool, error) {
		return core.Policy{Limit: int64(len(key)) + 10, Window: time.Second}, true, nil
	}
	s, err := Parse("o.yaml", []byte(overrideYAML), WithOverride(f), WithOverrideCache(16, 0))
	if err != nil {
		t.Fatal(err)
	}
	l := s.Limit("api/per-tenant")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				key := strings.Repeat("k", (g*7+i)%40+1)
				p, err := l.PolicyFor(key)
				if err != nil || p.Limit != int64(len(key))+10 {
					t.Errorf("PolicyFor(%q) = %v, %v", key, p, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestCompare(t *testing.T) {
	base := `
rules:
  - name: a
    limits:
      - {name: same, rate: 10/1m, key: ip}
      - {name: cost, rate: 10/1m, key: ip}
      - {name: policy, rate: 10/1m, key: ip}
      - {name: key, rate: 10/1m, key: ip}
      - {name: over, rate: 10/1m, key: ip}
      - {name: gone, rate: 10/1m, key: ip}
  - name: b
    limits:
      - {name: x, rate: 10/1m, key: ip}
overrides:
  - {limit: a/over, key: k, rate: 20/1m}
`
	next := `
rules:
  - name: b
    match: {routes: [/b]}
    limits:
      - {name: x, rate: 10/1m, key: ip, shadow: true, failure: closed}
  - name: a
    limits:
      - {name: new, rate: 10/1m, key: ip}
      - {name: same, limit: 10, window: 60s, key: ip}
      - {name: cost, rate: 10/1m, key: ip, cost: 2}
      - {name: policy, rate: 11/1m, key: ip}
      - {name: key, rate: 10/1m, key: peer}
      - {name: over, rate: 10/1m, key: ip}
overrides:
  - {limit: a/over, key: k, rate: 21/1m}
`
	old, err := Parse("old.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse("new.yaml", []byte(next))
	if err != nil {
		t.Fatal(err)
	}
	d := Compare(old, s)
	if want := []string{"b/x", "a/same", "a/cost"}; !slices.Equal(d.Unchanged, want) {
		t.Errorf("Unchanged %v, want %v", d.Unchanged, want)
	}
	var changed []string
	for _, c := range d.Changed {
		changed = append(changed, fmt.Sprintf("%s:%v,%v,%v", c.ID, c.Policy, c.Key, c.Overrides))
		if c.Old != old.Limit(c.ID) || c.New != s.Limit(c.ID) {
			t.Errorf("%s: Old and New are not the sets' limits", c.ID)
		}
	}
	if want := []string{"a/policy:true,false,false", "a/key:false,true,false", "a/over:false,false,true"}; !slices.Equal(changed, want) {
		t.Errorf("Changed %v, want %v", changed, want)
	}
	if want := []string{"a/new"}; !slices.Equal(d.Added, want) {
		t.Errorf("Added %v, want %v", d.Added, want)
	}
	if want := []string{"a/gone"}; !slices.Equal(d.Removed, want) {
		t.Errorf("Removed %v, want %v", d.Removed, want)
	}
	if d := Compare(nil, s); len(d.Added) != 7 || len(d.Unchanged)+len(d.Changed)+len(d.Removed) != 0 {
		t.Errorf("Compare(nil, s) = %+v", d)
	}
	if d := Compare(s, nil); len(d.Removed) != 7 || len(d.Unchanged)+len(d.Changed)+len(d.Added) != 0 {
		t.Errorf("Compare(s, nil) = %+v", d)
	}
	if d := Compare(s, s); len(d.Unchanged) != 7 {
		t.Errorf("Compare(s, s) = %+v", d)
	}
}
