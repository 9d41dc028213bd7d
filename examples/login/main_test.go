package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

const (
	ipA = "203.0.113.7"
	ipB = "198.51.100.9"
)

// newTestServer returns the login handler on memory limiters reading a
// manual clock, with a low work factor so that tests run fast.
func newTestServer(t *testing.T) (*core.ManualClock, http.Handler) {
	t.Helper()
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	h, err := newServer(config{
		newLimiter: func(p core.Policy) (core.Limiter, error) { return core.New(p, core.WithClock(clock)) },
		users:      demoUsers,
		iterations: 1000,
		logf:       t.Logf,
		clock:      clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	return clock, h
}

// login posts a form login from ip and returns the response.
func login(t *testing.T, h http.Handler, ip, email, password string) *http.Response {
	t.Helper()
	form := url.Values{"email": {email}, "password": {password}}.Encode()
	return do(t, h, ip, "application/x-www-form-urlencoded", form)
}

// loginJSON posts a JSON login.
func loginJSON(t *testing.T, h http.Handler, ip, email, password string) *http.Response {
	t.Helper()
	body := fmt.Sprintf(`{"email":%q,"password":%q}`, email, password)
	return do(t, h, ip, "application/json", body)
}

func do(t *testing.T, h http.Handler, ip, contentType, body string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	r.RemoteAddr = ip + ":41234"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// expect checks a response's status and, when it is 429, its Retry-After.
func expect(t *testing.T, what string, res *http.Response, status int, retryAfter string) {
	t.Helper()
	if res.StatusCode != status {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("%s: status %d (%s), want %d", what, res.StatusCode, body, status)
	}
	if got := res.Header.Get("Retry-After"); got != retryAfter {
		t.Fatalf("%s: Retry-After %q, want %q", what, got, retryAfter)
	}
	for name := range res.Header {
		if strings.Contains(strings.ToLower(name), "ratelimit") {
			t.Errorf("%s: header %s: %q: no counter may leave the server", what, name, res.Header[name])
		}
	}
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const blocked900 = `{"type":"https://pkg.go.dev/github.com/ratekit/ratekit/httplimit#ProblemRateLimited","title":"Too many requests","status":429,"detail":"Try again in 900 seconds.","policy":"login"}`

func TestWrongPasswordsThenBlocked(t *testing.T) {
	clock, h := newTestServer(t)
	for i := range 5 {
		res := login(t, h, ipA, "ana@example.com", "wrong")
		expect(t, fmt.Sprint("wrong password ", i+1), res, http.StatusUnauthorized, "")
	}
	res := login(t, h, ipA, "ana@example.com", "ana-secret")
	expect(t, "right password after 5 wrong ones", res, http.StatusTooManyRequests, "900")
	if got := body(t, res); got != blocked900 {
		t.Errorf("429 body:\n%s\nwant:\n%s", got, blocked900)
	}
	for name, want := range map[string]string{"Content-Type": "application/problem+json", "Cache-Control": "no-store"} {
		if got := res.Header.Get(name); got != want {
			t.Errorf("429 %s: %q, want %q", name, got, want)
		}
	}
	expect(t, "from another IP", login(t, h, ipB, "ana@example.com", "ana-secret"), http.StatusTooManyRequests, "900")

	clock.Advance(15*time.Minute - time.Second)
	expect(t, "a second early", login(t, h, ipA, "ana@example.com", "ana-secret"), http.StatusTooManyRequests, "1")
	clock.Advance(time.Second)
	res = login(t, h, ipA, "ana@example.com", "ana-secret")
	expect(t, "after 15 minutes", res, http.StatusOK, "")
	if got, want := body(t, res), `{"signed_in":"ana@example.com"}`+"\n"; got != want {
		t.Errorf("200 body %q, want %q", got, want)
	}
}

func TestEmailNormalizedToOneAccount(t *testing.T) {
	_, h := newTestServer(t)
	for range 3 {
		expect(t, "Ana@Example.com + space, JSON", loginJSON(t, h, ipA, "Ana@Example.com ", "wrong"), http.StatusUnauthorized, "")
	}
	for range 2 {
		expect(t, "ana@example.com, form", login(t, h, ipB, "ana@example.com", "wrong"), http.StatusUnauthorized, "")
	}
	for _, email := range []string{"ana@example.com", "Ana@Example.com ", "ＡＮＡ@example.com"} {
		expect(t, email, login(t, h, ipB, email, "ana-secret"), http.StatusTooManyRequests, "900")
	}
	expect(t, "another account", login(t, h, ipB, "bob@example.com", "bob-secret"), http.StatusOK, "")
}

func TestIPBlockedAcrossAccounts(t *testing.T) {
	_, h := newTestServer(t)
	accounts := []string{"ana@example.com", "bob@example.com", "carol@example.com"}
	for i := range 47 {
		accounts = append(accounts, fmt.Sprintf("user%d@example.com", i)) // unknown ones
	}
	for _, email := range accounts {
		expect(t, email+" from A", login(t, h, ipA, email, "Winter2026!"), http.StatusUnauthorized, "")
	}
	expect(t, "51st attempt from A", login(t, h, ipA, "dave@example.com", "Winter2026!"), http.StatusTooManyRequests, "900")
	expect(t, "51st attempt from A, right password", login(t, h, ipA, "bob@example.com", "bob-secret"), http.StatusTooManyRequests, "900")
	// The same accounts from another IP are not blocked: each of the 50
	// users signs in, and each unknown one is told the password is wrong.
	for _, email := range accounts {
		if password, ok := demoUsers[email]; ok {
			expect(t, email+" from B", login(t, h, ipB, email, password), http.StatusOK, "")
		} else {
			expect(t, email+" from B", login(t, h, ipB, email, "Summer2026!"), http.StatusUnauthorized, "")
		}
	}
}

func TestSuccessClearsAccount(t *testing.T) {
	_, h := newTestServer(t)
	for range 4 {
		expect(t, "wrong", login(t, h, ipA, "ana@example.com", "wrong"), http.StatusUnauthorized, "")
	}
	expect(t, "right", login(t, h, ipA, "ana@example.com", "ana-secret"), http.StatusOK, "")
	for i := range 5 {
		expect(t, fmt.Sprint("wrong after success ", i+1), login(t, h, ipA, "ana@example.com", "wrong"), http.StatusUnauthorized, "")
	}
	expect(t, "sixth", login(t, h, ipA, "ana@example.com", "ana-secret"), http.StatusTooManyRequests, "900")
}

// An unknown email and a wrong password get the same bytes, over a real
// connection: status, headers (but Date) and body; blocked, too.
func TestUnknownEmailLooksLikeWrongPassword(t *testing.T) {
	_, h := newTestServer(t)
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(email string) (int, http.Header, string) {
		t.Helper()
		res, err := http.PostForm(srv.URL+"/login", url.Values{"email": {email}, "password": {"wrong"}})
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b := body(t, res)
		res.Header.Del("Date")
		return res.StatusCode, res.Header, b
	}
	for i := range 6 {
		s1, h1, b1 := post("ana@example.com")
		s2, h2, b2 := post("nobody@example.com")
		if s1 != s2 || !reflect.DeepEqual(h1, h2) || b1 != b2 {
			t.Fatalf("attempt %d differs:\nknown:   %d %v %s\nunknown: %d %v %s", i+1, s1, h1, b1, s2, h2, b2)
		}
		if want := []int{401, 401, 401, 401, 401, 429}[i]; s1 != want {
			t.Fatalf("attempt %d: status %d, want %d", i+1, s1, want)
		}
		if i == 0 {
			t.Logf("401: %v %s", h1, b1)
		}
	}
}

// The account's lock grows while it keeps failing: after 5 wrong
// passwords (their 1m lock hides behind the 15-minute window), each wrong
// one while they are within the hour locks it twice as long; then 5 an
// hour, each 5th locking it for the hour. A success resets it.
func TestGrowingLockout(t *testing.T) {
	clock, h := newTestServer(t)
	round := func(name string, wrong int, want string) {
		t.Helper()
		for range wrong {
			expect(t, name, login(t, h, ipA, "ana@example.com", "wrong"), http.StatusUnauthorized, "")
		}
		expect(t, name+" blocked", login(t, h, ipB, "ana@example.com", "ana-secret"), http.StatusTooManyRequests, want)
		var secs int
		fmt.Sscan(want, &secs)
		clock.Advance(time.Duration(secs) * time.Second)
	}
	round("first 5", 5, "900")
	for _, want := range []string{"120", "240", "480", "960", "1920"} {
		round("one more within the hour", 1, want)
	}
	round("5 in the next hour", 5, "3600")
	round("5 in the one after", 5, "3600")
	expect(t, "after the last lock", login(t, h, ipB, "ana@example.com", "ana-secret"), http.StatusOK, "")
	for range 5 {
		expect(t, "after a success", login(t, h, ipA, "ana@example.com", "wrong"), http.StatusUnauthorized, "")
	}
	expect(t, "level reset by the success", login(t, h, ipB, "ana@example.com", "ana-secret"), http.StatusTooManyRequests, "900")
}

// Requests without a usable email or password are refused with 400 and
// count nothing; other methods get 405.
// A JSON login is one account's guess whatever its Content-Type says
// (browsers' fetch sends a string body as text/plain): five guesses
// labelled five ways, from five addresses, block the account.
func TestContentTypeRespelledOneAccount(t *testing.T) {
	_, h := newTestServer(t)
	for i, ct := range []string{"text/plain;charset=UTF-8", "", "application/json;", "application/octet-stream", "application/x-www-form-urlencoded"} {
		ip := fmt.Sprintf("192.0.2.%d", i+1)
		expect(t, "JSON as "+ct, do(t, h, ip, ct, `{"email":"ana@example.com","password":"wrong"}`), http.StatusUnauthorized, "")
	}
	expect(t, "the right password", loginJSON(t, h, ipB, "ana@example.com", "ana-secret"), http.StatusTooManyRequests, "900")
}

func TestBadRequests(t *testing.T) {
	_, h := newTestServer(t)
	for _, tc := range []struct{ contentType, body string }{
		{"application/x-www-form-urlencoded", "password=x"},
		{"application/x-www-form-urlencoded", "email=&password=x"},
		{"application/x-www-form-urlencoded", "email=ana%E2%80%8B%40example.com&password=x"}, // U+200B
		{"application/x-www-form-urlencoded", "email=not-an-email&password=x"},
		{"application/x-www-form-urlencoded", "email=ana%40example.com&email=bob%40example.com&password=x"},
		{"application/x-www-form-urlencoded", "email=ana%40example.com"},
		{"application/json", `{"email":"ana@example.com","password":""}`},
		{"application/json", `{"email":"ana@example.com","password":42}`},
		{"application/json", `{"email":`},
		{"text/plain", "ana@example.com wrong"},
		{"application/json", `{"email":"ana@example.com","password":"` + strings.Repeat("x", maxBodyBytes) + `"}`},
	} {
		res := do(t, h, ipA, tc.contentType, tc.body)
		expect(t, tc.body, res, http.StatusBadRequest, "")
		if got, want := body(t, res), `{"error":"a valid email and a password are required"}`+"\n"; got != want {
			t.Errorf("%s: body %q, want %q", tc.body, got, want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/login", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /login: %d, want 405", w.Code)
	}
	for i := range 5 {
		expect(t, fmt.Sprint("wrong ", i+1), login(t, h, ipA, "ana@example.com", "wrong"), http.StatusUnauthorized, "")
	}
}

func TestParseFlags(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want settings
	}{
		{nil, nil, settings{addr: "127.0.0.1:8080"}},
		{[]string{"-addr", ":9000", "-redis", "10.0.0.5:6379"}, nil, settings{addr: ":9000", redis: "10.0.0.5:6379"}},
		{nil, map[string]string{"RATEKIT_REDIS": "redis:6379"}, settings{addr: "127.0.0.1:8080", redis: "redis:6379"}},
		{[]string{"-redis="}, map[string]string{"RATEKIT_REDIS": "redis:6379"}, settings{addr: "127.0.0.1:8080"}},
	} {
		got, err := parseFlags(tc.args, env(tc.env), io.Discard)
		if err != nil || got != tc.want {
			t.Errorf("parseFlags(%q, %v) = %+v, %v; want %+v", tc.args, tc.env, got, err, tc.want)
		}
	}
	if _, err := parseFlags([]string{"extra"}, env(nil), io.Discard); err == nil {
		t.Error("parseFlags accepted a stray argument")
	}
}

// run starts a real server on a free port, answers, and stops when its
// context ends.
func TestRun(t *testing.T) {
	defer func(n int) { iterations = n }(iterations)
	iterations = 1000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-redis="}, func(string) string { return "" }, pw)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	var url string
	for url == "" && lines.Scan() {
		if _, u, ok := strings.Cut(lines.Text(), "listening on "); ok {
			url = u
		}
	}
	if url == "" {
		t.Fatalf("no address logged; run: %v", <-done)
	}
	go io.Copy(io.Discard, pr)
	res, err := http.PostForm(url, map[string][]string{"email": {"nobody@example.com"}, "password": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", res.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

// Guesses sent in parallel cannot all reach the password check: each
// attempt is counted before its password is hashed, so of 23 wrong guesses
// for one account sent at once at most 5 are checked (401) and the rest
// are refused (429); the right password, sent after them, is refused too.
func TestParallelGuessesCapped(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	h, err := newServer(config{
		newLimiter: func(p core.Policy) (core.Limiter, error) { return core.New(p, core.WithClock(clock)) },
		users:      demoUsers,
		iterations: 20_000, // slow enough that the attempts overlap
		logf:       t.Logf,
		clock:      clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	const guesses = 23
	statuses := make(chan int, guesses)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range guesses {
		wg.Go(func() {
			<-start
			statuses <- login(t, h, fmt.Sprint("192.0.2.", i), "ana@example.com", "wrong").StatusCode
		})
	}
	close(start)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[http.StatusUnauthorized] > 5 || count[http.StatusUnauthorized]+count[http.StatusTooManyRequests] != guesses {
		t.Errorf("statuses %v: want at most 5 passwords checked (401) and every other guess refused (429)", count)
	}
	expect(t, "the right password after them", login(t, h, ipB, "ana@example.com", "ana-secret"), http.StatusTooManyRequests, "900")
}
