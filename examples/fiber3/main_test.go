package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/exampletest"
)

// serve starts the app on its own 127.0.0.1 listener, as main does, with a
// manual clock, and returns its base URL.
func serve(t *testing.T) (string, *core.ManualClock) {
	t.Helper()
	clock := exampletest.NewClock()
	app, err := newApp(clock)
	if err != nil {
		t.Fatal(err)
	}
	ln := exampletest.Listen(t)
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
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

var send = exampletest.Send

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
	exampletest.Expect(t, "request 101", res, body, http.StatusTooManyRequests, map[string]string{
		"RateLimit":     `"api";r=0;t=1`, // one request refills in 600ms
		"Retry-After":   "1",
		"Content-Type":  "application/problem+json",
		"Cache-Control": "no-store",
	})
	exampletest.ExpectProblem(t, body, "api", "Try again in 1 second.")

	res, _ = send(t, "GET", url+"/healthz", "")
	if res.StatusCode != http.StatusOK || res.Header.Get("RateLimit") != "" {
		t.Errorf("/healthz: status %d, RateLimit %q: want 200 and no limit", res.StatusCode, res.Header.Get("RateLimit"))
	}

	clock.Advance(600 * time.Millisecond)
	res, body = send(t, "POST", url+"/api/echo", "again")
	if res.StatusCode != http.StatusOK || body != "again" {
		t.Errorf("after 600ms: status %d (%q), want 200", res.StatusCode, body)
	}
}
