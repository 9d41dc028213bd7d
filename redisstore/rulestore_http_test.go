package redisstore

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
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
