package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/exampletest"
	"github.com/ratekit/ratekit/rules"
)

// timeout bounds each wait for a reload: a failure, never a pace.
const timeout = time.Minute

var (
	expect        = exampletest.Expect
	expectProblem = exampletest.ExpectProblem
)

// testServer is the example on a 127.0.0.1 listener and a manual clock,
// reading a copy of rules.yaml that a test may rewrite, with its Watch
// running.
type testServer struct {
	*server
	url      string
	path     string        // the rule file
	reloaded chan struct{} // a reload replaced the rules
	failed   chan error    // a reload was refused
}

func serve(t *testing.T) *testServer {
	t.Helper()
	data, err := os.ReadFile("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{
		path:     filepath.Join(t.TempDir(), "rules.yaml"),
		reloaded: make(chan struct{}, 8),
		failed:   make(chan error, 8),
	}
	writeFile(t, ts.path, string(data))
	ts.server, err = newServer(ts.path, exampletest.NewClock(), func(err error) { notify(ts.failed, err) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.limiter.Close() })
	// Registered after the limiter's: when it runs, the limiter enforces
	// the new rules.
	ts.source.OnReload(func(_, _ *rules.Set) { notify(ts.reloaded, struct{}{}) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ts.source.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	ts.url = exampletest.Serve(t, ts.server)
	return ts
}

func notify[T any](c chan T, v T) {
	select {
	case c <- v:
	default:
	}
}

// rewrite replaces the rule file as an operator should: a new file renamed
// over the old.
func (ts *testServer) rewrite(t *testing.T, old, replacement string) {
	t.Helper()
	data, err := os.ReadFile(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(data), old) != 1 {
		t.Fatalf("%s holds %q %d times, want once", ts.path, old, strings.Count(string(data), old))
	}
	writeFile(t, ts.path, strings.Replace(string(data), old, replacement, 1))
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.CreateTemp(filepath.Dir(path), ".rules-*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		t.Fatal(err)
	}
}

// wait returns what c receives, failing the test if nothing comes.
func wait[T any](t *testing.T, what string, c <-chan T) (v T) {
	t.Helper()
	select {
	case v = <-c:
	case <-time.After(timeout):
		t.Fatalf("no %s within %v", what, timeout)
	}
	return v
}

// send makes one request and returns the response with its body read.
func send(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

func (ts *testServer) login(t *testing.T, username string) (*http.Response, string) {
	t.Helper()
	form := url.Values{"username": {username}, "password": {"x"}}.Encode()
	req, err := http.NewRequest("POST", ts.url+"/login", strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return send(t, req)
}

func (ts *testServer) items(t *testing.T, apiKey string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", ts.url+"/api/items", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", apiKey)
	return send(t, req)
}

// useKey makes n requests with apiKey, every one of them served.
func (ts *testServer) useKey(t *testing.T, apiKey string, n int) {
	t.Helper()
	for i := range n {
		if res, body := ts.items(t, apiKey); res.StatusCode != http.StatusOK {
			t.Fatalf("%s, request %d: status %d (%s), want 200", apiKey, i+1, res.StatusCode, body)
		}
	}
}

// Five logins of one account, however its email is spelled, and the sixth
// is refused by per-account; per-ip counted the five only, and another
// account goes on.
func TestLoginLimit(t *testing.T) {
	ts := serve(t)
	for i, username := range []string{"ana@example.com", "Ana@Example.com", " ANA@example.com ", "ana@EXAMPLE.com", "ana@example.com"} {
		res, body := ts.login(t, username)
		expect(t, fmt.Sprintf("login %d as %q", i+1, username), res, body, http.StatusOK, map[string]string{
			"RateLimit-Policy": `"per-account";q=5;w=60, "per-ip";q=20;w=60`,
			"RateLimit":        fmt.Sprintf(`"per-account";r=%d;t=60, "per-ip";r=%d;t=%d`, 4-i, 19-i, 3*(i+1)),
		})
	}
	res, body := ts.login(t, "ana@example.com")
	expect(t, "6th login", res, body, http.StatusTooManyRequests, map[string]string{
		"RateLimit-Policy": `"per-account";q=5;w=60, "per-ip";q=20;w=60`,
		"RateLimit":        `"per-account";r=0;t=60, "per-ip";r=15;t=15`,
		"Retry-After":      "60",
		"Content-Type":     "application/problem+json",
	})
	expectProblem(t, body, "per-account", "Try again in 60 seconds.")

	res, body = ts.login(t, "bob@example.com")
	expect(t, "another account", res, body, http.StatusOK, map[string]string{
		"RateLimit": `"per-account";r=4;t=60, "per-ip";r=14;t=18`,
	})
	res, body = ts.login(t, "")
	expect(t, "a login without a username", res, body, http.StatusBadRequest, nil)
}

// A free key gets 60 a minute and a pro key 1,000, each its own; a key
// the server does not know is held to the per-IP limit.
func TestPlans(t *testing.T) {
	ts := serve(t)
	ts.useKey(t, "demo-free", 60)
	res, body := ts.items(t, "demo-free")
	expect(t, "61st free request", res, body, http.StatusTooManyRequests, map[string]string{
		"RateLimit-Policy": `"per-key";q=60;w=60`,
		"RateLimit":        `"per-key";r=0;t=1`,
		"Retry-After":      "1",
	})
	expectProblem(t, body, "per-key", "Try again in 1 second.")

	ts.useKey(t, "demo-pro", 60)
	res, body = ts.items(t, "demo-pro")
	expect(t, "61st pro request", res, body, http.StatusOK, map[string]string{
		"RateLimit-Policy": `"per-key";q=1000;w=60`,
		"RateLimit":        `"per-key";r=939;t=4`,
	})

	res, body = ts.items(t, "demo-enterprise")
	expect(t, "an unknown key", res, body, http.StatusUnauthorized, map[string]string{
		"RateLimit-Policy": `"per-ip";q=100;w=60`,
	})
}

// A reload that raises the free plan from 60 to 120 a minute keeps what a
// key has used: a key that used its 60 gets 60 more, not 120. A file that
// does not validate is refused, and the rules in force stay.
func TestReload(t *testing.T) {
	ts := serve(t)
	ts.useKey(t, "demo-free", 60)
	res, body := ts.items(t, "demo-free")
	expect(t, "61st request at 60/1m", res, body, http.StatusTooManyRequests, nil)

	ts.rewrite(t, "rate: 60/1m", "rate: 120/1m")
	wait(t, "reload", ts.reloaded)
	if err := ts.limiter.Err(); err != nil {
		t.Fatalf("the limiter refused the reload: %v", err)
	}
	ts.useKey(t, "demo-free", 60)
	res, body = ts.items(t, "demo-free")
	expect(t, "121st request at 120/1m", res, body, http.StatusTooManyRequests, map[string]string{
		"RateLimit-Policy": `"per-key";q=120;w=60`,
		"RateLimit":        `"per-key";r=0;t=1`,
	})

	before := ts.limiter.Set()
	data, err := os.ReadFile(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Count(string(data[:strings.Index(string(data), "rate: 120/1m")]), "\n") + 1
	ts.rewrite(t, "rate: 120/1m", "rate: 240/1x")
	err = wait(t, "refused reload", ts.failed)
	var re *rules.Error
	if !errors.As(err, &re) || re.File != ts.path || re.Line != line || re.Path != "rules[1].limits[0].rate" {
		t.Fatalf("refused reload: %v; want an error at %s:%d, rules[1].limits[0].rate", err, ts.path, line)
	}
	if ts.limiter.Set() != before || ts.source.Load() != before {
		t.Fatal("a file that does not validate replaced the rules")
	}
	res, body = ts.items(t, "demo-free")
	expect(t, "after the refused file", res, body, http.StatusTooManyRequests, map[string]string{
		"RateLimit-Policy": `"per-key";q=120;w=60`,
	})
}

// run serves the rules beside main.go on a free port until its context
// ends.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, pw)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	var base string
	for base == "" && lines.Scan() {
		if _, rest, ok := strings.Cut(lines.Text(), "listening on "); ok {
			base, _, _ = strings.Cut(rest, " ")
		}
	}
	if base == "" {
		t.Fatalf("no address logged; run: %v", <-done)
	}
	go io.Copy(io.Discard, pr)
	req, err := http.NewRequest("GET", base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, body := send(t, req)
	expect(t, "GET /", res, body, http.StatusOK, map[string]string{"RateLimit-Policy": `"per-ip";q=100;w=60`})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
