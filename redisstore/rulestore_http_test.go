package redisstore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/rules"
	"github.com/redis/go-redis/v9"
)

const httpRules = `
rules:
  - name: login
    match: {routes: [/login]}
    limits:
      - {name: per-account, rate: 3/1m algorithm=fixed-window, key: "header:X-Account", failure: closed}
      - {name: per-ip, rate: 5/1m algorithm=fixed-window, key: ip}
`

// A Limiter on Redis in the middleware: both limits of a login decided
// together, their headers, a 429 naming the limit that refused; with Redis
// down, the closed limit answers 503 with a Retry-After.
func TestRuleStoreInMiddleware(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	serve := func(client redis.UniversalClient) func(account string) *httptest.ResponseRecorder {
		set, err := rules.Parse("rules.yaml", []byte(httpRules))
		if err != nil {
			t.Fatal(err)
		}
		lim := mustStoreLimiter(t, set, mustRuleStore(t, client, WithClock(clock), WithPrefix(uniquePrefix(t.Name()))))
		h := httplimit.Middleware(lim, httplimit.WithClock(clock))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		return func(account string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("POST", "/login", nil)
			r.Pattern = "/login"
			r.Header.Set("X-Account", account)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
	}
	do := serve(newClient(t, singleNode(t)))
	for i := range 3 {
		if w := do("alice"); w.Code != 200 || w.Header().Get("RateLimit") == "" {
			t.Fatalf("login %d: %d %v", i+1, w.Code, w.Header())
		}
	}
	if w := do("alice"); w.Code != 429 {
		t.Fatalf("4th login: %d %s", w.Code, w.Body)
	}
	for i := range 2 {
		if w := do("bob"); w.Code != 200 {
			t.Fatalf("bob's login %d: %d (alice's denial counted on the IP?)", i+1, w.Code)
		}
	}
	if w := do("carol"); w.Code != 429 {
		t.Fatalf("6th login from one IP: %d", w.Code)
	}
	dead := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { dead.Close() })
	do = serve(dead)
	if w := do("alice"); w.Code != 503 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("with Redis down: %d %v", w.Code, w.Header())
	}
}

// A Limiter on Redis made by NewObservedStoreLimiter reports each limit's
// decision, the shadow limit's, each refund and each reset, by rule and
// limit name.
func TestRuleStoreObserved(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: login
    limits:
      - {name: per-account, rate: 3/1m algorithm=fixed-window, key: "header:X-Account"}
      - {name: per-ip, rate: 5/1m algorithm=fixed-window, key: ip}
      - {name: watch, rate: 1/1m algorithm=fixed-window, key: ip, shadow: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	var mu sync.Mutex
	var got []string
	obs := observe.ObserverFunc(func(_ context.Context, e observe.Event) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%s %s/%s allowed=%v left=%d shadow=%v err=%v", e.Op, e.Rule, e.Policy, e.Decision.Allowed, e.Decision.Remaining, e.Shadow, e.Err))
	})
	lim, err := rules.NewObservedStoreLimiter(set, mustRuleStore(t, newClient(t, singleNode(t)), WithClock(clock), WithPrefix(uniquePrefix(t.Name()))), obs)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	var d rules.Decision
	r := &ruleRequest{route: "/login", remote: "203.0.113.7:1", header: textproto.MIMEHeader{"X-Account": {"alice"}}}
	if err := lim.Decide(context.Background(), r, &d); err != nil || !d.Allowed {
		t.Fatal(err, d.LayeredDecision)
	}
	if err := d.Refund(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"allow login/per-account allowed=true left=2 shadow=false err=<nil>",
		"allow login/per-ip allowed=true left=4 shadow=false err=<nil>",
		"allow login/watch allowed=true left=0 shadow=true err=<nil>",
		"refund login/per-account allowed=false left=0 shadow=false err=<nil>",
		"refund login/per-ip allowed=false left=0 shadow=false err=<nil>",
		"refund login/watch allowed=false left=0 shadow=true err=<nil>",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := lim.Decide(context.Background(), r, &d); err != nil || !d.Allowed || d.Layers[0].Remaining != 2 || d.Shadow[0].Decision.Remaining != 0 || !d.Shadow[0].Decision.Allowed {
		t.Fatalf("after the refund: %v, %+v, shadow %+v", err, d.LayeredDecision, d.Shadow)
	}
}

// BenchmarkRuleStoreDecide decides a rule of two limits (a key each) and a
// shadow limit on one Redis server, on the server's TIME: two scripts a
// request (the enforced limits', the shadow limit's), one key.
func BenchmarkRuleStoreDecide(b *testing.B) {
	set, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: api
    limits:
      - {name: per-account, rate: 1000000000/1h algorithm=fixed-window, key: "header:X-Account"}
      - {name: per-ip, rate: 1000000000/1h, key: ip}
      - {name: watch, rate: 1000000000/1h algorithm=fixed-window, key: ip, shadow: true}
`))
	if err != nil {
		b.Fatal(err)
	}
	lim := mustStoreLimiter(b, set, mustRuleStore(b, newClient(b, singleNode(b)), WithPrefix(uniquePrefix(b.Name()))))
	r := &ruleRequest{route: "/x", remote: "203.0.113.7:1", header: textproto.MIMEHeader{"X-Account": {"alice"}}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var d rules.Decision
		for pb.Next() {
			if err := lim.Decide(context.Background(), r, &d); err != nil || !d.Allowed {
				b.Fatal(err)
			}
		}
	})
}
