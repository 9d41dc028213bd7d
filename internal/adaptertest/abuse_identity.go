package adaptertest

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// The identity abuse cases: one account or credential, spelled every way
// a client can spell it, is one key; a request whose identity the limiter
// cannot read is refused, never keyed by its address instead.

func init() { abuseParts = append(abuseParts, identityCases) }

func identityCases() []Case {
	return []Case{
		{
			Name: "abuse/login limit holds whatever the Content-Type, from many addresses",
			App:  readmeLogin,
			Run:  contentTypeGuesses,
		},
		{
			Name: "abuse/a login without a readable account is refused, not keyed by its address",
			App:  readmeLogin,
			Run:  unreadableLogins,
		},
		{
			Name: "abuse/one Authorization credential is one key however it is spelled",
			App: func(t *testing.T, env *Env) *App {
				return use(env.Limiter(t, core.Policy{Name: "api", Limit: 2, Window: time.Minute}),
					opts(env, httplimit.WithKey(keyfunc.Header("Authorization", []byte("server-side secret"))))...)
			},
			Run: credentialSpellings,
		},
	}
}

// readmeLogin is the README's login limit: 5 failures per account in any
// 15 minutes, counted before the handler and given back on success.
func readmeLogin(t *testing.T, env *Env) *App {
	l := env.Limiter(t, core.Policy{Name: "login", Algorithm: core.SlidingLog, Limit: 5, Window: 15 * time.Minute})
	return &App{Routes: []Route{{Method: "POST", Pattern: "/login", Limit: &Limit{Limiter: l, Options: opts(env,
		httplimit.WithKey(keyfunc.Email("email")),
		httplimit.WithCountIf(httplimit.Failures),
		httplimit.WithClock(env.Clock),
	)}}}}
}

// loginContentTypes are the Content-Types a client may give a JSON login
// body that a handler decoding JSON without looking at the type
// (json.NewDecoder, gin's ShouldBindJSON) reads alike; "-" sends none.
var loginContentTypes = []string{
	"application/json", "text/plain", "-", "application/json;", "application/json;;",
	"text/plain;charset=UTF-8", "application/octet-stream", "application/x-www-form-urlencoded",
	`application/json; charset="x`, "application/jsonx", "json", "APPLICATION/JSON",
}

// sendLogin posts body with contentType ("-" for none) from peer, the
// handler answering 401 as to a wrong password, and returns the status
// and whether the handler ran.
func sendLogin(app *App, serve func(*http.Request) *http.Response, peer, contentType, body string) (int, bool) {
	req, cancel := build(app, Req{Method: "POST", Path: "/login", Body: body, Peer: peer,
		Header: map[string]string{StatusHeader: "401"}}, "")
	defer cancel()
	if contentType == "-" {
		req.Header.Del("Content-Type")
	} else {
		req.Header.Set("Content-Type", contentType)
	}
	before := app.calls.Load()
	resp := serve(req)
	resp.Body.Close()
	return resp.StatusCode, app.calls.Load() > before
}

// contentTypeGuesses guesses one account's password 120 times from 40
// addresses, the JSON body labelled every way of loginContentTypes and the
// email spelled three ways: at most 5 guesses reach the handler, and the
// others are refused. 15 minutes later the account may be tried again.
func contentTypeGuesses(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response) {
	spellings := []string{"ana@example.com", "Ana@Example.COM", " ANA@example.com"}
	checked := 0
	statuses := map[int]int{}
	for i := range 120 {
		ct := loginContentTypes[i%len(loginContentTypes)]
		body := fmt.Sprintf(`{"email":%q,"password":"guess-%d"}`, spellings[i%len(spellings)], i)
		status, ran := sendLogin(app, serve, fmt.Sprintf("198.51.100.%d:1000", i%40+1), ct, body)
		statuses[status]++
		if ran {
			checked++
		}
		if !ran && status != http.StatusTooManyRequests && status != http.StatusBadRequest {
			t.Errorf("guess %d (Content-Type %q): status %d without the handler, want 429 or 400", i+1, ct, status)
		}
	}
	t.Logf("120 guesses: %d checked, statuses %v", checked, statuses)
	if checked > 5 {
		t.Errorf("120 guesses at one account over 40 addresses and %d Content-Types: %d checked, want at most 5 (statuses %v)",
			len(loginContentTypes), checked, statuses)
	}
	if checked == 0 {
		t.Errorf("no guess reached the handler (statuses %v)", statuses)
	}
	env.Clock.Advance(15 * time.Minute)
	if _, ran := sendLogin(app, serve, "198.51.100.1:1000", "text/plain", `{"email":"ana@example.com","password":"x"}`); !ran {
		t.Errorf("15 minutes later, the account cannot be tried again")
	}
}

// unreadableLogins sends logins whose account the limiter cannot read (no
// email field, a field the handler reads under another name, an XML body)
// from 20 addresses: every one is refused with 400 and reported, none
// reaches the handler keyed by its address.
func unreadableLogins(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response) {
	bodies := []struct{ ct, body string }{
		{"application/json", `{"login":"ana@example.com","password":"x"}`},
		{"application/xml", `<login><email>ana@example.com</email></login>`},
		{"text/plain", "ana@example.com x"},
		{"-", ""},
	}
	errs, _ := env.counts()
	for i := range 20 {
		b := bodies[i%len(bodies)]
		status, ran := sendLogin(app, serve, fmt.Sprintf("203.0.113.%d:1000", i+1), b.ct, b.body)
		if ran || status != http.StatusBadRequest {
			t.Errorf("login %d (%s %q): status %d, handler ran %v; want 400, not run", i+1, b.ct, b.body, status, ran)
		}
	}
	if got, _ := env.counts(); got-errs != 20 {
		t.Errorf("error hook told %d of 20 refusals", got-errs)
	}
}

// credentialSpellings sends the 512 spellings of one Basic credential
// that net/http's Request.BasicAuth reads alike, then the 64 of one Bearer
// token, each from another address, to a limit of 2 per credential: 2 of
// each are served. Another credential still has its own limit.
func credentialSpellings(t *testing.T, env *Env, app *App, serve func(*http.Request) *http.Response) {
	send := func(i int, authorization string) int {
		req, cancel := build(app, Req{Peer: fmt.Sprintf("198.18.%d.%d:1000", i/250, i%250+1),
			Header: map[string]string{"Authorization": authorization}}, "")
		defer cancel()
		resp := serve(req)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name      string
		spellings []string
	}{
		{"Basic", basicSpellings("Aladdin", "open sesame")},
		{"Bearer", bearerSpellings("mF_9.B5f-4.1JqM")},
	} {
		served := 0
		for i, v := range tc.spellings {
			switch s := send(i, v); s {
			case http.StatusOK:
				served++
			case http.StatusTooManyRequests:
			default:
				t.Errorf("%s spelling %q: status %d, want 200 or 429", tc.name, v, s)
			}
		}
		t.Logf("%d spellings of one %s credential: %d served", len(tc.spellings), tc.name, served)
		if served != 2 {
			t.Errorf("%d spellings of one %s credential: %d served, want 2 (the limit)", len(tc.spellings), tc.name, served)
		}
	}
	other := "Basic " + base64.StdEncoding.EncodeToString([]byte("Aladdin:open sesamE"))
	if s := send(0, other); s != http.StatusOK {
		t.Errorf("another credential: status %d, want 200", s)
	}
}

// caseSpellings returns every spelling of s in upper and lower case.
func caseSpellings(s string) []string {
	out := []string{""}
	for i := range len(s) {
		lo, up := strings.ToLower(s[i:i+1]), strings.ToUpper(s[i:i+1])
		var next []string
		for _, p := range out {
			next = append(next, p+lo)
			if up != lo {
				next = append(next, p+up)
			}
		}
		out = next
	}
	return out
}

// basicSpellings returns the spellings of the Basic credential user:pass
// that net/http reads alike: the scheme in every case, and every value of
// the unused low bits of the base64 character before the padding (512 for
// "Aladdin:open sesame").
func basicSpellings(user, pass string) []string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	enc := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	pad := len(enc) - len(strings.TrimRight(enc, "="))
	unused := 2 * pad // bits
	last := len(enc) - pad - 1
	v := strings.IndexByte(alphabet, enc[last])
	var out []string
	for _, scheme := range caseSpellings("Basic") {
		for low := range 1 << unused {
			b := []byte(enc)
			b[last] = alphabet[v&^(1<<unused-1)|low]
			out = append(out, scheme+" "+string(b))
		}
	}
	return out
}

// bearerSpellings returns the 64 spellings of a Bearer token's scheme.
func bearerSpellings(token string) []string {
	var out []string
	for _, scheme := range caseSpellings("Bearer") {
		out = append(out, scheme+" "+token)
	}
	return out
}
