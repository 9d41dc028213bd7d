// Command tiers is an API limited by plan, by route cost and by layered
// limits, on net/http with chilimit:
//
//	go run ./examples/tiers              # serve on 127.0.0.1:8080 (-addr to change)
//	go run ./examples/tiers -demo        # print what each plan gets, on a manual clock
//
// Callers send an API key in X-API-Key; the demo keys are demo-free,
// demo-pro and demo-enterprise. Every /v1/ route is limited per account by
// the account's plan (a [core.Tiered] limiter): free 60, pro 1,000 and
// enterprise 20,000 units per minute, as token buckets. GET /v1/items
// costs 1 unit and GET /v1/export 50. POST /v1/sms has its own layered
// limit instead (a [core.Layered] limiter): 1 per second and 10 per
// calendar day per account, both of which must pass.
//
//	curl -si -H 'X-API-Key: demo-free' http://127.0.0.1:8080/v1/export
//	curl -si -H 'X-API-Key: demo-free' -X POST http://127.0.0.1:8080/v1/sms
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ratekit/ratekit/chilimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

func main() {
	fs := flag.NewFlagSet("tiers", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	demo := fs.Bool("demo", false, "print what each plan gets on a manual clock, and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if *demo {
		if err := runDemo(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "tiers:", err)
			os.Exit(1)
		}
		return
	}
	h, err := newServer(core.SystemClock{}, newAccounts())
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("tiers: listening on http://%s (keys: demo-free, demo-pro, demo-enterprise)", *addr)
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// Plans: units per minute per account, as token buckets.
var plans = map[string]core.Policy{
	"free":       {Limit: 60, Window: time.Minute},
	"pro":        {Limit: 1000, Window: time.Minute},
	"enterprise": {Limit: 20000, Window: time.Minute},
}

// Costs of the routes under the plan limit.
const (
	itemsCost  = 1
	exportCost = 50
)

// SMS limits per account: both must pass, and a denied message counts in
// neither.
var (
	smsPerSecond = core.Policy{Name: "sms-second", Limit: 1, Window: time.Second}
	smsPerDay    = core.Policy{Name: "sms-day", Algorithm: core.FixedWindow, Limit: 10, Window: 24 * time.Hour}
)

// account is who an API key belongs to.
type account struct {
	ID   string
	Plan string
}

// accounts maps API keys to accounts: a stand-in for your database. A plan
// changed with setPlan applies to the account's next request.
type accounts struct {
	mu    sync.RWMutex
	byKey map[string]account
}

func newAccounts() *accounts {
	return &accounts{byKey: map[string]account{
		"demo-free":       {"acct-1", "free"},
		"demo-pro":        {"acct-2", "pro"},
		"demo-enterprise": {"acct-3", "enterprise"},
	}}
}

func (a *accounts) lookup(apiKey string) (account, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	acct, ok := a.byKey[apiKey]
	return acct, ok
}

func (a *accounts) setPlan(apiKey, plan string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	acct := a.byKey[apiKey]
	acct.Plan = plan
	a.byKey[apiKey] = acct
}

// accountKey is the context key of the authenticated account's ID, the
// key every limit counts by; planKey that of its plan.
type (
	accountKey struct{}
	planKey    struct{}
)

// authenticate resolves X-API-Key to an account and puts its ID and plan in
// the request's context; unknown keys get 401.
func authenticate(accts *accounts, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acct, ok := accts.lookup(r.Header.Get("X-API-Key"))
		if !ok {
			http.Error(w, "unknown API key", http.StatusUnauthorized)
			return
		}
		ctx := context.WithValue(r.Context(), accountKey{}, acct.ID)
		ctx = context.WithValue(ctx, planKey{}, acct.Plan)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// planOf reads the plan that authenticate put in the context: no lookup
// per limit, and the plan is the one of this very request.
func planOf(ctx context.Context, _ string) (string, error) {
	plan, ok := ctx.Value(planKey{}).(string)
	if !ok {
		return "", errors.New("no plan in the context")
	}
	return plan, nil
}

// cost weighs a request by its route pattern: an export costs 50 reads.
func cost(r keyfunc.Request) (int64, error) {
	if r.Route() == "/v1/export" {
		return exportCost, nil
	}
	return itemsCost, nil
}

// newServer returns the API with its limiters reading clock.
func newServer(clock core.Clock, accts *accounts) (http.Handler, error) {
	tiered, err := core.NewTiered(plans, planOf, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	perSecond, err := core.New(smsPerSecond, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	perDay, err := core.New(smsPerDay, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	sms, err := core.NewLayered(perSecond, perDay)
	if err != nil {
		return nil, err
	}
	byAccount := httplimit.WithKey(keyfunc.ContextValue(accountKey{}))
	// Behind the authentication a missing account is a bug: refuse, never
	// fall back to the client's address.
	strict := httplimit.WithNoKey(httplimit.RefuseKey())
	// The plan limit fails closed: a PlanFunc error must not mean unlimited.
	planLimit := chilimit.New(tiered, byAccount, strict, httplimit.WithCost(cost),
		httplimit.WithErrorPolicy(core.FailClosed()), httplimit.WithClock(clock))
	smsLimit := chilimit.New(sms, byAccount, strict, httplimit.WithClock(clock))

	mux := http.NewServeMux()
	mux.Handle("GET /v1/items", planLimit(http.HandlerFunc(items)))
	mux.Handle("GET /v1/export", planLimit(http.HandlerFunc(export)))
	mux.Handle("POST /v1/sms", smsLimit(http.HandlerFunc(sendSMS)))
	return authenticate(accts, mux), nil
}

func items(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"items":[]}`+"\n") }

func export(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/csv")
	io.WriteString(w, "id,name\n")
}

func sendSMS(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusAccepted)
	io.WriteString(w, `{"status":"queued"}`+"\n")
}

// demoStart is the demo's manual clock: noon, so that the SMS day ends at
// midnight UTC, twelve hours later.
var demoStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// runDemo sends each plan's key a burst of reads, a burst of exports and a
// minute of SMS attempts, each against a fresh server on a manual clock,
// and prints what got through.
func runDemo(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "plan\treads at once\texports at once (50 units)\tSMS, 2 a second for 1 min (1/s and 10/day)")
	for _, plan := range []string{"free", "pro", "enterprise"} {
		key := "demo-" + plan
		var row [3]int
		for i, traffic := range []func(h http.Handler, clock *core.ManualClock) int{
			func(h http.Handler, clock *core.ManualClock) int {
				return send(h, clock, key, "GET", "/v1/items", 25000, 0)
			},
			func(h http.Handler, clock *core.ManualClock) int {
				return send(h, clock, key, "GET", "/v1/export", 1000, 0)
			},
			func(h http.Handler, clock *core.ManualClock) int {
				return send(h, clock, key, "POST", "/v1/sms", 120, 500*time.Millisecond)
			},
		} {
			clock := core.NewManualClock(demoStart)
			h, err := newServer(clock, newAccounts())
			if err != nil {
				return err
			}
			row[i] = traffic(h, clock)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", plan, row[0], row[1], row[2])
	}
	return tw.Flush()
}

// send sends n requests, every after apart (0: at one instant, stopping
// at the first refusal), and returns how many were served.
func send(h http.Handler, clock *core.ManualClock, key, method, path string, n int, every time.Duration) int {
	served := 0
	for range n {
		if code := do(h, key, method, path).Code; code < 300 {
			served++
		} else if every == 0 {
			break
		}
		clock.Advance(every)
	}
	return served
}

func do(h http.Handler, key, method, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.Header.Set("X-API-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
