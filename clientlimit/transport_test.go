package clientlimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekit/ratekit/core"
)

// These tests run in synctest bubbles with a fake base transport that
// answers as a server would: time.Now and the Transport's timers read the
// bubble's clock, so every wait is exact and nothing sleeps. The tests
// against real listeners are in server_test.go.

// fakeServer answers requests with handle and records when each came.
type fakeServer struct {
	mu     sync.Mutex
	start  time.Time
	at     []time.Duration // arrival of each request, from start
	bodies []string
	closed atomic.Int64 // response bodies closed
	handle func(n int, r *http.Request) (status int, header http.Header)
}

func newFake(handle func(n int, r *http.Request) (int, http.Header)) *fakeServer {
	return &fakeServer{start: time.Now(), handle: handle}
}

func (f *fakeServer) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	f.mu.Lock()
	n := len(f.at)
	f.at = append(f.at, time.Since(f.start))
	f.bodies = append(f.bodies, string(body))
	f.mu.Unlock()
	status, h := f.handle(n, r)
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: h, Body: &trackedBody{Reader: strings.NewReader("answer " + strconv.Itoa(n)), closed: &f.closed}, Request: r}, nil
}

func (f *fakeServer) arrivals() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.at...)
}

type trackedBody struct {
	io.Reader
	closed *atomic.Int64
}

func (b *trackedBody) Close() error { b.closed.Add(1); return nil }

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func get(t *testing.T, c *http.Client, url string) *http.Response {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// noJitter makes every random share 0 for the test: the earliest times.
func noJitter(t *testing.T) {
	old := randN
	randN = func(int64) int64 { return 0 }
	t.Cleanup(func() { randN = old })
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// A 429 with Retry-After: the request is sent again after the server's
// time plus full jitter in [0, 1s), then [0, 2s) after the second; the
// discarded bodies are closed; the third 429 is returned as it is.
func TestRetryAfterSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake(func(int, *http.Request) (int, http.Header) {
			return 429, hdr("Retry-After", "3")
		})
		var events []Event
		tr := MustNew(srv, WithObserver(func(e Event) { events = append(events, e) }))
		res := get(t, &http.Client{Transport: tr}, "http://api.test/x")
		if res.StatusCode != 429 {
			t.Fatalf("status %d", res.StatusCode)
		}
		at := srv.arrivals()
		if len(at) != 3 {
			t.Fatalf("%d requests sent, want 3 (2 retries)", len(at))
		}
		if d := at[1] - at[0]; d < 3*time.Second || d >= 4*time.Second {
			t.Errorf("first retry after %v, want in [3s, 4s)", d)
		}
		if d := at[2] - at[1]; d < 3*time.Second || d >= 5*time.Second {
			t.Errorf("second retry after %v, want in [3s, 5s)", d)
		}
		if n := srv.closed.Load(); n != 3 {
			t.Errorf("%d response bodies closed, want 3", n)
		}
		st := tr.Stats()
		if st.Retries != 2 || st.Waits != 2 || st.WaitTime != at[2]-at[0] {
			t.Errorf("stats %+v, arrivals %v", st, at)
		}
		if len(events) != 2 || events[0].Kind != EventRetry || events[0].Status != 429 || events[0].Key != "api.test" {
			t.Errorf("events %+v", events)
		}
	})
}

// With no jitter: the retry goes exactly at the server's time, in each of
// the forms a server names it.
func TestRetryHints(t *testing.T) {
	noJitter(t)
	for _, tt := range []struct {
		name   string
		status int
		h      func(now time.Time) http.Header
		want   time.Duration
	}{
		{"Retry-After seconds", 429, func(time.Time) http.Header { return hdr("Retry-After", "2") }, 2 * time.Second},
		{"Retry-After date", 429, func(now time.Time) http.Header {
			return hdr("Retry-After", now.Add(5*time.Second).UTC().Format(http.TimeFormat))
		}, 5 * time.Second},
		{"503 Retry-After", 503, func(time.Time) http.Header { return hdr("Retry-After", "1") }, time.Second},
		{"IETF", 429, func(time.Time) http.Header {
			return hdr("RateLimit-Policy", `"api";q=10;w=60`, "RateLimit", `"api";r=0;t=7`)
		}, 7 * time.Second},
		{"IETF window for t", 429, func(time.Time) http.Header {
			return hdr("RateLimit-Policy", `"api";q=10;w=60`, "RateLimit", `"api";r=0`)
		}, time.Minute},
		{"draft dictionary", 429, func(time.Time) http.Header { return hdr("RateLimit", `limit=10, remaining=0, reset=4`) }, 4 * time.Second},
		{"GitHub", 429, func(now time.Time) http.Header {
			return hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(now.Unix()+9, 10))
		}, 9 * time.Second},
		{"X delta", 429, func(time.Time) http.Header { return hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "6") }, 6 * time.Second},
		{"triple", 429, func(time.Time) http.Header { return hdr("RateLimit-Remaining", "0", "RateLimit-Reset", "3") }, 3 * time.Second},
		// Retry-After wins over the quota fields.
		{"both", 429, func(time.Time) http.Header {
			return hdr("Retry-After", "2", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "30")
		}, 2 * time.Second},
		{"no hint", 503, func(time.Time) http.Header { return nil }, 0},
		// GitHub answers a spent quota, and its secondary limits, with 403.
		{"GitHub 403", 403, func(now time.Time) http.Header {
			return hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(now.Unix()+8, 10))
		}, 8 * time.Second},
		{"GitHub 403 secondary", 403, func(time.Time) http.Header { return hdr("Retry-After", "3") }, 3 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bubble starts in 2000; GitHub's resets are Unix
				// times from 2001-09-09 on.
				time.Sleep(time.Until(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
				srv := newFake(func(n int, r *http.Request) (int, http.Header) {
					if n == 0 {
						return tt.status, tt.h(time.Now())
					}
					return 200, nil
				})
				res := get(t, &http.Client{Transport: MustNew(srv)}, "http://api.test/")
				at := srv.arrivals()
				if res.StatusCode != 200 || len(at) != 2 || at[1] != tt.want {
					t.Errorf("status %d, arrivals %v, want the retry at %v", res.StatusCode, at, tt.want)
				}
			})
		})
	}
}

// A 403 that names no rate limit is an answer, not a wait: it is
// returned at once, never sent again.
func TestForbiddenNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake(func(int, *http.Request) (int, http.Header) { return 403, hdr("X-RateLimit-Remaining", "12") })
		res := get(t, &http.Client{Transport: MustNew(srv)}, "http://api.test/")
		if at := srv.arrivals(); res.StatusCode != 403 || len(at) != 1 {
			t.Errorf("status %d after %d requests, want the 403 after 1", res.StatusCode, len(at))
		}
	})
}

// A 429 holds the key: a request to it made meanwhile waits until the
// hold ends (plus a jitter of up to min(hold, 1s)); other keys do not wait.
func TestHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake(func(n int, r *http.Request) (int, http.Header) {
			if n == 0 {
				return 429, hdr("Retry-After", "10")
			}
			return 200, nil
		})
		tr := MustNew(srv, WithMaxRetries(0))
		c := &http.Client{Transport: tr}
		start := time.Now()
		if res := get(t, c, "http://a.test/"); res.StatusCode != 429 {
			t.Fatalf("first: %d", res.StatusCode)
		}
		get(t, c, "http://b.test/")
		if d := time.Since(start); d != 0 {
			t.Errorf("another host waited %v", d)
		}
		time.Sleep(4 * time.Second)
		get(t, c, "http://a.test/")
		if d := time.Since(start); d < 10*time.Second || d >= 11*time.Second {
			t.Errorf("held request sent at %v, want in [10s, 11s)", d)
		}
		if st := tr.Stats(); st.Waits != 1 || st.Retries != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

// A hold longer than MaxWait: the 429 is returned as it is, and the next
// request to the key fails at once, unsent, with ErrWaitTooLong; so does
// one whose context ends before the hold.
func TestMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake(func(n int, r *http.Request) (int, http.Header) {
			return 429, hdr("Retry-After", "3600")
		})
		var refused []Event
		tr := MustNew(srv, WithObserver(func(e Event) {
			if e.Kind == EventRefused {
				refused = append(refused, e)
			}
		}))
		c := &http.Client{Transport: tr}
		start := time.Now()
		if res := get(t, c, "http://a.test/"); res.StatusCode != 429 || res.Header.Get("Retry-After") != "3600" {
			t.Fatalf("first: %d %v", res.StatusCode, res.Header)
		}
		_, err := c.Get("http://a.test/")
		if !errors.Is(err, ErrWaitTooLong) || !strings.Contains(err.Error(), "clientlimit: GET http://a.test/") {
			t.Errorf("second: %v, want ErrWaitTooLong", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("waited %v", d)
		}
		if n := len(srv.arrivals()); n != 1 {
			t.Errorf("%d requests sent, want 1", n)
		}
		if st := tr.Stats(); st.Refused != 1 || len(refused) != 1 || refused[0].Wait != time.Hour {
			t.Errorf("stats %+v, events %+v", st, refused)
		}

		// A hold of 20s within MaxWait, a context of 5s: refused at once.
		srv2 := newFake(func(n int, r *http.Request) (int, http.Header) { return 429, hdr("Retry-After", "20") })
		c2 := &http.Client{Transport: MustNew(srv2, WithMaxRetries(0))}
		get(t, c2, "http://a.test/")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://a.test/", nil)
		start = time.Now()
		_, err = c2.Do(req)
		if !errors.Is(err, ErrWaitTooLong) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 0 {
			t.Errorf("deadline before the hold: %v after %v", err, time.Since(start))
		}
		// A retry that cannot come before the deadline is not waited
		// for: the 429 is returned at once.
		srv3 := newFake(func(n int, r *http.Request) (int, http.Header) { return 429, hdr("Retry-After", "20") })
		req, _ = http.NewRequestWithContext(ctx, "GET", "http://a.test/", nil)
		res, err := (&http.Client{Transport: MustNew(srv3)}).Do(req)
		if err != nil || res.StatusCode != 429 || time.Since(start) != 0 {
			t.Errorf("retry past the deadline: %v, %v after %v", res, err, time.Since(start))
		}
	})
}

// What is safe to repeat: idempotent methods, a body GetBody replays, an
// Idempotency-Key; a POST whose body cannot be replayed is sent once.
func TestReplay(t *testing.T) {
	noJitter(t)
	newReq := func(method string, body io.Reader, key bool) *http.Request {
		r, err := http.NewRequest(method, "http://api.test/", body)
		if err != nil {
			t.Fatal(err)
		}
		if key {
			r.Header.Set("Idempotency-Key", "k1")
		}
		return r
	}
	for _, tt := range []struct {
		name  string
		req   func() *http.Request
		sends int
	}{
		{"GET", func() *http.Request { return newReq("GET", nil, false) }, 2},
		{"PUT with GetBody", func() *http.Request { return newReq("PUT", strings.NewReader("data"), false) }, 2},
		{"DELETE", func() *http.Request { return newReq("DELETE", nil, false) }, 2},
		{"POST with GetBody", func() *http.Request { return newReq("POST", bytes.NewReader([]byte("data")), false) }, 2},
		{"POST without body", func() *http.Request { return newReq("POST", nil, false) }, 1},
		{"POST without body, Idempotency-Key", func() *http.Request { return newReq("POST", nil, true) }, 2},
		{"POST without GetBody", func() *http.Request {
			return newReq("POST", io.NopCloser(strings.NewReader("data")), true)
		}, 1},
		{"PUT without GetBody", func() *http.Request { return newReq("PUT", io.NopCloser(strings.NewReader("data")), false) }, 1},
		{"PATCH without GetBody", func() *http.Request {
			return newReq("PATCH", io.NopCloser(strings.NewReader("data")), false)
		}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newFake(func(n int, r *http.Request) (int, http.Header) {
					if n == 0 {
						return 429, hdr("Retry-After", "1")
					}
					return 200, nil
				})
				res, err := MustNew(srv).RoundTrip(tt.req())
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				srv.mu.Lock()
				defer srv.mu.Unlock()
				if len(srv.at) != tt.sends {
					t.Fatalf("sent %d times, want %d", len(srv.at), tt.sends)
				}
				if want := map[int]int{1: 429, 2: 200}[tt.sends]; res.StatusCode != want || string(body) != "answer "+strconv.Itoa(tt.sends-1) {
					t.Errorf("returned %d %q, want %d", res.StatusCode, body, want)
				}
				for i, b := range srv.bodies {
					if b != srv.bodies[0] {
						t.Errorf("body %d %q, want %q", i+1, b, srv.bodies[0])
					}
				}
			})
		})
	}
}

// r units left until reset t: the next requests go one every t/r.
func TestPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake(func(n int, r *http.Request) (int, http.Header) {
			if n == 0 {
				return 200, hdr("RateLimit-Policy", `"api";q=100;w=60`, "RateLimit", `"api";r=4;t=2`)
			}
			return 200, nil // says nothing more: the pace lasts until the reset
		})
		var paced int
		tr := MustNew(srv, WithObserver(func(e Event) {
			if e.Kind == EventPaced {
				paced++
			}
		}))
		c := &http.Client{Transport: tr}
		for range 7 {
			get(t, c, "http://api.test/")
		}
		want := []time.Duration{0, 0, ms(500), ms(1000), ms(1500), ms(2000), ms(2000)}
		if got := srv.arrivals(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("sent at %v, want %v", got, want)
		}
		if paced != 4 { // the fifth waits for the reset
			t.Errorf("%d paced waits, want 4", paced)
		}
	})
}

// The most restrictive of several quotas paces; a quota counted in other
// units than requests is left out; an exhausted one holds, even on a 200.
func TestPaceMostRestrictive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake(func(n int, r *http.Request) (int, http.Header) {
			switch n {
			case 0:
				return 200, hdr("RateLimit-Policy", `"s";q=10;w=1, "h";q=1000;w=3600, "b";q=5000;w=60;qu="content-bytes"`,
					"RateLimit", `"s";r=9;t=1, "h";r=10;t=100, "b";r=1;t=60`)
			case 1:
				return 200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "30")
			}
			return 200, nil
		})
		c := &http.Client{Transport: MustNew(srv)}
		for range 3 {
			get(t, c, "http://api.test/")
		}
		at := srv.arrivals()
		if at[1] != 0 || at[2] < 30*time.Second || at[2] >= 31*time.Second {
			t.Errorf("sent at %v, want the second at once (100s/10 paces from then) and the third held for 30s", at)
		}
	})
}

// With a limiter: requests take units first, waiting as core.Wait does.
func TestLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := core.New(core.Policy{Limit: 2, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		srv := newFake(func(int, *http.Request) (int, http.Header) { return 200, nil })
		var limited time.Duration
		tr := MustNew(srv, WithLimiter(l), WithCost(func(r *http.Request) int64 {
			if r.Method == http.MethodPost {
				return 2
			}
			return 1
		}), WithObserver(func(e Event) {
			if e.Kind == EventLimited {
				limited += e.Wait
			}
		}))
		c := &http.Client{Transport: tr}
		for range 4 {
			get(t, c, "http://api.test/")
		}
		c.Post("http://api.test/", "text/plain", strings.NewReader("x"))
		at := srv.arrivals()
		if at[0] != 0 || at[1] != 0 || at[2] < ms(500) || at[3] < ms(1000) || at[4] < ms(2000) || at[4] > ms(3000) {
			t.Errorf("sent at %v", at)
		}
		if st := tr.Stats(); st.Waits != 3 || st.WaitTime != at[4] || limited != at[4] {
			t.Errorf("stats %+v, observed %v, sent at %v", st, limited, at)
		}
		// Too long a wait for the limiter: refused at once.
		l1, _ := core.New(core.Policy{Limit: 1, Window: time.Hour})
		tr = MustNew(srv, WithLimiter(l1), WithMaxWait(time.Minute))
		c = &http.Client{Transport: tr}
		get(t, c, "http://other.test/")
		start := time.Now()
		if _, err := c.Get("http://other.test/"); !errors.Is(err, ErrWaitTooLong) || time.Since(start) != 0 {
			t.Errorf("limiter past MaxWait: %v after %v", err, time.Since(start))
		}
		if st := tr.Stats(); st.Refused != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

// A storm: 50 clients denied at once with Retry-After: 1 come back spread
// over [1s, 2s) by their full jitter, not in the same instant.
func TestStormSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const clients = 50
		var mu sync.Mutex
		seen := map[string]bool{}
		var retries []time.Duration
		start := time.Now()
		srv := newFake(func(n int, r *http.Request) (int, http.Header) {
			mu.Lock()
			defer mu.Unlock()
			id := r.URL.Query().Get("c")
			if !seen[id] {
				seen[id] = true
				return 429, hdr("Retry-After", "1")
			}
			retries = append(retries, time.Since(start))
			return 200, nil
		})
		var wg sync.WaitGroup
		for i := range clients {
			c := &http.Client{Transport: MustNew(srv)}
			wg.Go(func() { get(t, c, "http://api.test/?c="+strconv.Itoa(i)) })
		}
		wg.Wait()
		s := spreadOf(retries)
		if len(retries) != clients || s.min < time.Second || s.max >= 2*time.Second || s.stddev < ms(200) {
			t.Errorf("retries %d, spread %v", len(retries), s)
		}
		t.Logf("storm (synctest): %d retries, %v", len(retries), s)
	})
}

type spread struct{ min, max, mean, stddev time.Duration }

func (s spread) String() string {
	return fmt.Sprintf("min %v max %v mean %v stddev %v", s.min.Round(time.Millisecond), s.max.Round(time.Millisecond), s.mean.Round(time.Millisecond), s.stddev.Round(time.Millisecond))
}

func spreadOf(ds []time.Duration) spread {
	if len(ds) == 0 {
		return spread{}
	}
	s := spread{min: ds[0], max: ds[0]}
	var sum float64
	for _, d := range ds {
		s.min, s.max = min(s.min, d), max(s.max, d)
		sum += float64(d)
	}
	mean := sum / float64(len(ds))
	var v float64
	for _, d := range ds {
		v += (float64(d) - mean) * (float64(d) - mean)
	}
	s.mean = time.Duration(mean)
	s.stddev = time.Duration(sqrt(v / float64(len(ds))))
	return s
}

func sqrt(x float64) float64 {
	z := x / 2
	for range 60 {
		if z == 0 {
			return 0
		}
		z = (z + x/z) / 2
	}
	return z
}

// Malformed fields are ignored, counted and reported; nothing panics.
func TestMalformed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bad []string
		srv := newFake(func(n int, r *http.Request) (int, http.Header) {
			switch n {
			case 0:
				return 429, hdr("Retry-After", "soon")
			case 1:
				return 200, hdr("RateLimit", `"api";r=`)
			}
			return 200, hdr("X-RateLimit-Remaining", "-1", "X-RateLimit-Reset", "10")
		})
		tr := MustNew(srv, WithObserver(func(e Event) {
			if e.Kind == EventMalformed {
				bad = append(bad, e.Header)
			}
		}))
		c := &http.Client{Transport: tr}
		get(t, c, "http://api.test/")
		get(t, c, "http://api.test/")
		if want := []string{"Retry-After", "Ratelimit", "X-Ratelimit-Remaining"}; fmt.Sprint(bad) != fmt.Sprint(want) {
			t.Errorf("malformed %v, want %v", bad, want)
		}
		if st := tr.Stats(); st.Malformed != 3 {
			t.Errorf("stats %+v", st)
		}
	})
}

// A server answering a RateLimit and a RateLimit-Policy of 12,000 members
// each (216 KB), the first 64 with 5 of 9s left and later ones spent for
// an hour: the transport reads the first 64 and paces by them, reports
// the field, and neither holds the key for the hour nor spends seconds
// reading the rest.
func TestHostileServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		noJitter(t)
		h := hostileFields(12000)
		rl := strings.Split(h[hRateLimit][0], ", ")
		for i := 64; i < len(rl); i++ {
			rl[i] = strings.Replace(rl[i], ";r=5", ";r=0;t=3600", 1)
		}
		h[hRateLimit] = []string{strings.Join(rl, ", ")}
		h[hRateLimitPol] = strings.Split(h[hRateLimitPol][0], ", ") // and 12,000 field lines
		srv := newFake(func(n int, r *http.Request) (int, http.Header) { return 200, h })
		var bad []string
		tr := MustNew(srv, WithMaxWait(ms(1900)), WithObserver(func(e Event) {
			if e.Kind == EventMalformed {
				bad = append(bad, e.Header)
			}
		}))
		c := &http.Client{Transport: tr}
		for range 3 {
			get(t, c, "http://api.test/")
		}
		want := []time.Duration{0, 0, ms(1800)}
		if got := srv.arrivals(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("sent at %v, want %v", got, want)
		}
		if len(bad) != 3 || bad[0] != "Ratelimit" || tr.Stats().Malformed != 3 {
			t.Errorf("malformed %v, stats %+v; want Ratelimit once a response", bad, tr.Stats())
		}
	})
}

// Key state is bounded: a client calling many hosts that all hold it off
// remembers at most MaxKeys of them.
func TestMaxKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake(func(int, *http.Request) (int, http.Header) {
			return 200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "30")
		})
		tr := MustNew(srv, WithMaxKeys(8))
		c := &http.Client{Transport: tr}
		for i := range 1000 {
			get(t, c, "http://h"+strconv.Itoa(i)+".test/")
		}
		if n := tr.keys.Len(); n != 8 {
			t.Errorf("%d keys held, want 8", n)
		}
	})
}

// A context that ends during a hold or a backoff ends the request with
// its error; the request's body is closed.
func TestCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake(func(int, *http.Request) (int, http.Header) { return 429, hdr("Retry-After", "5") })
		tr := MustNew(srv)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(2*time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, "PUT", "http://api.test/", strings.NewReader("x"))
		start := time.Now()
		_, err := tr.RoundTrip(req)
		if !errors.Is(err, context.Canceled) || time.Since(start) != 2*time.Second {
			t.Errorf("canceled during the backoff: %v after %v", err, time.Since(start))
		}
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		body := &trackedBody{Reader: strings.NewReader("x"), closed: new(atomic.Int64)}
		req, _ = http.NewRequestWithContext(ctx, "POST", "http://api.test/", body)
		_, err = tr.RoundTrip(req)
		if !errors.Is(err, context.Canceled) || body.closed.Load() != 1 {
			t.Errorf("canceled during the hold: %v, body closed %d times", err, body.closed.Load())
		}
	})
}

// Every configuration mistake is an error from New, naming it, and a
// panic from MustNew with the same message.
func TestNewErrors(t *testing.T) {
	l, err := core.New(core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts []Option
		want string
	}{
		{"nil option", []Option{nil}, "clientlimit: New: option 1 is nil"},
		{"nil option after one", []Option{WithMaxRetries(1), nil}, "clientlimit: New: option 2 is nil"},
		{"WithLimiter(nil)", []Option{WithLimiter(nil)}, "clientlimit: WithLimiter(nil): "},
		{"WithKey(nil)", []Option{WithKey(nil)}, "clientlimit: WithKey(nil): "},
		{"WithCost(nil)", []Option{WithCost(nil)}, "clientlimit: WithCost(nil): "},
		{"WithObserver(nil)", []Option{WithObserver(nil)}, "clientlimit: WithObserver(nil): "},
		{"negative retries", []Option{WithMaxRetries(-1)}, "clientlimit: WithMaxRetries(-1): "},
		{"zero wait", []Option{WithMaxWait(0)}, "clientlimit: WithMaxWait(0s): "},
		{"negative wait", []Option{WithMaxWait(-time.Second)}, "clientlimit: WithMaxWait(-1s): "},
		{"zero keys", []Option{WithMaxKeys(0)}, "clientlimit: WithMaxKeys(0): "},
		{"a mistake among valid options", []Option{WithLimiter(l), WithMaxKeys(-1), WithMaxWait(time.Second)}, "clientlimit: WithMaxKeys(-1): "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := New(nil, tt.opts...)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) || tr != nil {
				t.Fatalf("New = %v, %v; want nil and an error starting %q", tr, err, tt.want)
			}
			defer func() {
				if r := recover(); fmt.Sprint(r) != err.Error() {
					t.Errorf("MustNew panicked with %v; want %q", r, err)
				}
			}()
			MustNew(nil, tt.opts...)
		})
	}
	tr, err := New(nil, WithLimiter(l), WithObserver(func(Event) {}), WithMaxRetries(0), WithMaxWait(time.Second), WithMaxKeys(1))
	if err != nil || tr.base != http.DefaultTransport {
		t.Errorf("New(nil, valid options) = %v, %v; want a Transport on http.DefaultTransport", tr, err)
	}
}

// A key function's "" and a cost function's 0 are the request's mistakes:
// the request fails, unsent, with the error that names them.
func TestRequestKeyAndCostErrors(t *testing.T) {
	l, err := core.New(core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := newFake(func(int, *http.Request) (int, http.Header) { return 200, nil })
	for _, tc := range []struct {
		name string
		opt  Option
		want error
	}{
		{"empty key", WithKey(func(*http.Request) string { return "" }), core.ErrEmptyKey},
		{"zero cost", WithCost(func(*http.Request) int64 { return 0 }), core.ErrInvalidCost},
	} {
		tr, err := New(srv, WithLimiter(l), tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
		if _, err := tr.RoundTrip(req); !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "clientlimit: ") {
			t.Errorf("%s: RoundTrip error %v; want one wrapping %v", tc.name, err, tc.want)
		}
	}
	if n := len(srv.arrivals()); n != 0 {
		t.Errorf("the server saw %d requests; want none", n)
	}
}
