// Package exampletest holds what the examples' smoke tests share: a server
// on a real 127.0.0.1 listener, a client that reads whole responses, and
// checks of the rate headers and the 429 problem body.
package exampletest

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// Start is the time the examples' manual clocks start at.
var Start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// NewClock returns a manual clock at Start.
func NewClock() *core.ManualClock { return core.NewManualClock(Start) }

// Listen returns a listener on a free 127.0.0.1 port.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// Serve serves h on a free 127.0.0.1 port until the test ends and returns
// its base URL.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ln := Listen(t)
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// Send makes one request with body (none when empty) and returns the
// response with its body read.
func Send(t testing.TB, method, url, body string) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
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

// Expect checks a response's status and headers; an empty want means the
// header must be absent. It stops the test on a wrong status.
func Expect(t testing.TB, what string, res *http.Response, body string, status int, headers map[string]string) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("%s: status %d (%s), want %d", what, res.StatusCode, body, status)
	}
	for name, want := range headers {
		if got := res.Header.Get(name); got != want {
			t.Errorf("%s: %s %q, want %q", what, name, got, want)
		}
	}
}

// ExpectProblem checks a 429's problem+json body: a ProblemRateLimited
// naming policy, with detail.
func ExpectProblem(t testing.TB, body, policy, detail string) {
	t.Helper()
	var p httplimit.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("429 body %q: %v", body, err)
	}
	if p.Type != httplimit.ProblemRateLimited || p.Status != http.StatusTooManyRequests || p.Title == "" ||
		p.Policy != policy || p.Detail != detail {
		t.Errorf("429 body %+v, want a ProblemRateLimited of policy %q: %q", p, policy, detail)
	}
}
