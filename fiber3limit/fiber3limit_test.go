package fiber3limit_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiber3limit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/keyfunc"
)

func newApp(app *adaptertest.App) *fiber.App {
	f := fiber.New()
	// The test request's peer and context, which app.Test cannot carry.
	f.Use(func(c fiber.Ctx) error {
		h := &c.Request().Header
		if peer := string(h.Peek(adaptertest.PeerHeader)); peer != "" {
			if addr, err := net.ResolveTCPAddr("tcp", peer); err == nil {
				c.RequestCtx().SetRemoteAddr(addr)
			}
		}
		if ctx := app.Context(string(h.Peek(adaptertest.ContextHeader))); ctx != nil {
			c.SetContext(ctx)
		}
		h.Del(adaptertest.PeerHeader)
		h.Del(adaptertest.ContextHeader)
		return c.Next()
	})
	// The app's CORS middleware, outside every limit.
	f.Use(func(c fiber.Ctx) error {
		headers, preflight := app.CORS(c.Method(), c.Get("Origin"), c.Get("Access-Control-Request-Method"))
		for _, kv := range headers {
			c.Set(kv[0], kv[1])
		}
		if preflight {
			return c.SendStatus(fiber.StatusNoContent)
		}
		return c.Next()
	})
	if app.Use != nil {
		f.Use(fiber3limit.New(app.Use.Limiter, app.Use.Options...))
	}
	handle := func(c fiber.Ctx) error {
		// The body as sent: c.Body() would decode it.
		status, out := app.Handle(c.Get(adaptertest.StatusHeader), c.Request().Body())
		c.Set("Content-Type", "text/plain")
		return c.Status(status).Send(out)
	}
	for _, rt := range app.Routes {
		// fiber v3 takes the first handler apart from the rest.
		var first any = handle
		var rest []any
		if rt.Limit != nil {
			first, rest = fiber3limit.New(rt.Limit.Limiter, rt.Limit.Options...), []any{handle}
		}
		switch rt.Method {
		case adaptertest.AnyMethod:
			f.All(adaptertest.ColonPattern(rt.Pattern), first, rest...)
		case fiber.MethodGet:
			// Get serves HEAD too, as apps register GET routes.
			f.Get(adaptertest.ColonPattern(rt.Pattern), first, rest...)
		default:
			f.Add([]string{rt.Method}, adaptertest.ColonPattern(rt.Pattern), first, rest...)
		}
	}
	return f
}

var driver = adaptertest.Driver{
	Name: "fiber",
	Serve: func(t *testing.T, app *adaptertest.App) func(*http.Request) *http.Response {
		f := newApp(app)
		return func(r *http.Request) *http.Response {
			resp, err := f.Test(r, fiber.TestConfig{Timeout: 0})
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
	},
	Listen: func(t *testing.T, app *adaptertest.App) string {
		f := newApp(app)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- f.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
		t.Cleanup(func() {
			if err := f.Shutdown(); err != nil {
				t.Error(err)
			}
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		return "http://" + ln.Addr().String()
	},
}

func TestBehaviour(t *testing.T) { adaptertest.Run(t, driver) }

func TestEndToEnd(t *testing.T) { adaptertest.RunEndToEnd(t, driver) }

// TestStreamedBody runs the body cases with StreamRequestBody, where
// fasthttp hands the body over as a stream: a body of a declared length
// up to the bound is keyed and put back for the handler, as sent; one
// declared over the bound, or of unknown length, is refused unread, and
// served whole under a key policy that serves it.
func TestStreamedBody(t *testing.T) {
	serve := func(t *testing.T, opts ...httplimit.Option) (url string, calls *atomic.Int64) {
		f := fiber.New(fiber.Config{StreamRequestBody: true})
		l, err := core.New(core.Policy{Limit: 1, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		calls = new(atomic.Int64)
		opts = append([]httplimit.Option{httplimit.WithKey(keyfunc.Email("email"))}, opts...)
		f.Post("/login", fiber3limit.New(l, opts...), func(c fiber.Ctx) error {
			calls.Add(1)
			return c.Send(append([]byte("ok:"), c.Request().Body()...))
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go f.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
		t.Cleanup(func() { f.Shutdown() })
		return "http://" + ln.Addr().String() + "/login", calls
	}
	// send sends body and returns the response's status and body, and
	// whether the server closes the connection.
	send := func(t *testing.T, url string, body []byte, chunked bool) (int, []byte, bool, error) {
		t.Helper()
		var r io.Reader = bytes.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // unknown length: the client sends it in chunks
		}
		req, err := http.NewRequest("POST", url, r)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, false, err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, got, resp.Close, nil
	}
	post := func(t *testing.T, url string, body []byte, chunked bool) (int, []byte, bool) {
		t.Helper()
		status, got, closed, err := send(t, url, body, chunked)
		if err != nil {
			t.Fatal(err)
		}
		return status, got, closed
	}
	// refusedPost is post for a body the server refuses unread: it closes
	// the connection while the client may still be sending, and the
	// client's kernel then drops the answer with the reset. Such an
	// attempt is sent again, up to 10 times.
	refusedPost := func(t *testing.T, url string, body []byte, chunked bool) (int, []byte, bool) {
		t.Helper()
		for range 10 {
			status, got, closed, err := send(t, url, body, chunked)
			if err == nil {
				return status, got, closed
			}
			if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
				t.Fatal(err)
			}
		}
		t.Fatal("10 attempts in a row were reset before their answer")
		return 0, nil, false
	}
	checkEcho := func(t *testing.T, got, sent []byte) {
		t.Helper()
		if !bytes.Equal(got, append([]byte("ok:"), sent...)) {
			t.Errorf("the handler read %d bytes, want the %d sent", len(got)-3, len(sent))
		}
	}
	at := adaptertest.JSONBody("at@example.com", adaptertest.BodyBound)
	over := adaptertest.OversizedBody("over@example.com")
	small := adaptertest.JSONBody("small@example.com", 0)

	t.Run("keyed", func(t *testing.T) {
		url, _ := serve(t)
		status, got, _ := post(t, url, at, false)
		if status != 200 {
			t.Fatalf("body at the bound: status %d, want 200", status)
		}
		checkEcho(t, got, at)
		if status, _, closed := post(t, url, adaptertest.JSONBody("at@example.com", 0), false); status != 429 || !closed {
			t.Errorf("same email again: status %d, connection closed %v; want 429, closed", status, closed)
		}
	})
	t.Run("refused", func(t *testing.T) {
		url, calls := serve(t)
		for _, r := range []struct {
			name    string
			body    []byte
			chunked bool
		}{{"over the bound", over, false}, {"over the bound, chunked", over, true}, {"chunked", small, true}} {
			// The body is left unread: the connection must not carry
			// its rest as the next request.
			if status, _, closed := refusedPost(t, url, r.body, r.chunked); status != 400 || !closed {
				t.Errorf("%s: status %d, connection closed %v; want 400, closed", r.name, status, closed)
			}
		}
		if n := calls.Load(); n != 0 {
			t.Errorf("handler called %d times, want 0", n)
		}
	})
	t.Run("served unkeyed", func(t *testing.T) {
		url, _ := serve(t, httplimit.WithInvalidKey(httplimit.SkipKey()))
		for _, r := range []struct {
			name    string
			body    []byte
			chunked bool
		}{{"over the bound", over, false}, {"over the bound, chunked", over, true}, {"chunked", small, true}} {
			status, got, _ := post(t, url, r.body, r.chunked)
			if status != 200 {
				t.Errorf("%s: status %d, want 200", r.name, status)
				continue
			}
			checkEcho(t, got, r.body)
		}
	})
}

// With httplimit.WithSettle, a handler reports its cost through
// c.Context(), and the request is settled at it after the handler.
func TestSettle(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := core.New(core.Policy{Limit: 10, Window: 10 * time.Second}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	f := fiber.New()
	f.Use(fiber3limit.New(lim, httplimit.WithSettle(), httplimit.WithClock(clock),
		httplimit.WithKey(func(keyfunc.Request) (string, error) { return "k", nil }),
		httplimit.WithCost(func(keyfunc.Request) (int64, error) { return 2, nil })))
	found := false
	f.Get("/ai", func(c fiber.Ctx) error {
		found = httplimit.SetCost(c.Context(), 6)
		return c.SendString("ok")
	})
	resp, err := f.Test(httptest.NewRequest("GET", "/ai", nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !found || resp.Header.Get("RateLimit") != `"default";r=8;t=2` {
		t.Fatalf("%d %q, SetCost found a settling limit: %v", resp.StatusCode, resp.Header.Get("RateLimit"), found)
	}
	if d, _ := lim.Peek(t.Context(), "k", 1); d.Remaining != 4 {
		t.Fatalf("%d left after a request that cost 6, want 4", d.Remaining)
	}
}
