package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/redisstore"

	"github.com/ratekit/ratekit/internal/redisserver"
)

// serve starts the API limited by l on a 127.0.0.1 listener and returns its
// base URL.
func serve(t *testing.T, l core.Limiter) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: newServer(l, ln.Addr().String(), t.Logf)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// defaults returns the program's default policy.
func defaults(t *testing.T) core.Policy {
	t.Helper()
	s, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (core.Policy{Name: "api", Algorithm: core.SlidingLog, Limit: 100, Window: time.Minute}); s.policy != want {
		t.Fatalf("default policy %+v, want %+v", s.policy, want)
	}
	return s.policy
}

// alternate sends n requests from one client (127.0.0.1), alternating
// between the servers, and counts the statuses per server. It checks every
// 429 answers as the README says.
func alternate(t *testing.T, n int, servers ...string) []map[int]int {
	t.Helper()
	counts := make([]map[int]int, len(servers))
	for i := range counts {
		counts[i] = map[int]int{}
	}
	for i := range n {
		s := i % len(servers)
		res, err := http.Get(servers[s] + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		counts[s][res.StatusCode]++
		if res.StatusCode == http.StatusTooManyRequests && counts[s][429] == 1 {
			checkDenied(t, res, body)
		}
	}
	return counts
}

func checkDenied(t *testing.T, res *http.Response, body []byte) {
	t.Helper()
	for name, want := range map[string]string{
		"RateLimit-Policy": `"api";q=100;w=60`,
		"RateLimit":        `"api";r=0;t=60`, // the manual clock stands still
		"Retry-After":      "60",
		"Content-Type":     "application/problem+json",
	} {
		if got := res.Header.Get(name); got != want {
			t.Errorf("429: %s %q, want %q", name, got, want)
		}
	}
	var p httplimit.Problem
	if err := json.Unmarshal(body, &p); err != nil || p.Type != httplimit.ProblemRateLimited || p.Policy != "api" {
		t.Errorf("429 body %s: %+v, %v", body, p, err)
	}
}

// Two servers sharing one Redis: 150 requests alternating between them
// get 100 200s and 50 429s, because there is one count, not one per server.
// The limiters read one manual clock, so the test's speed does not matter.
func TestTwoServersShareOneLimit(t *testing.T) {
	addr := redisserver.StartT(t)
	policy := defaults(t)
	clock := core.NewManualClock(start)
	var servers []string
	for range 2 {
		client := newClient(addr) // each server has its own connection pool, as two processes do
		t.Cleanup(func() { client.Close() })
		l, err := redisstore.New(client, policy, redisstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, serve(t, l))
	}
	counts := alternate(t, 150, servers...)
	total := map[int]int{}
	for i, c := range counts {
		// The first 100 requests, 50 on each server, are allowed.
		if c[200] != 50 || c[429] != 25 || len(c) != 2 {
			t.Errorf("server %d answered %v, want 50 200s and 25 429s", i+1, c)
		}
		for status, n := range c {
			total[status] += n
		}
	}
	if total[200] != 100 || total[429] != 50 {
		t.Errorf("both servers: %v, want 100 200s and 50 429s", total)
	}
}

// The same two servers with a limiter in memory each let twice the limit
// through: what the Redis store is for.
func TestTwoServersInMemoryAllowTwice(t *testing.T) {
	policy := defaults(t)
	clock := core.NewManualClock(start)
	var servers []string
	for range 2 {
		l, err := core.New(policy, core.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, serve(t, l))
	}
	counts := alternate(t, 250, servers...)
	if ok := counts[0][200] + counts[1][200]; ok != 200 {
		t.Errorf("in memory: %d allowed of 250, want 200 (100 per server): %v", ok, counts)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The program itself: it says what it does on startup, serves with the
// limit in Redis, and stops when its context ends.
func TestRun(t *testing.T) {
	addr := redisserver.StartT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	listening := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-redis", addr, "-policy", "2/1h"}, &logs, func(a string) { listening <- a })
	}()
	var url string
	select {
	case a := <-listening:
		url = "http://" + a
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	want := fmt.Sprintf("redis: 2/1h per client IP, counted in Redis at %s with every other server; listening on %s/hello", addr, url)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("startup log %q, want a line %q", logs.String(), want)
	}
	for i, status := range []int{200, 200, 429} {
		res, err := http.Get(url + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != status {
			t.Errorf("request %d: status %d (%s), want %d", i+1, res.StatusCode, body, status)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != `"api";q=2;w=3600` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
		if status == 200 && string(body) != "hello from "+strings.TrimPrefix(url, "http://")+"\n" {
			t.Errorf("request %d: body %q", i+1, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after cancel: %v", err)
	}
}

// Without Redis the program does not start, and says why.
func TestRunWithoutRedis(t *testing.T) {
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	noRedis := "127.0.0.1:" + strconv.Itoa(port)
	err = run(context.Background(), []string{"-addr", "127.0.0.1:0", "-redis", noRedis}, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "no Redis at "+noRedis) {
		t.Errorf("run without Redis: %v", err)
	}
}
