package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

type tenantKey struct{}

func proPlan(keyfunc.Request) (string, error) { return "pro", nil }

// exampleOptions are what testdata/example.yaml needs.
func exampleOptions() []Option {
	return []Option{WithPlan(proPlan), WithContextKey("tenant", tenantKey{})}
}

func TestParseExample(t *testing.T) {
	s, err := ParseFile("testdata/example.yaml", exampleOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id, policy, key string
		cost            int64
		failure         Failure
		shadow, over    bool
	}{
		{"login/per-account", "5/1m algorithm=sliding-log name=per-account", "email:username", 1, FailureClosed, false, false},
		{"login/per-ip", "20/1m algorithm=sliding-window name=per-ip", "ip", 1, FailureOpen, false, false},
		{"api-paid/per-tenant", "1000/1m burst=200 name=per-tenant", "context:tenant", 1, FailureOpen, false, true},
		{"api-paid/per-tenant-route", "20000/1d algorithm=sliding-window name=per-tenant-route", "context:tenant,route-method", 2, FailureOpen, true, false},
		{"everything-else/per-ip", "100/1m algorithm=sliding-window name=per-ip", "ip", 1, FailureOpen, false, false},
	}
	limits := s.Limits()
	if len(limits) != len(want) {
		t.Fatalf("%d limits, want %d", len(limits), len(want))
	}
	for i, w := range want {
		l := limits[i]
		got := fmt.Sprint(l.ID(), " ", l.Policy(), " ", strings.Join(l.KeySpec(), ","), " ", l.Cost(), " ", l.Failure(), " ", l.Shadow(), " ", l.HasOverrides())
		exp := fmt.Sprint(w.id, " ", w.policy, " ", w.key, " ", w.cost, " ", w.failure, " ", w.shadow, " ", w.over)
		if got != exp {
			t.Errorf("limit %d:\n got %s\nwant %s", i, got, exp)
		}
		if l.Key() == nil {
			t.Errorf("%s: nil key function", l.ID())
		}
		if s.Limit(l.ID()) != l {
			t.Errorf("Limit(%q) is not the limit", l.ID())
		}
	}
	if got := len(s.TrustedProxies()); got != 1+len(keyfunc.PrivateNetworks()) {
		t.Errorf("%d trusted proxies, want %d", got, 1+len(keyfunc.PrivateNetworks()))
	}
	p, err := s.PolicyFor("api-paid/per-tenant", "acme")
	if err != nil || p.String() != "20000/1m name=per-tenant" {
		t.Errorf("acme's policy = %v, %v; want 20000/1m name=per-tenant", p, err)
	}
	if got := limits[2].ErrorPolicy(); got != core.FailOpen() {
		t.Errorf("ErrorPolicy = %+v, want FailOpen", got)
	}
}

// TestParseJSON reads the same set written as JSON.
func TestParseJSON(t *testing.T) {
	js := `{
  "trusted_proxies": ["10.0.0.1"],
  "defaults": {"failure": "fallback", "instances": 3},
  "rules": [
    {"name": "login", "match": {"routes": ["/login"], "methods": ["post"], "headers": {"x-client": ["web", "*"]}},
     "limits": [{"name": "per-ip", "limit": 5, "window": "15m", "algorithm": "sliding_log", "key": "ip"}]},
    {"name": "rest", "limits": [{"name": "per-ip", "rate": "100/m", "key": ["peer", "header:x-api-key"]}]}
  ]
}`
	s, err := Parse("rules.json", []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	l := s.Limit("login/per-ip")
	if got := l.Policy().String(); got != "5/15m algorithm=sliding-log name=per-ip" {
		t.Errorf("policy %s", got)
	}
	if l.Failure() != FailureFallback || l.ErrorPolicy() != core.FallbackShare(3) {
		t.Errorf("failure %v %+v, want fallback over 3", l.Failure(), l.ErrorPolicy())
	}
	if got := strings.Join(s.Limit("rest/per-ip").KeySpec(), ","); got != "peer,header:X-Api-Key" {
		t.Errorf("key spec %s", got)
	}
	if got := s.TrustedProxies(); len(got) != 1 || got[0] != netip.MustParsePrefix("10.0.0.1/32") {
		t.Errorf("trusted proxies %v", got)
	}
}

// TestParseErrors checks that each mistake is found and placed: file, line,
// column and field path.
func TestParseErrors(t *testing.T) {
	const ok = "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 100/1m, key: ip}\n"
	tests := []struct {
		name, src string
		want      string // the first error's text, after "rules: "
	}{
		{"bad rate", "rules:\n  - name: a\n    limits:\n      - name: x\n        rate: 100/1x\n        key: ip\n",
			`f.yaml:5:15: rules[0].limits[0].rate: core: parse policy "100/1x": window "1x": not a duration such as 1m, 15m, 1h30m or 7d: invalid policy`},
		{"unknown field", "rules:\n  - name: a\n    matc: {}\n    limits: [{name: x, rate: 1/s, key: ip}]\n",
			`f.yaml:3:5: rules[0].matc: unknown field; want one of name, match, limits`},
		{"unknown top field", "rule: []\n", `f.yaml:1:1: rule: unknown field; want one of trusted_proxies, defaults, rules, overrides`},
		{"both ways", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 100/1m, burst: 0, key: ip}\n",
			`f.yaml:4:25: rules[0].limits[0].rate: rate and burst are given both; give the policy one way`},
		{"no policy", "rules:\n  - name: a\n    limits:\n      - {name: x, key: ip}\n",
			`f.yaml:4:9: rules[0].limits[0]: no policy; give rate (such as 100/1m), or limit and window`},
		{"bad limit field", "rules:\n  - name: a\n    limits:\n      - name: x\n        limit: 0\n        window: 1m\n        key: ip\n",
			`f.yaml:5:16: rules[0].limits[0].limit: must be between 1 and 1000000000, got 0`},
		{"burst on a window", "rules:\n  - name: a\n    limits:\n      - {name: x, limit: 5, window: 1m, algorithm: fixed-window, burst: 9, key: ip}\n",
			`f.yaml:4:73: rules[0].limits[0].burst: applies to token-bucket and leaky-bucket only, got 9 with fixed-window`},
		{"default algorithm", "defaults: {algorithm: fixed-window}\nrules:\n  - name: a\n    limits:\n      - {name: x, rate: 10/s burst=20, key: ip}\n",
			`f.yaml:5:25: rules[0].limits[0].rate: "10/s burst=20" with the default algorithm fixed-window: burst applies to token-bucket and leaky-bucket only, got 20 with fixed-window`},
		{"bad window", "rules:\n  - name: a\n    limits:\n      - {name: x, limit: 5, window: 1 m, key: ip}\n",
			`f.yaml:4:37: rules[0].limits[0].window: "1 m" is not a window: a duration such as 1s, 15m, 1h30m or 7d, from 1µs to 366d`},
		{"calendar window", "rules:\n  - name: a\n    limits:\n      - {name: x, limit: 5, window: 1mo, key: ip}\n",
			`f.yaml:4:37: rules[0].limits[0].window: "1mo" is a calendar window: give the policy as a rate, such as rate: 1000/1mo tz=Europe/Berlin`},
		{"calendar on the default algorithm", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 5/1w algorithm=sliding-window, key: ip}\n",
			`f.yaml:4:25: rules[0].limits[0].rate: core: parse policy "5/1w algorithm=sliding-window": Calendar applies to fixed-window only, got week with sliding-window: invalid policy`},
		{"name in rate", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 1/s name=y, key: ip}\n",
			`f.yaml:4:25: rules[0].limits[0].rate: "1/s name=y": name= is not allowed here; the limit's name is its policy's`},
		{"unknown key", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 100/1m, key: nope}\n",
			`f.yaml:4:38: rules[0].limits[0].key: "nope" is not a key spec; want ip, peer, route, route-method, header:<Name>, email:<field>, context:<name>`},
		{"unknown key part", "rules:\n  - name: a\n    limits:\n      - name: x\n        rate: 100/1m\n        key: [ip, context:user]\n",
			`f.yaml:6:19: rules[0].limits[0].key[1]: "context:user": no context key is registered as "user" (rules.WithContextKey)`},
		{"bad header key", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 100/1m, key: \"header:X Y\"}\n",
			`f.yaml:4:38: rules[0].limits[0].key: "header:X Y": "X Y" is not a header name`},
		{"no key", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 100/1m}\n",
			`f.yaml:4:9: rules[0].limits[0].key: a key is required, such as ip, header:X-Api-Key or [email:username, ip]`},
		{"duplicate rule", ok + "  - name: a\n    limits:\n      - {name: x, rate: 1/s, key: ip}\n",
			`f.yaml:5:11: rules[1].name: rule "a" is named twice`},
		{"duplicate limit", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 1/s, key: ip}\n      - {name: x, rate: 2/s, key: ip}\n",
			`f.yaml:5:16: rules[0].limits[1].name: limit "x" is named twice in rule "a"`},
		{"bad name", "rules:\n  - name: a/b\n    limits:\n      - {name: x, rate: 1/s, key: ip}\n",
			`f.yaml:2:11: rules[0].name: "a/b" has "/"; use letters, digits, '-', '_' or '.'`},
		{"no name", "rules:\n  - limits:\n      - {name: x, rate: 1/s, key: ip}\n",
			`f.yaml:2:5: rules[0].name: a name is required`},
		{"duplicate key", "rules:\n  - name: a\n    name: b\n",
			`f.yaml:3:5: mapping key "name" already defined at [2:5]`},
		{"duplicate key JSON", `{"rules": [], "rules": []}`,
			`f.yaml:1:15: mapping key "rules" already defined at [1:2]`},
		{"cost zero", `{"rules": [{"name": "a", "limits": [{"name": "x", "rate": "100/1m", "key": "ip", "cost": 0}]}]}`,
			`f.yaml:1:90: rules[0].limits[0].cost: 0; at least 1`},
		{"cost too high", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 5/1m, key: ip, cost: 6}\n",
			`f.yaml:4:46: rules[0].limits[0].cost: 6 exceeds what the policy can ever allow (5): every request would be refused`},
		{"cost a string", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 5/1m, key: ip, cost: \"2\"}\n",
			`f.yaml:4:46: rules[0].limits[0].cost: want a whole number, got a string`},
		{"cost hex", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 5/1m, key: ip, cost: 0x2}\n",
			`f.yaml:4:46: rules[0].limits[0].cost: 0x2 is not a decimal whole number within range`},
		{"shadow a string", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 5/1m, key: ip, shadow: yes}\n",
			`f.yaml:4:48: rules[0].limits[0].shadow: want true or false, got a string`},
		{"bad failure", "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 5/1m, key: ip, failure: local}\n",
			`f.yaml:4:49: rules[0].limits[0].failure: "local" is not a failure policy; want open, closed or fallback`},
		{"bad default failure", "defaults:\n  failure: Open\n" + ok,
			`f.yaml:2:12: defaults.failure: "Open" is not a failure policy; want open, closed or fallback`},
		{"bad instances", "defaults:\n  instances: 0\n" + ok, `f.yaml:2:14: defaults.instances: 0; at least 1`},
		{"bad default algorithm", "defaults:\n  algorithm: gcra\n" + ok,
			`f.yaml:2:14: defaults.algorithm: core: unknown algorithm "gcra" (want one of token-bucket, fixed-window, sliding-log, sliding-window, leaky-bucket)`},
		{"bad proxy", "trusted_proxies: [10.0.0.0/33]\n" + ok,
			`f.yaml:1:19: trusted_proxies[0]: "10.0.0.0/33" is not a CIDR prefix, an IP address or "private"`},
		{"bad method", "rules:\n  - name: a\n    match: {methods: [GET, FETCH]}\n    limits: [{name: x, rate: 1/s, key: ip}]\n",
			`f.yaml:3:28: rules[0].match.methods[1]: "FETCH" is not a method; want one of GET, POST, PUT, PATCH, DELETE, OPTIONS, CONNECT, TRACE`},
		{"HEAD", "rules:\n  - name: a\n    match: {methods: [head]}\n    limits: [{name: x, rate: 1/s, key: ip}]\n",
			`f.yaml:3:23: rules[0].match.methods[0]: HEAD is matched by GET: list GET`},
		{"method twice", "rules:\n  - name: a\n    match: {methods: [get, GET]}\n    limits: [{name: x, rate: 1/s, key: ip}]\n",
			`f.yaml:3:28: rules[0].match.methods[1]: method GET is listed twice`},
		{"route with method", "rules:\n  - name: a\n    match: {routes: [POST /login]}\n    limits: [{name: x, rate: 1/s, key: ip}]\n",
			`f.yaml:3:22: rules[0].match.routes[0]: "POST /login" holds a space; a route is the pattern without the method (list methods in methods)`},
		{"header twice", "rules:\n  - name: a\n    match:\n      headers:\n        x-plan: [a]\n        X-Plan: [b]\n    limits: [{name: x, rate: 1/s, key: ip}]\n",
			`f.yaml:5:17: rules[0].match.headers.x-plan: header X-Plan is given twice (as "X-Plan" and "x-plan")`},
		{"header no values", "rules:\n  - name: a\n    match:\n      headers: {X-Plan: []}\n    limits: [{name: x, rate: 1/s, key: ip}]\n",
			`f.yaml:4:25: rules[0].match.headers.X-Plan: no values; list the values to match, or "*" for any`},
		{"plans without WithPlan", "rules:\n  - name: a\n    match: {plans: [pro]}\n    limits: [{name: x, rate: 1/s, key: ip}]\n",
			`f.yaml:3:20: rules[0].match.plans: plans need a plan function (rules.WithPlan)`},
		{"match a list", "rules:\n  - name: a\n    match: [x]\n    limits: [{name: x, rate: 1/s, key: ip}]\n",
			`f.yaml:3:12: rules[0].match: want a mapping, got a list`},
		{"no rules", "defaults: {failure: open}\n", `f.yaml:1:1: rules: no rules; a set needs at least one (a rule with no match applies to every request)`},
		{"no limits", "rules:\n  - name: a\n", `f.yaml:2:5: rules[0].limits: no limits; a rule needs at least one`},
		{"override no limit", "overrides:\n  - {limit: a/y, key: k, rate: 1/s}\n" + ok,
			`f.yaml:2:13: overrides[0].limit: "a/y" names no limit of rule "a"`},
		{"override no rule", "overrides:\n  - {limit: b/x, key: k, rate: 1/s}\n" + ok,
			`f.yaml:2:13: overrides[0].limit: "b/x" names no rule "b"`},
		{"override not an id", "overrides:\n  - {limit: x, key: k, rate: 1/s}\n" + ok,
			`f.yaml:2:13: overrides[0].limit: "x" is not <rule>/<limit>`},
		{"override twice", "overrides:\n  - {limit: a/x, key: k, rate: 1/s}\n  - {limit: a/x, key: k, rate: 2/s}\n" + ok,
			`f.yaml:3:23: overrides[1].key: key "k" of a/x is overridden twice`},
		{"override bad rate", "overrides:\n  - {limit: a/x, key: k, rate: 1/z}\n" + ok,
			`f.yaml:2:32: overrides[0].rate: core: parse policy "1/z": window "z": not a duration such as 1m, 15m, 1h30m or 7d: invalid policy`},
		{"override unknown field", "overrides:\n  - {limit: a/x, key: k, window: 1m}\n" + ok,
			`f.yaml:2:26: overrides[0].window: unknown field; want one of limit, key, rate`},
		{"anchor", "a: &x 1\n", `f.yaml:1:4: anchors and aliases are not allowed in a rule file`},
		{"alias", "rules:\n  - *x\n", `f.yaml:2:5: anchors and aliases are not allowed in a rule file`},
		{"tag", "rules: !!seq []\n", `f.yaml:1:8: tags are not allowed in a rule file`},
		{"merge", "rules:\n  - <<: {}\n", `f.yaml:2:5: merge keys (<<) are not allowed in a rule file`},
		{"two documents", ok + "---\n" + ok, `f.yaml:5:1: more than one document`},
		{"syntax", "rules: [", `f.yaml:1:8: sequence end token ']' not found`},
		{"empty", "", `f.yaml:1:1: the file is empty; want a mapping with rules`},
		{"a list", "- a\n", `f.yaml:1:1: want a mapping, got a list`},
		{"deep", "rules: " + strings.Repeat("[", 40) + strings.Repeat("]", 40), `f.yaml:1:39: nested deeper than 32`},
		{"deep block", "rules:\n" + strings.Repeat("- ", 40) + "x\n", `f.yaml:2:65: nested deeper than 32`},
		{"wide", "rules: [{name: a, limits: [{name: x, rate: 1/s, key: ip}]}]\n" + func() string {
			var b strings.Builder
			for i := range 300 {
				fmt.Fprintf(&b, "k%d: 1\n", i)
			}
			return b.String()
		}(), `f.yaml:257:1: a mapping of more than 256 keys`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse("f.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("no error; set %v", s)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v: not an *Error", err)
			}
			if got := strings.TrimPrefix(e.Error(), "rules: "); got != tt.want {
				t.Errorf("error:\n got %s\nwant %s", got, tt.want)
			}
			if e.Line < 1 || e.Column < 1 || e.File != "f.yaml" {
				t.Errorf("no position: %+v", e)
			}
		})
	}
}

// TestParseManyErrors checks that every mistake is reported, each placed.
func TestParseManyErrors(t *testing.T) {
	src := "rules:\n  - name: a\n    limits:\n      - {name: x, rate: 1/q, key: ip}\n      - {name: y, rate: 1/s, key: nope}\n"
	_, err := Parse("f.yaml", []byte(src))
	want := "rules: f.yaml:4:25: rules[0].limits[0].rate: core: parse policy \"1/q\": window \"q\": not a duration such as 1m, 15m, 1h30m or 7d: invalid policy\n" +
		"rules: f.yaml:5:35: rules[0].limits[1].key: \"nope\" is not a key spec; want ip, peer, route, route-method, header:<Name>, email:<field>, context:<name>"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "  - {name: r%d, limits: [{name: x, rate: 1/q, key: ip}]}\n", i)
	}
	_, err = Parse("f.yaml", []byte(b.String()))
	if n := strings.Count(err.Error(), "\n") + 1; n != maxErrors {
		t.Errorf("%d errors, want %d", n, maxErrors)
	}
}

func TestParseBounds(t *testing.T) {
	big := make([]byte, MaxFileBytes+1)
	for i := range big {
		big[i] = '#'
	}
	if _, err := Parse("f.yaml", big); err == nil || !strings.Contains(err.Error(), "at most 1048576") {
		t.Errorf("a file over the bound: %v", err)
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseFile(path); err == nil || !strings.Contains(err.Error(), "larger than 1048576") {
		t.Errorf("a file over the bound: %v", err)
	}
	if _, err := ParseFile(filepath.Join(t.TempDir(), "none.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}

	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range MaxRules + 1 {
		fmt.Fprintf(&b, "- {name: r%d, limits: [{name: x, rate: 1/s, key: ip}]}\n", i)
	}
	if _, err := Parse("f.yaml", []byte(b.String())); err == nil || !strings.Contains(err.Error(), "f.yaml:2:1: rules: 1001 entries, at most 1000") {
		t.Errorf("too many rules: %v", err)
	}
	lim := strings.Repeat("{name: x, rate: 1/s, key: ip}, ", MaxLimits+1)
	if _, err := Parse("f.yaml", []byte("rules: [{name: a, limits: ["+lim+"]}]")); err == nil || !strings.Contains(err.Error(), "rules[0].limits: 17 entries, at most 16") {
		t.Errorf("too many limits: %v", err)
	}
}

// TestParseMaxRules checks that a set at the bounds parses, quickly enough
// for a reload.
func TestParseMaxRules(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range MaxRules {
		fmt.Fprintf(&b, "  - name: r%d\n    match: {routes: [/r/%d, /s/%d/*], methods: [GET, POST], headers: {X-Plan: [a, b]}}\n    limits:\n      - {name: x, rate: 1/s, key: [ip, route]}\n      - {name: y, limit: 10, window: 1h, key: header:X-Api-Key}\n", i, i, i)
	}
	s, err := Parse("f.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rules()) != MaxRules || len(s.Limits()) != 2*MaxRules {
		t.Errorf("%d rules, %d limits", len(s.Rules()), len(s.Limits()))
	}
}

func TestNewErrorsHaveNoPosition(t *testing.T) {
	_, err := New(Config{Rules: []RuleConfig{{
		Name:   "a",
		Limits: []LimitConfig{{Name: "x", Rate: "1/s", Limit: 5, Key: []string{"ip"}}},
	}}})
	want := "rules: rules[0].limits[0].rate: rate and limit, window, algorithm or burst are given both; give the policy one way"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
	_, err = New(Config{Rules: []RuleConfig{{Name: "a", Limits: []LimitConfig{{Name: "x", Limit: 5, Window: time.Minute, Key: []string{"ip"}, Cost: -1}}}}})
	if want := "rules: rules[0].limits[0].cost: -1; at least 1"; err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
}

func TestOptionErrors(t *testing.T) {
	ok := Config{Rules: []RuleConfig{{Name: "a", Limits: []LimitConfig{{Name: "x", Rate: "1/s", Key: []string{"ip"}}}}}}
	tests := []struct {
		name string
		opts []Option
		want string
	}{
		{"nil", []Option{WithPlan(proPlan), nil}, "rules: New: option 2 is nil"},
		{"nil clock", []Option{WithClock(nil)}, "rules: WithClock: the clock is nil"},
		{"nil plan", []Option{WithPlan(nil)}, "rules: WithPlan: the function is nil"},
		{"nil override", []Option{WithOverride(nil)}, "rules: WithOverride: the function is nil"},
		{"cache size", []Option{WithOverrideCache(0, time.Minute)}, "rules: WithOverrideCache: size 0, at least 1"},
		{"builtin key", []Option{WithKeyFunc("ip", keyfunc.PeerIP)}, `rules: WithKeyFunc("ip"): the name is a built-in key spec`},
		{"colon key", []Option{WithKeyFunc("a:b", keyfunc.PeerIP)}, `rules: WithKeyFunc("a:b"): the name must be non-empty and hold no ':'`},
		{"nil key", []Option{WithKeyFunc("a", nil)}, `rules: WithKeyFunc("a"): the function is nil`},
		{"key twice", []Option{WithKeyFunc("a", keyfunc.PeerIP), WithKeyFunc("a", keyfunc.Route)}, `rules: key "a" is registered twice`},
		{"context nil", []Option{WithContextKey("u", nil)}, `rules: WithContextKey("u"): the key is nil or not comparable`},
		{"context twice", []Option{WithContextKey("u", tenantKey{}), WithContextKey("u", 1)}, `rules: key "context:u" is registered twice`},
		{"ip options", []Option{WithIPOptions(keyfunc.UseForwarded())}, "rules: rules[0].limits[0].key: ip: keyfunc: ClientIP: UseForwarded without TrustProxies: the header would never be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(ok, tt.opts...)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n got %v\nwant %s", err, tt.want)
			}
			// In a file, an option's mistake has no position.
			_, err = Parse("f.yaml", []byte("rules: [{name: a, limits: [{name: x, rate: 1/s, key: ip}]}]"), tt.opts...)
			if err == nil {
				t.Fatal("Parse: no error")
			}
		})
	}
	_, err := Parse("f.yaml", []byte("rules: [{name: a, limits: [{name: x, rate: 1/s, key: ip}]}]"), nil)
	if err == nil || err.Error() != "rules: Parse: option 1 is nil" {
		t.Errorf("Parse with a nil option: %v", err)
	}
	_, err = ParseFile(filepath.Join(t.TempDir(), "none.yaml"), nil)
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("ParseFile of no file: %v", err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("rules: [{name: a, limits: [{name: x, rate: 1/s, key: ip}]}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, nil); err == nil || err.Error() != "rules: Open: option 1 is nil" {
		t.Errorf("Open with a nil option: %v", err)
	}
	if _, err := Open(path, WithClock(nil)); err == nil || err.Error() != "rules: WithClock: the clock is nil" {
		t.Errorf("Open with a nil clock: %v", err)
	}
}

func TestKeyFuncs(t *testing.T) {
	tenant := func(r keyfunc.Request) (string, error) { return "t-" + r.Method(), nil }
	s, err := New(Config{Rules: []RuleConfig{{Name: "a", Limits: []LimitConfig{
		{Name: "own", Rate: "1/s", Key: []string{"tenant"}},
		{Name: "joined", Rate: "1/s", Key: []string{"tenant", "route"}},
		{Name: "hdr", Rate: "1/s", Key: []string{"header:x-api-key"}},
	}}}}, WithKeyFunc("tenant", tenant), WithHeaderSecret([]byte("s")))
	if err != nil {
		t.Fatal(err)
	}
	req := newRequest("POST", "/items/{id}", map[string]string{"X-Api-Key": "k1"})
	keys, err := s.Rules()[0].Keys(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantHdr, _ := keyfunc.Header("X-Api-Key", []byte("s"))(req)
	want := []string{"t-POST", "6:t-POST11:/items/{id}", wantHdr}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	_, err = s.Rules()[0].Keys(newRequest("POST", "/x", nil), nil)
	if !errors.Is(err, keyfunc.ErrNoKey) || !strings.Contains(err.Error(), "a/hdr") {
		t.Errorf("missing header: %v", err)
	}
}

func TestParseDocumentMarkers(t *testing.T) {
	const ok = "rules: [{name: a, limits: [{name: x, rate: 1/s, key: ip}]}]\n"
	for _, src := range []string{"---\n" + ok, "# c\n---\n" + ok + "...\n", ok + "...\n# end\n"} {
		if _, err := Parse("f.yaml", []byte(src)); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
	for _, src := range []string{ok + "...\n" + ok, ok + "---\n", "---\n---\n" + ok} {
		if _, err := Parse("f.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "more than one document") {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// TestParseHostileFiles checks that files the YAML parser would take
// minutes over are refused before it reads them.
func TestParseHostileFiles(t *testing.T) {
	var keys strings.Builder
	for i := 0; keys.Len() < 256<<10; i++ {
		fmt.Fprintf(&keys, "k%d: v\n", i)
	}
	var flowKeys strings.Builder
	flowKeys.WriteString("{")
	for i := 0; flowKeys.Len() < 256<<10; i++ {
		fmt.Fprintf(&flowKeys, "k%d: v, ", i)
	}
	flowKeys.WriteString("z: 1}")
	for name, tt := range map[string]struct{ src, want string }{
		"keys":      {keys.String(), "f.yaml:257:1: a mapping of more than 256 keys"},
		"flow keys": {flowKeys.String(), "a mapping of more than 256 keys"},
		"nesting":   {strings.Repeat("[", 128<<10) + strings.Repeat("]", 128<<10), "f.yaml:1:33: nested deeper than 32"},
		"blocks":    {strings.Repeat("- ", 128<<10) + "x", "nested deeper than 32"},
		"documents": {strings.Repeat("---\na: 1\n", 32<<10), "f.yaml:3:1: more than one document"},
	} {
		_, err := Parse("f.yaml", []byte(tt.src))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %s", name, err, tt.want)
		}
	}
}

// TestDocExample parses the file shown in the package documentation.
func TestDocExample(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(src), "// # The file\n//\n")
	block, _, _ := strings.Cut(after, "\n//\n// A rule has")
	var b strings.Builder
	for line := range strings.Lines(block) {
		line = strings.TrimPrefix(strings.TrimPrefix(line, "//"), "\t")
		b.WriteString(line)
	}
	s, err := Parse("doc.yaml", []byte(b.String()), exampleOptions()...)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(s.Rules()) != 3 || len(s.Limits()) != 5 {
		t.Errorf("%d rules, %d limits", len(s.Rules()), len(s.Limits()))
	}
}

// TestParseCalendar: a calendar rate is the fixed window's whatever the
// default algorithm.
func TestParseCalendar(t *testing.T) {
	src := "defaults: {algorithm: token-bucket}\nrules:\n  - name: a\n    limits:\n      - {name: quota, rate: 1000/1mo tz=Europe/Berlin, key: ip}\n"
	s, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := s.Limit("a/quota").Policy()
	if p.Algorithm != core.FixedWindow || p.Calendar != core.CalendarMonth || p.Zone != "Europe/Berlin" {
		t.Errorf("policy %v (%#v); want a Berlin calendar month on the fixed window", p, p)
	}
}
