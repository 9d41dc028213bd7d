package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

func newTestServer(t *testing.T) (http.Handler, *core.ManualClock, *accounts) {
	t.Helper()
	clock := core.NewManualClock(demoStart)
	accts := newAccounts()
	h, err := newServer(clock, accts)
	if err != nil {
		t.Fatal(err)
	}
	return h, clock, accts
}

// expect sends one request and checks its status and, when not empty, its
// RateLimit and Retry-After headers.
func expect(t *testing.T, h http.Handler, key, method, path string, status int, rateLimit, retryAfter string) {
	t.Helper()
	w := do(h, key, method, path)
	if w.Code != status {
		t.Fatalf("%s %s with %s: status %d (%s), want %d", method, path, key, w.Code, w.Body, status)
	}
	if got := w.Header().Get("RateLimit"); rateLimit != "" && got != rateLimit {
		t.Fatalf("%s %s with %s: RateLimit %q, want %q", method, path, key, got, rateLimit)
	}
	if got := w.Header().Get("Retry-After"); got != retryAfter {
		t.Fatalf("%s %s with %s: Retry-After %q, want %q", method, path, key, got, retryAfter)
	}
}

func TestPlans(t *testing.T) {
	for _, tc := range []struct {
		plan  string
		limit int
	}{{"free", 60}, {"pro", 1000}, {"enterprise", 20000}} {
		t.Run(tc.plan, func(t *testing.T) {
			h, clock, _ := newTestServer(t)
			key := "demo-" + tc.plan
			if got := send(h, clock, key, "GET", "/v1/items", tc.limit+1, 0); got != tc.limit {
				t.Fatalf("%d reads at once served, want %d", got, tc.limit)
			}
			w := do(h, key, "GET", "/v1/items")
			if got, want := w.Header().Get("RateLimit-Policy"), `"`+tc.plan+`";q=`+strconv.Itoa(tc.limit)+";w=60"; got != want {
				t.Errorf("RateLimit-Policy %q, want %q", got, want)
			}
		})
	}
}

// A free key at its limit is upgraded: its next request is decided by pro.
func TestUpgrade(t *testing.T) {
	h, clock, accts := newTestServer(t)
	send(h, clock, "demo-free", "GET", "/v1/items", 60, 0)
	expect(t, h, "demo-free", "GET", "/v1/items", 429, `"free";r=0;t=1`, "1")
	accts.setPlan("demo-free", "pro")
	expect(t, h, "demo-free", "GET", "/v1/items", 200, `"pro";r=999;t=1`, "")
	accts.setPlan("demo-free", "free") // back on free: its usage is still counted
	expect(t, h, "demo-free", "GET", "/v1/items", 429, `"free";r=0;t=1`, "1")
	clock.Advance(time.Second)
	expect(t, h, "demo-free", "GET", "/v1/items", 200, `"free";r=0;t=60`, "")
}

// An export costs 50 of the plan's units; what is left serves reads.
func TestExportCost(t *testing.T) {
	h, clock, _ := newTestServer(t)
	expect(t, h, "demo-free", "GET", "/v1/export", 200, `"free";r=10;t=50`, "")
	expect(t, h, "demo-free", "GET", "/v1/export", 429, `"free";r=0;t=40`, "40")
	expect(t, h, "demo-free", "GET", "/v1/items", 200, `"free";r=9;t=51`, "")
	clock.Advance(41 * time.Second)
	expect(t, h, "demo-free", "GET", "/v1/export", 200, `"free";r=0;t=60`, "")
}

// SMS: 1 per second and 10 per calendar day, both counted only when both
// pass, whatever the plan.
func TestSMSLayered(t *testing.T) {
	h, clock, _ := newTestServer(t)
	expect(t, h, "demo-enterprise", "POST", "/v1/sms", 202, `"sms-second";r=0;t=1, "sms-day";r=9;t=43200`, "")
	expect(t, h, "demo-enterprise", "POST", "/v1/sms", 429, `"sms-second";r=0;t=1, "sms-day";r=9;t=43200`, "1")
	for i := 2; i <= 10; i++ {
		clock.Advance(time.Second)
		expect(t, h, "demo-enterprise", "POST", "/v1/sms", 202, "", "")
	}
	clock.Advance(time.Second)
	// Noon plus 10 s: the day ends in 11h59m50s = 43190 s. The denial
	// counted nothing: sms-second is full, with nothing to reset.
	expect(t, h, "demo-enterprise", "POST", "/v1/sms", 429, `"sms-second";r=1;t=0, "sms-day";r=0;t=43190`, "43190")
	// Another account has its own count.
	expect(t, h, "demo-free", "POST", "/v1/sms", 202, "", "")
	clock.Set(demoStart.Add(12 * time.Hour))
	expect(t, h, "demo-enterprise", "POST", "/v1/sms", 202, `"sms-second";r=0;t=1, "sms-day";r=9;t=86400`, "")
}

func TestUnknownKey(t *testing.T) {
	h, _, _ := newTestServer(t)
	if w := do(h, "no-such-key", "GET", "/v1/items"); w.Code != http.StatusUnauthorized {
		t.Fatalf("unknown key: status %d, want 401", w.Code)
	}
}

func TestDemo(t *testing.T) {
	var b strings.Builder
	if err := runDemo(&b); err != nil {
		t.Fatal(err)
	}
	want := `plan        reads at once  exports at once (50 units)  SMS, 2 a second for 1 min (1/s and 10/day)
free        60             1                           10
pro         1000           20                          10
enterprise  20000          400                         10
`
	if b.String() != want {
		t.Fatalf("demo printed:\n%s\nwant:\n%s", b.String(), want)
	}
}
