package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
)

const ipA = "203.0.113.7"

func init() { gin.SetMode(gin.TestMode) }

// get serves one GET from ip in-process.
func get(h http.Handler, ip, path string) *http.Response {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = ip + ":50000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

// TestSmoke drives the server through a known workload on a manual clock
// and checks the responses, the rate headers, the metrics and the log.
func TestSmoke(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := newServer(config{clock: clock, logger: logger, salt: []byte("pepper")})
	if err != nil {
		t.Fatal(err)
	}

	// "api": 10 of 12 requests pass; its shadow "api-v2" would pass 5.
	var codes []int
	for i := range 12 {
		resp := get(h, ipA, "/hello")
		codes = append(codes, resp.StatusCode)
		if i == 0 {
			checkHeader(t, resp, "RateLimit-Policy", `"api";q=10;w=60`)
			checkHeader(t, resp, "RateLimit", `"api";r=9;t=6`)
		}
		if i == 10 {
			checkHeader(t, resp, "Retry-After", "6")
			checkHeader(t, resp, "Content-Type", "application/problem+json")
		}
	}
	checkCodes(t, "/hello", codes, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429)

	// "export": its own limiter, 2 a minute; "api" does not count it.
	codes = nil
	for i := range 3 {
		resp := get(h, ipA, "/export")
		codes = append(codes, resp.StatusCode)
		if i == 0 {
			checkHeader(t, resp, "RateLimit", `"export";r=1;t=30`)
		}
	}
	checkCodes(t, "/export", codes, 200, 200, 429)

	resp := get(h, ipA, "/metrics") // never limited
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: status %d", resp.StatusCode)
	}
	for _, line := range []string{
		`ratekit_decisions_total{outcome="allowed",policy="api",rule=""} 10`,
		`ratekit_decisions_total{outcome="denied",policy="api",rule=""} 2`,
		`ratekit_decisions_total{outcome="error",policy="api",rule=""} 0`,
		`ratekit_decisions_total{outcome="allowed",policy="export",rule=""} 2`,
		`ratekit_decisions_total{outcome="denied",policy="export",rule=""} 1`,
		`ratekit_shadow_decisions_total{outcome="allowed",policy="api-v2",rule=""} 5`,
		`ratekit_shadow_decisions_total{outcome="denied",policy="api-v2",rule=""} 7`,
		`ratekit_store_latency_seconds_count{policy="api",rule=""} 12`,
		`ratekit_store_latency_seconds_count{policy="export",rule=""} 3`,
		`ratekit_memory_keys{policy="api"} 1`,
		`ratekit_memory_keys{policy="export"} 1`,
		`ratekit_memory_lossy_evictions_total{policy="api"} 0`,
	} {
		if !strings.Contains(string(body), "\n"+line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if strings.Contains(string(body), ipA) {
		t.Error("/metrics shows a client address")
	}

	// The log has 2+7+1 denials, with the key hashed, never in clear.
	log := logs.String()
	hash := "key_hash=" + observe.KeyHash([]byte("pepper"), ipA)
	if n := strings.Count(log, `msg="ratekit: denied"`); n != 10 {
		t.Errorf("%d denials logged, want 10:\n%s", n, log)
	}
	if n := strings.Count(log, hash); n != 10 {
		t.Errorf("%d lines with %s, want 10", n, hash)
	}
	if strings.Contains(log, ipA) {
		t.Errorf("the log shows the client address:\n%s", log)
	}
}

func checkHeader(t *testing.T, resp *http.Response, name, want string) {
	t.Helper()
	if got := resp.Header.Get(name); got != want {
		t.Errorf("%s = %q, want %q", name, got, want)
	}
}

func checkCodes(t *testing.T, path string, got []int, want ...int) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: statuses %v, want %v", path, got, want)
	}
}
