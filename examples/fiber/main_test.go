package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// serve starts the app on its own 127.0.0.1 listener, as main does, with a
// manual clock, and returns its base URL.
func serve(t *testing.T) (string, *core.ManualClock) {
	t.Helper()
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	app, err := newApp(clock)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln) }()
	t.Cleanup(func() {
		if err := app.Shutdown(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String(), clock
}

func send(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func TestLimit(t *testing.T) {
	url, clock := serve(t)
	for i := range 100 {
		method, path, body := "GET", "/api/hello", ""
		if i%2 == 1 {
			method, path, body = "POST", "/api/echo", "hi"
		}
		res, got := send(t, method, url+path, body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d (%s)", i+1, res.StatusCode, got)
		}
		// Full again in 600ms per request used, rounded up to seconds.
		if got, want := res.Header.Get("RateLimit"), `"api";r=`+strconv.Itoa(99-i)+";t="+strconv.Itoa(((i+1)*6+9)/10); got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i+1, got, want)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != `"api";q=100;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
	}
	res, body := send(t, "GET", url+"/api/hello", "")
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 101: status %d (%s), want 429", res.StatusCode, body)
	}
	for name, want := range map[string]string{
		"RateLimit":     `"api";r=0;t=1`, // one request refills in 600ms
		"Retry-After":   "1",
		"Content-Type":  "application/problem+json",
		"Cache-Control": "no-store",
	} {
		if got := res.Header.Get(name); got != want {
			t.Errorf("429: %s %q, want %q", name, got, want)
		}
	}
	var p httplimit.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("429 body %q: %v", body, err)
	}
	if p.Type != httplimit.ProblemRateLimited || p.Status != 429 || p.Policy != "api" || p.Detail != "Try again in 1 second." {
		t.Errorf("429 body %+v", p)
	}

	res, body = send(t, "GET", url+"/healthz", "")
	if res.StatusCode != http.StatusOK || res.Header.Get("RateLimit") != "" {
		t.Errorf("/healthz: status %d, RateLimit %q: want 200 and no limit", res.StatusCode, res.Header.Get("RateLimit"))
	}

	clock.Advance(600 * time.Millisecond)
	res, body = send(t, "POST", url+"/api/echo", "again")
	if res.StatusCode != http.StatusOK || body != "again" {
		t.Errorf("after 600ms: status %d (%q), want 200", res.StatusCode, body)
	}
}
