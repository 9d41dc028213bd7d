package clientlimit

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// Tests against real listeners on 127.0.0.1, in real time: each takes
// about a second or two.

// statusCounter counts the statuses a handler answered.
type statusCounter struct {
	mu sync.Mutex
	n  map[int]int
}

func (c *statusCounter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: 200}
		next.ServeHTTP(rec, r)
		c.mu.Lock()
		if c.n == nil {
			c.n = map[int]int{}
		}
		c.n[rec.status]++
		c.mu.Unlock()
	})
}

func (c *statusCounter) get(status int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[status]
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }

func ok(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }

// Against ratekit's own middleware (IETF fields, 429 with Retry-After):
// 25 requests through a limit of 10 a second, burst 10, all end in 200, in
// no less time than the policy allows.
func TestRatekitServer(t *testing.T) {
	l, err := core.New(core.Policy{Name: "api", Limit: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var sc statusCounter
	srv := httptest.NewServer(sc.wrap(httplimit.Middleware(l)(http.HandlerFunc(ok))))
	defer srv.Close()
	tr := MustNew(nil)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	start := time.Now()
	for i := range 25 {
		if res := get(t, c, srv.URL); res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i+1, res.StatusCode)
		}
	}
	elapsed := time.Since(start)
	if elapsed < 1400*time.Millisecond {
		t.Errorf("25 requests in %v; the policy allows them in 1.5s at the earliest", elapsed)
	}
	st := tr.Stats()
	t.Logf("25 requests in %v: server answered %d 429s; stats %+v", elapsed.Round(time.Millisecond), sc.get(429), st)
	if sc.get(200) != 25 || st.Waits == 0 {
		t.Errorf("server: %d 200s; stats %+v", sc.get(200), st)
	}
}

// windowServer counts requests per whole Unix second, allows 3 in each,
// and describes its quota with header, answering 429 when it is spent.
type windowServer struct {
	mu     sync.Mutex
	second int64
	used   int
	sc     statusCounter
	header func(h http.Header, remaining int, reset time.Time)
}

func (s *windowServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	if now.Unix() != s.second {
		s.second, s.used = now.Unix(), 0
	}
	allowed := s.used < 3
	if allowed {
		s.used++
	}
	remaining := 3 - s.used
	s.mu.Unlock()
	s.header(w.Header(), remaining, time.Unix(now.Unix()+1, 0))
	if !allowed {
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

func testWindowServer(t *testing.T, header func(h http.Header, remaining int, reset time.Time)) {
	ws := &windowServer{header: header}
	srv := httptest.NewServer(ws.sc.wrap(ws))
	defer srv.Close()
	tr := MustNew(nil)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	start := time.Now()
	for i := range 7 {
		if res := get(t, c, srv.URL); res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i+1, res.StatusCode)
		}
	}
	t.Logf("7 requests in %v; server answered %d 429s; stats %+v", time.Since(start).Round(time.Millisecond), ws.sc.get(429), tr.Stats())
	if ws.sc.get(200) != 7 {
		t.Errorf("%d 200s, want 7", ws.sc.get(200))
	}
}

// GitHub's style: X-RateLimit-Reset is a Unix time in seconds.
func TestGitHubStyleServer(t *testing.T) {
	testWindowServer(t, func(h http.Header, remaining int, reset time.Time) {
		h.Set("X-RateLimit-Limit", "3")
		h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	})
}

// The IETF fields, with the reset in seconds from now, rounded up.
func TestIETFStyleServer(t *testing.T) {
	testWindowServer(t, func(h http.Header, remaining int, reset time.Time) {
		h.Set("RateLimit-Policy", `"sec";q=3;w=1`)
		h.Set("RateLimit", fmt.Sprintf(`"sec";r=%d;t=1`, remaining))
	})
}

// A 429 with an HTTP-date Retry-After: the retry comes no earlier.
func TestHTTPDateRetryAfter(t *testing.T) {
	var calls atomic.Int64
	var date atomic.Value
	var retryAt atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			d := time.Unix(time.Now().Unix()+2, 0) // one to two seconds ahead
			date.Store(d)
			w.Header().Set("Retry-After", d.UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "slow down")
			return
		}
		retryAt.Store(time.Now())
	}))
	defer srv.Close()
	c := &http.Client{Transport: MustNew(nil)}
	if res := get(t, c, srv.URL); res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	d, at := date.Load().(time.Time), retryAt.Load().(time.Time)
	if calls.Load() != 2 || at.Before(d) || at.After(d.Add(2*time.Second)) {
		t.Errorf("%d calls; retried at %v for a Retry-After of %v", calls.Load(), at, d)
	}
}

// A POST whose body cannot be replayed is sent once, and its 429 returned
// as it is; one whose body GetBody replays is sent again, body and all.
func TestPostNotResent(t *testing.T) {
	var calls atomic.Int64
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if calls.Add(1) <= 2 { // the first of each POST
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "denied")
		}
	}))
	defer srv.Close()
	c := &http.Client{Transport: MustNew(nil)}
	res, err := c.Post(srv.URL, "text/plain", io.NopCloser(strings.NewReader("order 1")))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if n := calls.Load(); n != 1 || res.StatusCode != 429 || string(body) != "denied" {
		t.Errorf("POST without GetBody: server saw %d requests, client got %d %q; want 1 and the 429", n, res.StatusCode, body)
	}
	res, err = c.Post(srv.URL, "text/plain", strings.NewReader("order 2"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if n := calls.Load(); n != 3 || res.StatusCode != 200 || bodies[1] != "order 2" || bodies[2] != "order 2" {
		t.Errorf("POST with GetBody: server saw %d requests %q, client got %d", n, bodies, res.StatusCode)
	}
}

// A storm: 50 clients, each with its own Transport, denied at once with
// Retry-After: 1, come back spread over [1s, 2s) by full jitter.
func TestStorm(t *testing.T) {
	const clients = 50
	var mu sync.Mutex
	first := map[string]time.Time{}
	var retries []time.Duration
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("c")
		mu.Lock()
		defer mu.Unlock()
		if at, ok := first[id]; ok {
			retries = append(retries, time.Since(at))
			return
		}
		first[id] = time.Now()
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range clients {
		tr := MustNew(nil)
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		wg.Go(func() {
			if res := get(t, c, srv.URL+"/?c="+strconv.Itoa(i)); res.StatusCode != 200 {
				t.Errorf("client %d: %d", i, res.StatusCode)
			}
		})
	}
	wg.Wait()
	s := spreadOf(retries)
	t.Logf("storm: %d clients denied at once, retries after %v", len(retries), s)
	// Uniform over [1s, 2s): a standard deviation of 289ms.
	if len(retries) != clients || s.min < time.Second || s.max > 2300*time.Millisecond || s.stddev < 150*time.Millisecond {
		t.Errorf("retries %d, spread %v", len(retries), s)
	}
}
