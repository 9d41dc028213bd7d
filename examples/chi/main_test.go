package main

import (
	"encoding/json"
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
	h, err := newServer(clock)
	if err != nil {
		t.Fatal(err)
	}
	return exampletest.Serve(t, h), clock
}

var (
	send          = exampletest.Send
	expect        = exampletest.Expect
	expectProblem = exampletest.ExpectProblem
)

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestPerRouteLimits(t *testing.T) {
	url, clock := serve(t)
	for i := range 10 {
		res, body := send(t, "POST", url+"/v1/items", `{"name":"x"}`)
		expect(t, "write", res, body, http.StatusCreated, map[string]string{
			"RateLimit-Policy": `"writes";q=10;w=60`,
			"RateLimit":        `"writes";r=` + itoa(9-i) + ";t=120", // empty after two windows
		})
	}
	res, body := send(t, "POST", url+"/v1/items", `{"name":"x"}`)
	// The sliding window: at 12:01:06 the estimate 10·54/60 + 0 leaves room
	// for one.
	expect(t, "eleventh write", res, body, http.StatusTooManyRequests, map[string]string{
		"RateLimit-Policy": `"writes";q=10;w=60`,
		"RateLimit":        `"writes";r=0;t=66`,
		"Retry-After":      "66",
		"Content-Type":     "application/problem+json",
		"Cache-Control":    "no-store",
	})
	expectProblem(t, body, "writes", "Try again in 66 seconds.")

	// Reads have their own limit, in both read routes.
	res, body = send(t, "GET", url+"/v1/items", "")
	expect(t, "read", res, body, http.StatusOK, map[string]string{"RateLimit": `"reads";r=99;t=1`, "RateLimit-Policy": `"reads";q=100;w=60`})
	res, body = send(t, "GET", url+"/v1/items/1", "")
	expect(t, "read one", res, body, http.StatusOK, map[string]string{"RateLimit": `"reads";r=98;t=2`})
	if want := `{"id":1,"name":"first"}` + "\n"; body != want {
		t.Errorf("GET /v1/items/1: %q, want %q", body, want)
	}
	res, body = send(t, "GET", url+"/healthz", "")
	expect(t, "health", res, body, http.StatusOK, map[string]string{"RateLimit": "", "RateLimit-Policy": ""})

	clock.Advance(66 * time.Second)
	res, body = send(t, "POST", url+"/v1/items", `{"name":"y"}`)
	expect(t, "write after Retry-After", res, body, http.StatusCreated, nil)
}

func TestReadLimit(t *testing.T) {
	url, _ := serve(t)
	for i := range 100 {
		path := "/v1/items"
		if i%2 == 1 {
			path = "/v1/items/1"
		}
		res, body := send(t, "GET", url+path, "")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("read %d: status %d (%s)", i+1, res.StatusCode, body)
		}
	}
	res, body := send(t, "GET", url+"/v1/items/1", "")
	expect(t, "read 101", res, body, http.StatusTooManyRequests, map[string]string{
		"RateLimit":   `"reads";r=0;t=1`,
		"Retry-After": "1",
	})
	expectProblem(t, body, "reads", "Try again in 1 second.")
}
