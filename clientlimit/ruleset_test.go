package clientlimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/rules"
)

// These tests run in synctest bubbles: the rule set's memory limiters read
// the system clock, which is the bubble's, so every wait is exact.

const twoRules = `
rules:
  - name: chat
    match: {routes: [/v1/chat], methods: [POST]}
    limits:
      - {name: per-host, rate: %s, key: host}
  - name: everything-else
    limits:
      - {name: per-host, rate: %s, key: host}
`

func ruleLimiter(t *testing.T, chat, rest string) *rules.Limiter {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(sprintf(twoRules, chat, rest)), rules.WithKeyFunc("host", HostKey))
	if err != nil {
		t.Fatal(err)
	}
	l, err := rules.NewLimiter(set)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func sprintf(format string, a ...string) string {
	for _, s := range a {
		format = strings.Replace(format, "%s", s, 1)
	}
	return format
}

func do(t *testing.T, c *http.Client, method, url string) error {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return nil
}

// Two rules, POST /v1/chat at 2 a minute per host and everything else at
// 10 a minute per host, as leaky buckets: each request goes at its exact
// place in its rule's queue, the chat's every 30s, the rest every 6s, and
// each host has its own queues.
func TestRuleSetPaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ruleLimiter(t, "2/1m algorithm=leaky-bucket", "10/1m algorithm=leaky-bucket")
		srv := newFake(func(int, *http.Request) (int, http.Header) { return 200, nil })
		var events []Event
		tr := MustNew(srv, WithLimiter(l), WithMaxWait(10*time.Minute), WithObserver(func(e Event) { events = append(events, e) }))
		c := &http.Client{Transport: tr}
		start := time.Now()
		sentAt := func(method, url string) time.Duration {
			t.Helper()
			if err := do(t, c, method, url); err != nil {
				t.Fatal(err)
			}
			return time.Since(start)
		}
		var chat, rest []time.Duration
		for range 3 {
			chat = append(chat, sentAt("POST", "http://api.test/v1/chat"))
		}
		// The chat's queue is the host's own: the other host's first goes
		// at once.
		if d := sentAt("POST", "http://other.test/v1/chat") - chat[2]; d != 0 {
			t.Errorf("another host's chat waited %v", d)
		}
		base := time.Since(start)
		for range 3 {
			rest = append(rest, sentAt("GET", "http://api.test/v1/models")-base)
		}
		// POST /v1/chat?x and GET /v1/chat are not the chat rule's.
		if want := []time.Duration{0, 30 * time.Second, 60 * time.Second}; !equalDurations(chat, want) {
			t.Errorf("chat sent at %v, want %v", chat, want)
		}
		if want := []time.Duration{0, 6 * time.Second, 12 * time.Second}; !equalDurations(rest, want) {
			t.Errorf("the rest sent at %v, want %v", rest, want)
		}
		st := tr.Stats()
		if st.Waits != 4 || st.WaitTime != 72*time.Second || st.Refused != 0 {
			t.Errorf("stats %+v", st)
		}
		var rulesSeen []string
		for _, e := range events {
			if e.Kind != EventLimited || e.Key == "" {
				t.Errorf("event %+v", e)
			}
			rulesSeen = append(rulesSeen, e.Rule)
		}
		if got := strings.Join(rulesSeen, " "); got != "chat chat everything-else everything-else" {
			t.Errorf("events' rules %q", got)
		}
	})
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// As token buckets: a denied request waits its rule's RetryAfter plus
// core.Wait's jitter (under 1s), and one that would wait longer than
// MaxWait is refused at once, unsent, counting nothing.
func TestRuleSetWaitsAndRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ruleLimiter(t, "2/1m", "10/1m")
		srv := newFake(func(int, *http.Request) (int, http.Header) { return 200, nil })
		var refused []Event
		tr := MustNew(srv, WithLimiter(l), WithMaxWait(time.Minute), WithObserver(func(e Event) {
			if e.Kind == EventRefused {
				refused = append(refused, e)
			}
		}))
		c := &http.Client{Transport: tr}
		for range 3 {
			if err := do(t, c, "POST", "http://api.test/v1/chat"); err != nil {
				t.Fatal(err)
			}
		}
		at := srv.arrivals()
		if at[0] != 0 || at[1] != 0 || at[2] < 30*time.Second || at[2] >= 31*time.Second {
			t.Errorf("sent at %v, want 0, 0 and in [30s, 31s)", at)
		}
		// 20 of the other rule's at once: 10 go, and the 11th waits 6s.
		for range 11 {
			if err := do(t, c, "GET", "http://api.test/"); err != nil {
				t.Fatal(err)
			}
		}
		at = srv.arrivals()
		if d := at[13] - at[12]; d < 6*time.Second || d >= 7*time.Second {
			t.Errorf("the 11th GET waited %v, want in [6s, 7s)", d)
		}

		// A MaxWait shorter than the chat's 30s: refused at once.
		tr = MustNew(srv, WithLimiter(l), WithMaxWait(10*time.Second), WithObserver(func(e Event) {
			if e.Kind == EventRefused {
				refused = append(refused, e)
			}
		}))
		c = &http.Client{Transport: tr}
		n := len(srv.arrivals())
		start := time.Now()
		for range 2 {
			if err := do(t, c, "POST", "http://b.test/v1/chat"); err != nil {
				t.Fatal(err)
			}
		}
		err := do(t, c, "POST", "http://b.test/v1/chat")
		if !errors.Is(err, ErrWaitTooLong) || time.Since(start) != 0 {
			t.Errorf("past MaxWait: %v after %v", err, time.Since(start))
		}
		if sent := len(srv.arrivals()) - n; sent != 2 {
			t.Errorf("%d sent, want 2", sent)
		}
		if st := tr.Stats(); st.Refused != 1 {
			t.Errorf("stats %+v", st)
		}
		if len(refused) != 1 || refused[0].Rule != "chat" || refused[0].Key != "b.test" || !errors.Is(refused[0].Err, ErrWaitTooLong) {
			t.Errorf("refusals %+v", refused)
		}
	})
}

// A leaky bucket's place that comes after the request's deadline: the
// request is refused at once and its place given back, so that the next
// request takes it.
func TestRuleSetGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ruleLimiter(t, "2/1m algorithm=leaky-bucket", "2/1m algorithm=leaky-bucket")
		srv := newFake(func(int, *http.Request) (int, http.Header) { return 200, nil })
		tr := MustNew(srv, WithLimiter(l))
		c := &http.Client{Transport: tr}
		if err := do(t, c, "GET", "http://api.test/"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
		if _, err := c.Do(req); !errors.Is(err, ErrWaitTooLong) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("place after the deadline: %v", err)
		}
		// Its place was given back: the next one goes at 30s, not 60s.
		if err := do(t, c, "GET", "http://api.test/"); err != nil {
			t.Fatal(err)
		}
		if at := srv.arrivals(); len(at) != 2 || at[1] != 30*time.Second {
			t.Errorf("sent at %v, want 0 and 30s", at)
		}
	})
}

// A reload takes effect at the next request: a limit raised from 1 an
// hour to 10 a minute keeps the unit used (9 left), and a rule removed no
// longer limits.
func TestRuleSetReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		write := func(chat, rest string) {
			t.Helper()
			if err := os.WriteFile(path, []byte(sprintf(twoRules, chat, rest)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write("1/1h", "1/1h")
		src, err := rules.Open(path, rules.WithKeyFunc("host", HostKey))
		if err != nil {
			t.Fatal(err)
		}
		l, err := rules.NewLimiter(src)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		srv := newFake(func(int, *http.Request) (int, http.Header) { return 200, nil })
		c := &http.Client{Transport: MustNew(srv, WithLimiter(l))}
		if err := do(t, c, "GET", "http://api.test/"); err != nil {
			t.Fatal(err)
		}
		if err := do(t, c, "GET", "http://api.test/"); !errors.Is(err, ErrWaitTooLong) {
			t.Fatalf("1/1h, second request: %v", err)
		}
		write("1/1h", "10/1m")
		if err := src.Reload(); err != nil {
			t.Fatal(err)
		}
		for i := range 9 {
			if err := do(t, c, "GET", "http://api.test/"); err != nil {
				t.Fatalf("after the reload, request %d: %v", i+1, err)
			}
		}
		if at := srv.arrivals(); len(at) != 10 || at[9] != 0 {
			t.Errorf("sent at %v, want 10 at once", at)
		}
		start := time.Now()
		if err := do(t, c, "GET", "http://api.test/"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 6*time.Second || d >= 7*time.Second {
			t.Errorf("the 11th waited %v, want in [6s, 7s): 9 left after the reload, not 10", d)
		}
	})
}

// The options a rule set makes meaningless, and WithRoute without one,
// are refused at New.
func TestRuleSetOptions(t *testing.T) {
	l := ruleLimiter(t, "2/1m", "10/1m")
	host := func(r *http.Request) string { return r.URL.Host }
	cost := func(*http.Request) int64 { return 1 }
	route := func(*http.Request) string { return "/" }
	for _, tt := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithLimiter(l), WithKey(host)}, "clientlimit: New: WithKey with a rule set (an httplimit.RequestLimiter), whose limits have keys of their own"},
		{[]Option{WithCost(cost), WithLimiter(l)}, "clientlimit: New: WithCost with a rule set (an httplimit.RequestLimiter), whose limits have costs of their own"},
		{[]Option{WithLimiter(l), WithKey(host), WithCost(cost)}, "WithKey with a rule set (an httplimit.RequestLimiter), whose limits have keys of their own\nclientlimit: New: WithCost"},
		{[]Option{WithRoute(route)}, "clientlimit: New: WithRoute without a rule set"},
		{[]Option{WithLimiter(l), WithRoute(nil)}, "clientlimit: WithRoute(nil): a route function is required"},
	} {
		_, err := New(nil, tt.opts...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("got %v, want %q", err, tt.want)
		}
	}
	if _, err := New(nil, WithLimiter(l), WithRoute(route)); err != nil {
		t.Error(err)
	}
}

// A request whose key cannot be found fails, unsent, its body closed, with
// the rule set's error; so does one whose rule needs a route WithRoute
// does not give.
func TestRuleSetKeyError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		set, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: keyed
    match: {routes: [/v1/*]}
    limits:
      - {name: per-key, rate: 10/1m, key: "header:X-Api-Key"}
  - name: by-peer
    limits:
      - {name: per-peer, rate: 10/1m, key: peer}
`))
		if err != nil {
			t.Fatal(err)
		}
		l, err := rules.NewLimiter(set)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		srv := newFake(func(int, *http.Request) (int, http.Header) { return 200, nil })
		c := &http.Client{Transport: MustNew(srv, WithLimiter(l))}
		body := &closeCount{Reader: strings.NewReader("x")}
		req, _ := http.NewRequest("POST", "http://api.test/v1/chat", body)
		_, err = c.Do(req)
		var ke *httplimit.KeyError
		if !errors.As(err, &ke) || ke.Limit != "keyed/per-key" || !errors.Is(err, keyfunc.ErrNoKey) {
			t.Errorf("no X-Api-Key: %v", err)
		}
		if body.closed == 0 {
			t.Error("the body of a request not sent was not closed")
		}
		req, _ = http.NewRequest("GET", "http://api.test/v1/chat", nil)
		req.Header.Set("X-Api-Key", "k1")
		if _, err := c.Do(req); err != nil {
			t.Errorf("with X-Api-Key: %v", err)
		}
		// peer: the URL's host, an IP address or nothing.
		if err := do(t, c, "GET", "http://192.0.2.7:8080/"); err != nil {
			t.Errorf("peer of an IP URL: %v", err)
		}
		if err := do(t, c, "GET", "http://api.test/"); !errors.Is(err, keyfunc.ErrNoKey) {
			t.Errorf("peer of a host name: %v", err)
		}
		if n := len(srv.arrivals()); n != 2 {
			t.Errorf("%d sent, want 2", n)
		}

		// A route function that knows no route: the rule with routes
		// fails the request instead of passing it to the laxer rule.
		c = &http.Client{Transport: MustNew(srv, WithLimiter(l), WithRoute(func(*http.Request) string { return "" }))}
		if err := do(t, c, "GET", "http://192.0.2.7/"); !errors.As(err, &ke) || !errors.Is(err, keyfunc.ErrNoKey) {
			t.Errorf("unknown route: %v", err)
		}
	})
}

type closeCount struct {
	io.Reader
	closed int
}

func (b *closeCount) Close() error { b.closed++; return nil }

// The view the rules read of an outgoing request.
func TestOutgoingView(t *testing.T) {
	req, _ := http.NewRequest("", "http://api.test:8443/v1/items?user=ana&user=ana&x=1&x=2", strings.NewReader("user=bob"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Add("X-Tag", "a")
	req.Header.Add("X-Tag", "b")
	o := &outgoing{r: req}
	if o.Method() != "GET" || o.Route() != "/v1/items" || o.RemoteAddr() != "api.test:8443" || o.Context() != req.Context() {
		t.Errorf("method %q route %q remote %q", o.Method(), o.Route(), o.RemoteAddr())
	}
	if h := o.Header("HOST"); len(h) != 1 || h[0] != "api.test:8443" {
		t.Errorf("Host %q", h)
	}
	req.Host = "front.test"
	if h := o.Header("host"); len(h) != 1 || h[0] != "front.test" {
		t.Errorf("Host %q, want the request's Host", h)
	}
	if k, err := HostKey(o); k != "front.test" || err != nil {
		t.Errorf("HostKey = %q, %v", k, err)
	}
	if _, err := HostKey(keyfunc.FromHTTP(&http.Request{Header: http.Header{}})); !errors.Is(err, keyfunc.ErrNoKey) {
		t.Errorf("HostKey of a server's view: %v", err)
	}
	if h := o.Header("x-tag"); strings.Join(h, ",") != "a,b" {
		t.Errorf("X-Tag %q", h)
	}
	if v, err := o.Field("user"); v != "ana" || err != nil {
		t.Errorf("Field(user) = %q, %v: want the query's, not the body's", v, err)
	}
	if _, err := o.Field("x"); !errors.Is(err, keyfunc.ErrInvalidKey) {
		t.Errorf("Field(x) given twice: %v", err)
	}
	if b, _ := io.ReadAll(req.Body); string(b) != "user=bob" {
		t.Errorf("the body was read: %q left", b)
	}
	req.URL.Path = ""
	if o.Route() != "/" {
		t.Errorf("empty path: route %q", o.Route())
	}
	o.route = func(*http.Request) string { return "/v1/items/{id}" }
	if o.Route() != "/v1/items/{id}" {
		t.Errorf("WithRoute's route %q", o.Route())
	}
}

// The pacing path with a rule set: what one request costs in time and
// allocations, beside a plain limiter's. The rule set's own path
// allocates nothing: "rules" allocates what "limiter" does (the MaxWait
// context), and "rules-header" adds what the header:Host key spec's
// hashing allocates.
func BenchmarkRuleSet(b *testing.B) {
	const rate = "1000000000/1s"
	ruleSet := func(key string) *rules.Limiter {
		file := strings.ReplaceAll(sprintf(twoRules, rate, rate), "key: host", "key: "+key)
		set, err := rules.Parse("rules.yaml", []byte(file), rules.WithKeyFunc("host", HostKey))
		if err != nil {
			b.Fatal(err)
		}
		rl, err := rules.NewLimiter(set)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rl.Close() })
		return rl
	}
	rl := ruleSet("host")
	pl, err := core.New(rl.Set().Rule("chat").Policies()[0])
	if err != nil {
		b.Fatal(err)
	}
	res := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return res, nil })
	for _, bb := range []struct {
		name string
		tr   *Transport
	}{
		{"limiter", MustNew(base, WithLimiter(pl))},
		{"rules", MustNew(base, WithLimiter(rl))},
		{"rules-header", MustNew(base, WithLimiter(ruleSet(`"header:Host"`)))},
	} {
		b.Run(bb.name, func(b *testing.B) {
			req, _ := http.NewRequest("POST", "http://api.test/v1/chat", nil)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bb.tr.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Concurrent requests through one rule set, on two hosts: each host's
// requests go no faster than its token bucket allows (10 at once, then
// one every 6s), whatever the order the waiters come back in.
func TestRuleSetConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ruleLimiter(t, "2/1m", "10/1m")
		var mu sync.Mutex
		at := map[string][]time.Duration{}
		start := time.Now()
		srv := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			at[r.URL.Host] = append(at[r.URL.Host], time.Since(start))
			mu.Unlock()
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		c := &http.Client{Transport: MustNew(srv, WithLimiter(l), WithMaxWait(10*time.Minute))}
		var wg sync.WaitGroup
		for i := range 40 {
			host := []string{"a.test", "b.test"}[i%2]
			wg.Go(func() {
				if err := do(t, c, "GET", "http://"+host+"/v1/models"); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for host, times := range at {
			if len(times) != 20 {
				t.Errorf("%s: %d sent, want 20", host, len(times))
			}
			slices.Sort(times)
			for i, d := range times {
				if earliest := time.Duration(max(i-9, 0)) * 6 * time.Second; d < earliest {
					t.Errorf("%s: request %d sent at %v, before %v", host, i, d, earliest)
				}
			}
		}
	})
}
