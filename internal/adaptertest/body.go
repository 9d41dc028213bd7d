package adaptertest

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/bodytest"
	"github.com/ratekit/ratekit/keyfunc"
)

// BodyBound is the bound on a body read for a key that the body cases
// assume: the default, [keyfunc.DefaultMaxBodyBytes].
const BodyBound = keyfunc.DefaultMaxBodyBytes

// MaxBombAlloc is the most a request carrying a [GzipBomb] may allocate,
// middleware, framework and test transport together, in the body cases,
// besides 16 bytes per byte sent for the copies the test transport and the
// framework make of the body as sent (under the race detector, sync.Pool
// drops buffers at random, so the framework allocates more of them).
const MaxBombAlloc = 8 << 20

// JSONBody returns the JSON object {"email":email,"pad":"aaa…"} padded to
// exactly n bytes, or shorter when n is too small for the email alone.
func JSONBody(email string, n int) []byte {
	head := `{"email":"` + email + `","pad":"`
	tail := `"}`
	pad := max(n-len(head)-len(tail), 0)
	b := make([]byte, 0, len(head)+pad+len(tail))
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte{'a'}, pad)...)
	return append(b, tail...)
}

// OversizedBody returns a JSON body carrying email that is one byte over
// [BodyBound].
func OversizedBody(email string) []byte { return JSONBody(email, BodyBound+1) }

// BodyReq is a POST /login request of the body cases.
type BodyReq struct {
	Body        []byte
	ContentType string // default application/json
	Encoding    string // Content-Encoding, none when ""
	// Chunked sends the body without a Content-Length, in chunks.
	Chunked bool
}

// BodyRequest builds r for app, with the peer and context headers of the
// behaviour table, ready for a [Driver]'s Serve.
func BodyRequest(app *App, r BodyReq) *http.Request {
	req, cancel := build(app, Req{Method: "POST", Path: "/login"}, "")
	cancel() // a body case never waits on its context
	ct := r.ContentType
	if ct == "" {
		ct = "application/json"
	}
	req.Header.Set("Content-Type", ct)
	if r.Encoding != "" {
		req.Header.Set("Content-Encoding", r.Encoding)
	}
	req.Body = io.NopCloser(bytes.NewReader(r.Body))
	req.ContentLength = int64(len(r.Body))
	if r.Chunked {
		// A reader of unknown length, as a client streaming the body.
		req.Body = io.NopCloser(struct{ io.Reader }{bytes.NewReader(r.Body)})
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
	}
	return req
}

// ServeMeasured serves req with serve and returns the response, its body,
// and the bytes allocated by the whole process meanwhile
// (runtime.MemStats.TotalAlloc). Run it with no other test in parallel.
func ServeMeasured(serve func(*http.Request) *http.Response, req *http.Request) (resp *http.Response, body []byte, alloc uint64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp = serve(req)
	runtime.ReadMemStats(&after)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, after.TotalAlloc - before.TotalAlloc
}

// bodyStep is one request of a body case and what it must get.
type bodyStep struct {
	req  BodyReq
	want Want
	// echo says the handler must have read exactly req.Body, as sent.
	echo bool
	// maxAlloc, when set, bounds the bytes allocated while serving, with
	// 16 bytes more per byte sent.
	maxAlloc uint64
}

type bodyCase struct {
	name string
	// opts are the middleware's options besides WithKey(Email("email"))
	// and the hooks.
	opts  []httplimit.Option
	steps []bodyStep
}

func bodyCases(t *testing.T) []bodyCase {
	email := func(e string) []byte { return JSONBody(e, 0) }
	refused := Want{Status: http.StatusBadRequest, Problem: httplimit.ProblemInvalidKey}
	served := Want{Status: http.StatusOK, Called: true}
	bomb := func(layers int) BodyReq {
		return BodyReq{Body: bodytest.GzipBomb(t, layers), Encoding: bodytest.GzipEncoding(layers)}
	}
	// A key policy that serves what cannot be keyed by its body: the
	// handler must still read the body as sent.
	lenient := []httplimit.Option{httplimit.WithInvalidKey(httplimit.FallbackKey(keyfunc.PeerIP))}
	over := OversizedBody(bodytest.BombEmail)
	at := JSONBody(bodytest.BombEmail, BodyBound)
	gz := bodytest.Encode(t, email("gz@example.com"), "gzip")
	return []bodyCase{
		{name: "gzip bomb, two layers", steps: []bodyStep{
			{req: bomb(2), want: refused, maxAlloc: MaxBombAlloc},
		}},
		{name: "gzip bomb, one layer", steps: []bodyStep{
			{req: bomb(1), want: refused, maxAlloc: MaxBombAlloc},
		}},
		{name: "gzip bomb, three layers", steps: []bodyStep{
			{req: bomb(3), want: refused, maxAlloc: MaxBombAlloc},
		}},
		{name: "gzip bomb, served by the fallback key", opts: lenient, steps: []bodyStep{
			{req: bomb(2), want: served, echo: true, maxAlloc: MaxBombAlloc},
		}},
		{name: "oversized body", steps: []bodyStep{
			{req: BodyReq{Body: over}, want: refused},
		}},
		{name: "oversized chunked body", steps: []bodyStep{
			{req: BodyReq{Body: over, Chunked: true}, want: refused},
		}},
		{name: "oversized body, served by the fallback key", opts: lenient, steps: []bodyStep{
			{req: BodyReq{Body: over}, want: served, echo: true},
		}},
		{name: "oversized chunked body, served by the fallback key", opts: lenient, steps: []bodyStep{
			{req: BodyReq{Body: over, Chunked: true}, want: served, echo: true},
		}},
		{name: "body at the bound", steps: []bodyStep{
			{req: BodyReq{Body: at}, want: served, echo: true},
			// Keyed by its email: the same account is now limited.
			{req: BodyReq{Body: email(bodytest.BombEmail)}, want: Want{Status: http.StatusTooManyRequests, Problem: httplimit.ProblemRateLimited}},
		}},
		{name: "chunked body under the bound", steps: []bodyStep{
			{req: BodyReq{Body: at, Chunked: true}, want: served, echo: true},
			{req: BodyReq{Body: email(bodytest.BombEmail)}, want: Want{Status: http.StatusTooManyRequests, Problem: httplimit.ProblemRateLimited}},
		}},
		{name: "gzip body keyed by its decoded email", steps: []bodyStep{
			{req: BodyReq{Body: gz, Encoding: "gzip"}, want: served, echo: true},
			{req: BodyReq{Body: email("gz@example.com")}, want: Want{Status: http.StatusTooManyRequests, Problem: httplimit.ProblemRateLimited}},
		}},
		{name: "deflate then gzip keyed by its decoded email", steps: []bodyStep{
			{req: BodyReq{Body: bodytest.Encode(t, email("dg@example.com"), "deflate", "gzip"), Encoding: "deflate, gzip"}, want: served, echo: true},
			{req: BodyReq{Body: email("dg@example.com")}, want: Want{Status: http.StatusTooManyRequests, Problem: httplimit.ProblemRateLimited}},
		}},
		{name: "encoding not decoded for a key", steps: []bodyStep{
			{req: BodyReq{Body: gz, Encoding: "br"}, want: refused},
			{req: BodyReq{Body: gz, Encoding: "gzip, zstd"}, want: refused},
		}},
		{name: "corrupt gzip body", steps: []bodyStep{
			{req: BodyReq{Body: gz[:len(gz)-5], Encoding: "gzip"}, want: refused},
		}},
		// Any body may be JSON that a handler decodes whatever its type:
		// it is read, bounded, and keyed the same.
		{name: "JSON sent as text/plain keyed by its email", steps: []bodyStep{
			{req: BodyReq{Body: email("tp@example.com"), ContentType: "text/plain;charset=UTF-8"}, want: served, echo: true},
			{req: BodyReq{Body: email("tp@example.com")}, want: Want{Status: http.StatusTooManyRequests, Problem: httplimit.ProblemRateLimited}},
		}},
		{name: "gzip JSON sent as octet-stream keyed by its decoded email", steps: []bodyStep{
			{req: BodyReq{Body: gz, Encoding: "gzip", ContentType: "application/octet-stream"}, want: served, echo: true},
			{req: BodyReq{Body: email("gz@example.com")}, want: Want{Status: http.StatusTooManyRequests, Problem: httplimit.ProblemRateLimited}},
		}},
		{name: "gzip bomb sent as text/plain", steps: []bodyStep{
			{req: BodyReq{Body: bodytest.GzipBomb(t, 2), Encoding: bodytest.GzipEncoding(2), ContentType: "text/plain"}, want: refused, maxAlloc: MaxBombAlloc},
		}},
		{name: "oversized text/plain body", steps: []bodyStep{
			{req: BodyReq{Body: over, ContentType: "text/plain", Chunked: true}, want: refused},
		}},
	}
}

// RunBody runs the body abuse cases with d: bodies read to find a key
// (keyfunc.Email("email") on POST /login, 1 request per minute) are
// bounded by [BodyBound] in decoded bytes, whatever their Content-Type. A [GzipBomb] of one to three
// layers is refused with 400 while the request allocates at most
// [MaxBombAlloc]; an oversized body, with or without a Content-Length, is
// refused; a gzip or deflate body under the bound is keyed by its decoded
// field; other encodings and corrupt ones are refused. With a key policy
// that serves such requests anyway, the handler reads the body exactly as
// sent. The app's handler must pass [App.Handle] the raw body, as sent.
//
// The cases measure the process's allocations: do not run them in
// parallel with other tests.
func RunBody(t *testing.T, d Driver) {
	for _, c := range bodyCases(t) {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{Clock: core.NewManualClock(Start)}
			l := env.Limiter(t, core.Policy{Name: "login", Limit: 1, Window: time.Minute})
			opts := append(env.Hooks(), httplimit.WithKey(keyfunc.Email("email")))
			app := &App{Use: &Limit{Limiter: l, Options: append(opts, c.opts...)}}
			app.Routes = DefaultRoutes()
			serve := d.Serve(t, app)
			for i, s := range c.steps {
				step := "step " + strconv.Itoa(i+1)
				req := BodyRequest(app, s.req)
				before := app.calls.Load()
				resp, body, alloc := ServeMeasured(serve, req)
				called := app.calls.Load() > before
				t.Logf("%s: %s allocated while serving", step, mib(alloc))
				if budget := s.maxAlloc + 16*uint64(len(s.req.Body)); s.maxAlloc > 0 && alloc > budget {
					t.Errorf("%s: %s allocated while serving, want at most %s", step, mib(alloc), mib(budget))
				}
				if s.echo && resp.StatusCode == http.StatusOK {
					want := append([]byte("ok:"), s.req.Body...)
					if !bytes.Equal(body, want) {
						t.Errorf("%s: the handler read %d bytes (sha256 %x), want the %d sent (sha256 %x)",
							step, len(body)-3, sha256.Sum256(body[min(3, len(body)):]), len(s.req.Body), sha256.Sum256(s.req.Body))
					}
				}
				if len(body) > 512 {
					body = body[:512] // check's messages quote it
				}
				check(t, step, env, resp, body, called, 0, s.want)
			}
		})
	}
}

// mib formats n bytes in MiB, for messages.
func mib(n uint64) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 2, 64) + " MiB"
}
