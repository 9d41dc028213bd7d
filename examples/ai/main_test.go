package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// scripted is a model that reports the usage a test gives it, and holds a
// request whose prompt is "hold" until release is closed.
type scripted struct {
	mu      sync.Mutex
	used    []int64       // total tokens of the next answers, in order
	held    chan struct{} // a held request has reached the model
	release chan struct{}
}

func (s *scripted) Complete(ctx context.Context, req chatRequest) (string, usage, error) {
	if req.Prompt == "hold" {
		s.held <- struct{}{}
		<-s.release
		return "done", usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.used) == 0 {
		return echoModel{}.Complete(ctx, req)
	}
	n := s.used[0]
	s.used = s.used[1:]
	return "ok", usage{PromptTokens: promptTokens(req.Prompt), CompletionTokens: n - promptTokens(req.Prompt), TotalTokens: n}, nil
}

// serve starts the API on a real socket, on a manual clock.
func serve(t *testing.T, m model) (string, *core.ManualClock) {
	t.Helper()
	clock := core.NewManualClock(start)
	h, err := newServer(clock, newAccounts(), m)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, clock
}

type reply struct {
	status     int
	rateLimit  string
	retryAfter string
	body       string
}

// remaining returns r= of the RateLimit header.
func (r reply) remaining(t *testing.T) int64 {
	t.Helper()
	m := regexp.MustCompile(`;r=(\d+)`).FindStringSubmatch(r.rateLimit)
	if m == nil {
		t.Fatalf("no remaining in RateLimit %q", r.rateLimit)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

func post(t *testing.T, url, apiKey, prompt string, maxTokens int64) reply {
	t.Helper()
	body := fmt.Sprintf(`{"prompt": %q, "max_tokens": %d}`, prompt, maxTokens)
	req, err := http.NewRequest("POST", url+"/v1/chat", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"), string(b)}
}

// A free user gets 10,000 tokens a day; a pro user 1,000,000. Each request
// here uses all it asked for: 4 prompt words and 996 answer tokens.
func TestPlans(t *testing.T) {
	url, _ := serve(t, echoModel{})
	for i := range 10 {
		r := post(t, url, "demo-free", "one two three four", 996)
		if r.status != http.StatusOK {
			t.Fatalf("free request %d: %d %s", i+1, r.status, r.body)
		}
		var got struct{ Usage usage }
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || got.Usage.TotalTokens != 1000 {
			t.Fatalf("free request %d: usage %+v, %v; want 1000 tokens", i+1, got.Usage, err)
		}
	}
	// The 11th needs 1,000 tokens back: 1,000 × 8.64 s.
	r := post(t, url, "demo-free", "one two three four", 996)
	if r.status != http.StatusTooManyRequests || r.retryAfter != "8640" {
		t.Fatalf("free request 11: %d, Retry-After %q; want 429, 8640", r.status, r.retryAfter)
	}
	for i := range 20 {
		if r := post(t, url, "demo-pro", "one two three four", 996); r.status != http.StatusOK {
			t.Fatalf("pro request %d: %d %s", i+1, r.status, r.body)
		}
	}
	if r := post(t, url, "demo-pro", "one", 1); r.remaining(t) != 1_000_000-20*1000-2 {
		t.Errorf("pro after 20,002 tokens: RateLimit %q", r.rateLimit)
	}
}

// A request counts its estimate before the model runs and the tokens it
// used after: fewer give the rest back, more put the user into debt, which
// the next request waits out to the microsecond.
func TestSettledAfter(t *testing.T) {
	m := &scripted{used: []int64{100, 9000, 3101}}
	url, clock := serve(t, m)

	// Estimate 1,000 (4 + 996), used 100: 9,900 left.
	post(t, url, "demo-free", "one two three four", 996)
	if r := post(t, url, "demo-free", "one", 100); r.status != http.StatusOK || r.remaining(t) != 10_000-100-101 {
		t.Fatalf("after using 100 of 1,000, then an estimate of 101: %d, RateLimit %q; want %d left", r.status, r.rateLimit, 10_000-100-101)
	}
	// That one used 9,000: 9,100 held. The next, estimated at 101, uses
	// 3,101: 12,201 held, 2,201 past the day's allowance.
	if r := post(t, url, "demo-free", "one", 100); r.status != http.StatusOK {
		t.Fatalf("the request that overspends: %d %s", r.status, r.body)
	}
	// In debt: a request of 101 fits once 12,201 + 101 - 10,000 = 2,302
	// tokens have refilled, 2,302 × 8.64 s = 19,889.28 s.
	wait := 19_889_280 * time.Millisecond
	r := post(t, url, "demo-free", "one", 100)
	if r.status != http.StatusTooManyRequests || r.retryAfter != "19890" {
		t.Fatalf("in debt: %d, Retry-After %q; want 429, 19890 (19,889.28 s rounded up)", r.status, r.retryAfter)
	}
	clock.Advance(wait - time.Microsecond)
	if r := post(t, url, "demo-free", "one", 100); r.status != http.StatusTooManyRequests {
		t.Fatalf("1µs before the debt is repaid: %d", r.status)
	}
	clock.Advance(time.Microsecond)
	if r := post(t, url, "demo-free", "one", 100); r.status != http.StatusOK || r.remaining(t) != 0 {
		t.Fatalf("the debt repaid: %d, RateLimit %q; want 200 with nothing left", r.status, r.rateLimit)
	}
}

// At most two of a user's requests run at once: a third, sent while two
// are with the model, is refused with 429 and counts no tokens; another
// user is not held up.
func TestInFlight(t *testing.T) {
	m := &scripted{held: make(chan struct{}), release: make(chan struct{})}
	url, _ := serve(t, m)
	var wg sync.WaitGroup
	results := make(chan reply, maxInFlight)
	for range maxInFlight {
		wg.Go(func() { results <- post(t, url, "demo-free", "hold", 10) })
	}
	for range maxInFlight {
		<-m.held // both are with the model
	}
	r := post(t, url, "demo-free", "one", 10)
	if r.status != http.StatusTooManyRequests || r.retryAfter != "1" || !strings.Contains(r.body, "#ProblemInFlight") {
		t.Errorf("a third request in flight: %d, Retry-After %q, %s; want 429, 1, an in-flight problem", r.status, r.retryAfter, r.body)
	}
	if r := post(t, url, "demo-pro", "one", 10); r.status != http.StatusOK {
		t.Errorf("another user meanwhile: %d %s", r.status, r.body)
	}
	close(m.release)
	wg.Wait()
	close(results)
	for r := range results {
		if r.status != http.StatusOK {
			t.Errorf("a held request: %d %s", r.status, r.body)
		}
	}
	// The two held used 2 tokens each, settled; the refused one counted
	// nothing; this one's estimate of 2 is counted.
	if r := post(t, url, "demo-free", "one", 1); r.status != http.StatusOK || r.remaining(t) != 10_000-2-2-2 {
		t.Errorf("after: %d, RateLimit %q; want %d left", r.status, r.rateLimit, 10_000-6)
	}
}

// What is refused before the model runs.
func TestRefused(t *testing.T) {
	url, _ := serve(t, echoModel{})
	if r := post(t, url, "nobody", "one", 10); r.status != http.StatusUnauthorized {
		t.Errorf("an unknown API key: %d", r.status)
	}
	if r := post(t, url, "demo-free", "one", 0); r.status != http.StatusBadRequest {
		t.Errorf("max_tokens 0: %d", r.status)
	}
	// An estimate above the whole day's allowance can never fit.
	if r := post(t, url, "demo-free", "one", 20_000); r.status != http.StatusTooManyRequests || !strings.Contains(r.body, "#ProblemCostTooHigh") {
		t.Errorf("max_tokens 20,000 on the free plan: %d %s", r.status, r.body)
	}
	if r := post(t, url, "demo-pro", "one", 20_000); r.status != http.StatusOK {
		t.Errorf("max_tokens 20,000 on the pro plan: %d %s", r.status, r.body)
	}
}
