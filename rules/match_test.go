package rules

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

const matchYAML = `
rules:
  - name: login
    match: {routes: [/login], methods: [POST]}
    limits: [{name: x, rate: 5/1m, key: ip}]
  - name: admin
    match:
      routes: [/admin/*]
      headers: {x-role: [admin, root]}
    limits: [{name: x, rate: 5/1m, key: ip}]
  - name: keyed
    match:
      headers: {X-Api-Key: ["*"]}
      methods: [GET, delete]
    limits: [{name: x, rate: 5/1m, key: header:X-Api-Key}]
  - name: paid
    match: {plans: [pro, enterprise], routes: [/api/*, /export]}
    limits: [{name: x, rate: 5/1m, key: ip}]
  - name: rest
    limits: [{name: x, rate: 5/1m, key: ip}]
`

func TestMatch(t *testing.T) {
	plans := 0
	plan := func(r keyfunc.Request) (string, error) {
		plans++
		if v := r.Header("X-Plan"); len(v) > 0 {
			if v[0] == "broken" {
				return "", errors.New("plan store down")
			}
			return v[0], nil
		}
		return "free", nil
	}
	s, err := Parse("m.yaml", []byte(matchYAML), WithPlan(plan))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, route string
		headers       map[string]string
		want          string
		plans         int // calls of the plan function
	}{
		{"POST", "/login", nil, "login", 0},
		{"post", "/login", nil, "login", 0}, // a respelled method is the method
		{"pOsT", "/login", nil, "login", 0}, // in any case
		{"GET", "/login", nil, "rest", 0},   // another method
		{"POSTX", "/login", nil, "rest", 0}, // an unknown method matches no listed one
		{"POST", "/login/", nil, "rest", 0}, // routes are exact
		{"GET", "/admin/users", map[string]string{"X-Role": "admin"}, "admin", 0},
		{"GET", "/admin/users", map[string]string{"x-role": " root\t"}, "admin", 0}, // surrounding white space
		{"GET", "/admin/users", map[string]string{"X-Role": "Admin"}, "rest", 0},    // values are exact
		{"GET", "/admin", map[string]string{"X-Role": "admin"}, "rest", 0},          // "/admin/*" is below /admin
		{"GET", "/admin/", map[string]string{"X-Role": "admin"}, "admin", 0},
		{"HEAD", "/x", map[string]string{"X-Api-Key": "k"}, "keyed", 0}, // HEAD is GET
		{"DELETE", "/x", map[string]string{"X-Api-Key": "k"}, "keyed", 0},
		{"PUT", "/x", map[string]string{"X-Api-Key": "k"}, "rest", 0},
		{"GET", "/x", map[string]string{"X-Api-Key": " "}, "rest", 0}, // an empty value is no value
		{"GET", "/api/v1", map[string]string{"X-Plan": "pro"}, "paid", 1},
		{"GET", "/export", map[string]string{"X-Plan": "enterprise"}, "paid", 1},
		{"GET", "/other", map[string]string{"X-Plan": "pro"}, "rest", 0}, // no route: the plan is not asked
		{"GET", "/api/v1", map[string]string{"X-Plan": "free"}, "rest", 1},
	}
	for _, tt := range tests {
		plans = 0
		r, err := s.Match(newRequest(tt.method, tt.route, tt.headers))
		if err != nil {
			t.Errorf("%s %s %v: %v", tt.method, tt.route, tt.headers, err)
			continue
		}
		if r == nil || r.Name() != tt.want || plans != tt.plans {
			t.Errorf("%s %s %v: rule %v after %d plan calls; want %s after %d", tt.method, tt.route, tt.headers, r, plans, tt.want, tt.plans)
		}
	}
	// An unknown route, where a rule lists routes, is no rule passed over:
	// the next one ("rest") would limit a login laxly.
	if r, err := s.Match(newRequest("POST", "", nil)); r != nil || !errors.Is(err, keyfunc.ErrNoKey) {
		t.Errorf("an unknown route: rule %v, err %v; want an error wrapping keyfunc.ErrNoKey", r, err)
	}
	_, err = s.Match(newRequest("GET", "/api/v1", map[string]string{"X-Plan": "broken"}))
	if err == nil || err.Error() != "rules: plan: plan store down" {
		t.Errorf("plan error: %v", err)
	}
}

func TestMatchNone(t *testing.T) {
	s, err := New(Config{Rules: []RuleConfig{{
		Name:   "login",
		Match:  MatchConfig{Routes: []string{"/login"}},
		Limits: []LimitConfig{{Name: "x", Rate: "1/s", Key: []string{"ip"}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Match(newRequest("GET", "/", nil)); r != nil || err != nil {
		t.Errorf("Match = %v, %v; want nil, nil", r, err)
	}
}

func TestMethodBit(t *testing.T) {
	for i, m := range methodNames {
		if got := methodBit(m); got != 1<<i {
			t.Errorf("methodBit(%s) = %b", m, got)
		}
	}
	for m, want := range map[string]uint16{"head": 1, "Head": 1, "HEAD": 1, "trace": 1 << 7, "connect": 1 << 6, "": 0, "GETS": 0, "PROPFIND": 0, "G\u0130T": 0} {
		if got := methodBit(m); got != want {
			t.Errorf("methodBit(%q) = %b, want %b", m, got, want)
		}
	}
}

// benchSet is ten rules, the last of them matching everything.
func benchSet(b *testing.B) *Set {
	var cfg Config
	for i := range 9 {
		cfg.Rules = append(cfg.Rules, RuleConfig{
			Name: fmt.Sprintf("r%d", i),
			Match: MatchConfig{
				Routes:  []string{fmt.Sprintf("/r%d/{id}", i), fmt.Sprintf("/p%d/*", i)},
				Methods: []string{"POST", "PUT"},
				Headers: map[string][]string{"X-Tier": {"gold"}},
			},
			Limits: []LimitConfig{{Name: "x", Rate: "100/1m", Key: []string{"ip"}}},
		})
	}
	cfg.Rules = append(cfg.Rules, RuleConfig{Name: "rest", Limits: []LimitConfig{{Name: "x", Rate: "100/1m", Key: []string{"ip"}}}})
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkMatch matches requests against ten rules: the first rule, the last
// (checking route, method and header of nine before it), and a prefix route.
func BenchmarkMatch(b *testing.B) {
	s := benchSet(b)
	for _, bc := range []struct {
		name string
		req  keyfunc.Request
		want string
	}{
		{"first", newRequest("POST", "/r0/{id}", map[string]string{"X-Tier": "gold"}), "r0"},
		{"last", newRequest("POST", "/r9/{id}", map[string]string{"X-Tier": "gold"}), "rest"},
		{"prefix", newRequest("put", "/p8/a/b", map[string]string{"X-Tier": "gold"}), "r8"},
		{"header-miss", newRequest("POST", "/r8/{id}", map[string]string{"X-Tier": "silver"}), "rest"},
		{"http-last", httpRequest("POST", "/r9/{id}", "X-Tier", "gold"), "rest"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := s.Match(bc.req)
				if err != nil || r.name != bc.want {
					b.Fatalf("%v %v", r, err)
				}
			}
		})
	}
}

// httpRequest is the keyfunc.FromHTTP view of a request to route.
func httpRequest(method, route string, header ...string) keyfunc.Request {
	r := httptest.NewRequest(method, "/", nil)
	r.Pattern = route
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return keyfunc.FromHTTP(r)
}

func TestMatchAllocs(t *testing.T) {
	s, err := Parse("m.yaml", []byte(matchYAML), WithPlan(func(keyfunc.Request) (string, error) { return "pro", nil }))
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []keyfunc.Request{
		newRequest("GET", "/admin/x", map[string]string{"X-Role": "root"}),
		newRequest("post", "/export", nil),
		newRequest("GET", "/none", map[string]string{"X-Api-Key": "k"}),
		httpRequest("DELETE", "/admin/x", "X-Role", "admin"),
	} {
		if n := testing.AllocsPerRun(100, func() { _, _ = s.Match(req) }); n != 0 {
			t.Errorf("Match allocates %v times per call", n)
		}
	}
}

// A route's parameters match in either syntax, so that one file serves chi
// and gin; a chi pattern the colon syntax cannot spell matches as written.
func TestRouteSpellings(t *testing.T) {
	set, err := Parse("r.yaml", []byte(`
rules:
  - name: items
    match: {routes: ["/items/{id}", "/users/:user/keys/{key}", "/n/{id:[0-9]+}"]}
    limits: [{name: l, rate: 1/1m, key: ip}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for route, want := range map[string]bool{
		"/items/{id}":             true,
		"/items/:id":              true,
		"/users/{user}/keys/:key": true,
		"/users/:user/keys/{key}": true,
		"/n/{id:[0-9]+}":          true,
		"/n/:id":                  false,
		"/items/:id/more":         false,
		"/items/*":                false,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Pattern = route
		rule, err := set.Match(keyfunc.FromHTTP(r))
		if err != nil || (rule != nil) != want {
			t.Errorf("%s: rule %v, err %v; want a match: %v", route, rule, err, want)
		}
	}
}
