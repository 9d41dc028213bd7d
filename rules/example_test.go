package rules_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/rules"
)

func Example() {
	const file = `
rules:
  - name: login
    match: {routes: [/login], methods: [POST]}
    limits:
      - {name: per-account, rate: 5/1m algorithm=sliding-log, key: email:username, failure: closed}
      - {name: per-ip, rate: 20/1m, key: ip}
  - name: everything-else
    limits:
      - {name: per-ip, rate: 100/1m, key: ip}
`
	set, err := rules.Parse("rules.yaml", []byte(file))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, req := range []struct{ method, pattern, body string }{
		{"POST", "POST /login", "username=Ana@Example.com"},
		{"GET", "GET /items/{id}", ""},
	} {
		r := httptest.NewRequest(req.method, "/", strings.NewReader(req.body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Pattern = req.pattern
		view := keyfunc.FromHTTP(r)
		rule, err := set.Match(view)
		if err != nil {
			fmt.Println(err)
			return
		}
		keys, err := rule.Keys(view, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(req.method, req.pattern, "->", rule.Name())
		for i, l := range rule.Limits() {
			fmt.Printf("  %s: %v, key %q, on failure %v\n", l.ID(), l.Policy(), keys[i], l.Failure())
		}
	}
	// Output:
	// POST POST /login -> login
	//   login/per-account: 5/1m algorithm=sliding-log name=per-account, key "ana@example.com", on failure closed
	//   login/per-ip: 20/1m name=per-ip, key "192.0.2.1", on failure open
	// GET GET /items/{id} -> everything-else
	//   everything-else/per-ip: 100/1m name=per-ip, key "192.0.2.1", on failure open
}

func ExampleCompare() {
	old, _ := rules.Parse("v1.yaml", []byte(`rules: [{name: api, limits: [{name: per-ip, rate: 100/1m, key: ip}, {name: daily, rate: 10000/1d, key: ip}]}]`))
	new, _ := rules.Parse("v2.yaml", []byte(`rules: [{name: api, limits: [{name: per-ip, rate: 200/1m, key: ip}, {name: per-key, rate: 50/1s, key: "header:X-Api-Key"}]}]`))
	d := rules.Compare(old, new)
	for _, c := range d.Changed {
		fmt.Printf("changed %s: %v -> %v\n", c.ID, c.Old.Policy(), c.New.Policy())
	}
	fmt.Println("added", d.Added, "removed", d.Removed)
	// Output:
	// changed api/per-ip: 100/1m name=per-ip -> 200/1m name=per-ip
	// added [api/per-key] removed [api/daily]
}

func ExampleLimiter() {
	const file = `
rules:
  - name: api
    limits:
      - {name: per-ip, rate: 3/1m algorithm=fixed-window, key: ip}
      - {name: per-route, rate: 100/1m algorithm=fixed-window, key: route, cost: 10}
      - {name: trial, rate: 2/1m algorithm=fixed-window, key: ip, shadow: true}
`
	set, err := rules.Parse("rules.yaml", []byte(file))
	if err != nil {
		fmt.Println(err)
		return
	}
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, err := rules.NewLimiter(set, core.WithClock(clock)) // or a *rules.Source, followed on reload
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limiter.Close()
	r := httptest.NewRequest("GET", "/items/1", nil)
	r.Pattern = "GET /items/{id}"
	req := keyfunc.FromHTTP(r)
	var d rules.Decision // reused: no allocation per request
	for i := 1; i <= 4; i++ {
		if err := limiter.Decide(context.Background(), req, &d); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("request %d: allowed %v by %s, %d left; per-route %d left; trial allows %v\n",
			i, d.Allowed, d.Limits[d.Layer].ID(), d.Remaining, d.Layers[1].Remaining, d.Shadow[0].Decision.Allowed)
	}
	// Output:
	// request 1: allowed true by api/per-ip, 2 left; per-route 90 left; trial allows true
	// request 2: allowed true by api/per-ip, 1 left; per-route 80 left; trial allows true
	// request 3: allowed true by api/per-ip, 0 left; per-route 70 left; trial allows false
	// request 4: allowed false by api/per-ip, 0 left; per-route 70 left; trial allows false
}
