package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/exampletest"
)

// serve starts the API on a 127.0.0.1 listener with a manual clock and
// returns its base URL.
func serve(t *testing.T) (string, *core.ManualClock) {
	t.Helper()
	clock := exampletest.NewClock()
	e, err := newServer(clock)
	if err != nil {
		t.Fatal(err)
	}
	return exampletest.Serve(t, e), clock
}

// expect sends GET path and checks the status and headers; an empty
// want means the header must be absent. It returns the body.
func expect(t *testing.T, url, path string, status int, headers map[string]string) string {
	t.Helper()
	res, body := exampletest.Send(t, "GET", url+path, "")
	exampletest.Expect(t, "GET "+path, res, body, status, headers)
	return body
}

func TestCost(t *testing.T) {
	url, clock := serve(t)
	expect(t, url, "/v1/report?days=30", http.StatusOK, map[string]string{
		"RateLimit-Policy": `"api";q=60;w=60`,
		"RateLimit":        `"api";r=30;t=30`,
	})
	// 30 units left, 31 asked: denied, and it counts nothing.
	body := expect(t, url, "/v1/report?days=31", http.StatusTooManyRequests, map[string]string{
		"RateLimit":     `"api";r=0;t=1`,
		"Retry-After":   "1",
		"Content-Type":  "application/problem+json",
		"Cache-Control": "no-store",
	})
	exampletest.ExpectProblem(t, body, "api", "Try again in 1 second.")
	expect(t, url, "/v1/items", http.StatusOK, map[string]string{"RateLimit": `"api";r=29;t=31`, "Retry-After": ""})
	expect(t, url, "/v1/report", http.StatusOK, map[string]string{"RateLimit": `"api";r=22;t=38`}) // 7 days by default
	// A malformed request costs 1, however many days it asks for.
	expect(t, url, "/v1/report?days=1000", http.StatusBadRequest, map[string]string{"RateLimit": `"api";r=21;t=39`})
	expect(t, url, "/v1/report?days=x", http.StatusBadRequest, map[string]string{"RateLimit": `"api";r=20;t=40`})
	expect(t, url, "/v1/report?days=21", http.StatusTooManyRequests, map[string]string{"Retry-After": "1"})

	clock.Advance(time.Second) // one unit a second
	expect(t, url, "/v1/report?days=21", http.StatusOK, map[string]string{"RateLimit": `"api";r=0;t=60`})
	expect(t, url, "/v1/items", http.StatusTooManyRequests, map[string]string{"RateLimit": `"api";r=0;t=1`, "Retry-After": "1"})
}
