package benchmarks

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// TestLoad drives a real HTTP server (gin + ginlimit on 127.0.0.1, keyed by
// an X-API-Key header with keyfunc.Header, token bucket 1,000 per minute,
// burst 1,000) with vegeta at a fixed rate for a fixed time, and checks
// that no key was admitted more than the policy allows.
//
// Traffic: 60 % of requests go to a few hot keys (each about 1,500, past
// the limit), the rest round-robin over 1,000 cold keys (a few requests
// each). A warm-up attack of one second on the bare server comes first. The server
// counts each key's arrivals before the limiter, so the check does not
// depend on the client keeping up:
//
//   - frozen clock (core.WithClock on a clock that never moves): the policy
//     allows exactly min(arrivals, 1000) per key; the 200s must equal the
//     sum of those exactly, the rest must be 429s.
//   - system clock: tokens refill during the run, so per key the 200s lie
//     between min(arrivals, 1000) and min(arrivals, 1000 + ceil(elapsed ×
//     1000/min)); the sum must lie within the sums of those bounds.
//
// It also reports the p99 latency the middleware adds: the same traffic
// against the same server without ginlimit. Tune with LOAD_RATE
// (requests/s, default 2000) and LOAD_DURATION (default 5s). Skipped with
// -short.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("an HTTP load test of several seconds")
	}
	gin.SetMode(gin.ReleaseMode)
	freq := envInt(t, "LOAD_RATE", 2000)
	dur := envDuration(t, "LOAD_DURATION", 5*time.Second)
	const (
		coldKeys = 1000
		limit    = 1000
	)
	// Enough hot keys to share 60 % of the requests at about 1.5× the limit each.
	hotKeys := max(1, int(0.6*float64(freq)*dur.Seconds()/(1.5*limit)))
	p := core.Policy{Limit: limit, Window: time.Minute} // token bucket, Burst = Limit
	keys := make([]string, hotKeys+coldKeys)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}

	type run struct {
		name    string
		limiter func() core.Limiter // nil: no middleware
		m       vegeta.Metrics
		codes   map[uint16]int
		ok      int64 // 200s the server counted
		allowed [2]int64
	}
	runs := []*run{
		{name: "warm-up"},
		{name: "bare"},
		{name: "ratekit, system clock", limiter: func() core.Limiter {
			l, err := core.New(p)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{name: "ratekit, frozen clock", limiter: func() core.Limiter {
			l, err := core.New(p, core.WithClock(core.NewManualClock(time.Now())))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
	}
	for _, r := range runs {
		arrivals := make([]atomic.Int64, len(keys))
		var served atomic.Int64
		e := gin.New()
		e.Use(func(c *gin.Context) {
			i, err := strconv.Atoi(strings.TrimPrefix(c.GetHeader("X-API-Key"), "key-"))
			if err == nil && i >= 0 && i < len(arrivals) {
				arrivals[i].Add(1)
			}
			c.Next()
		})
		if r.limiter != nil {
			e.Use(ginlimit.New(r.limiter(), httplimit.WithKey(keyfunc.Header("X-API-Key", nil))))
		}
		e.GET("/hello", func(c *gin.Context) {
			served.Add(1)
			c.String(200, "hello")
		})
		srv := httptest.NewServer(e) // 127.0.0.1, a free port
		headers := make([]http.Header, len(keys))
		for i, k := range keys {
			headers[i] = http.Header{"X-Api-Key": {k}}
		}
		var seq atomic.Uint64
		targeter := func(tgt *vegeta.Target) error {
			n := seq.Add(1) - 1
			i := int(n % 10)
			if i < 6 { // 60 %: the hot keys
				i = int(n/10) % hotKeys
			} else {
				i = hotKeys + int(n/10*4+uint64(i-6))%coldKeys
			}
			tgt.Method, tgt.URL, tgt.Header = "GET", srv.URL+"/hello", headers[i]
			return nil
		}
		atk := vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Timeout(10*time.Second))
		r.codes = map[uint16]int{}
		d := dur
		if r.name == "warm-up" {
			d = time.Second
		}
		start := time.Now()
		for res := range atk.Attack(targeter, vegeta.Rate{Freq: freq, Per: time.Second}, d, r.name) {
			r.m.Add(res)
			r.codes[res.Code]++
		}
		elapsed := time.Since(start)
		r.m.Close()
		srv.Close()
		r.ok = served.Load()

		refill := int64(float64(limit)*elapsed.Seconds()/p.Window.Seconds()) + 1
		for i := range arrivals {
			a := arrivals[i].Load()
			r.allowed[0] += min(a, limit)
			r.allowed[1] += min(a, limit+refill)
		}
		t.Logf("%s: %d requests in %v (%.0f/s sent), codes %v, server served %d, p50 %v p99 %v",
			r.name, r.m.Requests, elapsed.Round(time.Millisecond), r.m.Rate, r.codes, r.ok, r.m.Latencies.P50, r.m.Latencies.P99)
		if n := r.codes[0]; n > 0 { // vegeta's code for a transport error
			t.Errorf("%s: %d requests failed without a response (%v): lower LOAD_RATE on this machine", r.name, n, r.m.Errors)
		}
		if int64(r.codes[200]) != r.ok {
			t.Errorf("%s: client saw %d 200s, server served %d", r.name, r.codes[200], r.ok)
		}
		if got, want := r.codes[200]+r.codes[429], int(r.m.Requests); got != want {
			t.Errorf("%s: %d responses other than 200 and 429 out of %d: %v", r.name, want-got, want, r.codes)
		}
		switch {
		case r.limiter == nil:
		case strings.Contains(r.name, "frozen"):
			if r.ok != r.allowed[0] {
				t.Errorf("%s: %d requests served, the policy allows exactly %d", r.name, r.ok, r.allowed[0])
			}
		default:
			if r.ok < r.allowed[0] || r.ok > r.allowed[1] {
				t.Errorf("%s: %d requests served, the policy allows %d..%d", r.name, r.ok, r.allowed[0], r.allowed[1])
			}
		}
	}

	dir := os.Getenv("BENCH_REPORT_DIR")
	if dir == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "vegeta at %d requests/s for %v, %d hot keys (60 %% of requests) and %d cold keys, X-API-Key via keyfunc.Header, token bucket %d/min burst %d.\n\n", freq, dur, hotKeys, coldKeys, limit, limit)
	fmt.Fprintf(&b, "| server | requests | 200 | 429 | other | policy allows | over-admitted | p50 | p99 | p99 added |\n|---|---|---|---|---|---|---|---|---|---|\n")
	bare := runs[1].m.Latencies.P99
	for _, r := range runs[1:] {
		allows, over := "—", "—"
		switch {
		case r.limiter == nil:
		case r.allowed[0] == r.allowed[1] || strings.Contains(r.name, "frozen"):
			allows, over = strconv.FormatInt(r.allowed[0], 10), strconv.FormatInt(max(0, r.ok-r.allowed[0]), 10)
		default:
			allows, over = fmt.Sprintf("%d–%d", r.allowed[0], r.allowed[1]), strconv.FormatInt(max(0, r.ok-r.allowed[1]), 10)
		}
		added := "—"
		if r.limiter != nil {
			added = (r.m.Latencies.P99 - bare).Round(time.Microsecond).String()
		}
		other := int(r.m.Requests) - r.codes[200] - r.codes[429]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %s | %v | %v | %s |\n", r.name, r.m.Requests, r.codes[200], r.codes[429], other, allows, over,
			r.m.Latencies.P50.Round(time.Microsecond), r.m.Latencies.P99.Round(time.Microsecond), added)
	}
	if err := os.WriteFile(filepath.Join(dir, "loadtest.md"), []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, s)
	}
	return d
}
