package fiber3limit_test

import (
	"errors"
	"testing"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiber3limit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// A denial and a refusal reach the app's own ErrorHandler as a
// *fiber.Error holding the status and the problem body, the rate headers
// and Retry-After already set.
func TestRefusalsReachErrorHandler(t *testing.T) {
	var seen []*fiber.Error
	app := newFiber(fiber.Config{ErrorHandler: func(c fiber.Ctx, err error) error {
		var fe *fiber.Error
		if !errors.As(err, &fe) {
			t.Errorf("ErrorHandler got %T %v, want a *fiber.Error", err, err)
			return err
		}
		seen = append(seen, fe)
		if ra := string(c.Response().Header.Peek("Retry-After")); fe.Code == 429 && ra != "60" {
			t.Errorf("in the ErrorHandler: Retry-After %q, want 60", ra)
		}
		if rl := string(c.Response().Header.Peek("RateLimit")); fe.Code == 429 && rl != `"api";r=0;t=60` {
			t.Errorf("in the ErrorHandler: RateLimit %q, want %q", rl, `"api";r=0;t=60`)
		}
		return c.Status(fe.Code).JSON(fiber.Map{"error": fe.Code})
	}})
	app.Use(fiber3limit.New(limiter(t, 1)))
	app.Get("/hello", hello)
	app.Get("/keyed", fiber3limit.New(limiter(t, 1), httplimit.WithKey(keyfunc.Header("X-Key", nil))), hello)
	send(t, app, "GET", "/hello")
	got := send(t, app, "GET", "/hello")
	if got.status != 429 || got.body != `{"error":429}` || got.header.Get("Retry-After") != "60" {
		t.Errorf("denied: %d %q Retry-After %q, want the ErrorHandler's 429 with Retry-After 60", got.status, got.body, got.header.Get("Retry-After"))
	}
	if len(seen) != 1 {
		t.Fatalf("ErrorHandler called %d times, want 1", len(seen))
	}
	want := httplimit.DeniedResponse(deniedDecision(t))
	if seen[0].Message != string(want.Body) {
		t.Errorf("*fiber.Error message %q, want the problem body %q", seen[0].Message, want.Body)
	}
	app2 := newFiber(fiber.Config{ErrorHandler: func(c fiber.Ctx, err error) error {
		var fe *fiber.Error
		errors.As(err, &fe)
		seen = append(seen, fe)
		return fiber.DefaultErrorHandler(c, err)
	}})
	app2.Get("/keyed", fiber3limit.New(limiter(t, 1), httplimit.WithKey(keyfunc.Header("X-Key", nil))), hello)
	if got := send(t, app2, "GET", "/keyed"); got.status != 400 || len(seen) != 2 || seen[1] == nil || seen[1].Code != 400 {
		t.Errorf("no key: status %d, ErrorHandler saw %v; want 400 seen as a *fiber.Error", got.status, seen)
	}
}

// deniedDecision returns the decision of the second request in a minute
// on a limit of 1 named api, as the tests' limiter denies it.
func deniedDecision(t *testing.T) (d core.Decision) {
	t.Helper()
	l := limiter(t, 1)
	l.AllowN(t.Context(), "k", 1)
	d, err := l.AllowN(t.Context(), "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// With fiber's DefaultErrorHandler, which would send the problem body as
// text/plain, and with an ErrorHandler of the app's own wrapped in
// ErrorHandler, the refusal is sent as before: status, body and
// Content-Type of the Engine's response; every other error reaches the
// app's handler.
func TestErrorHandler(t *testing.T) {
	want := httplimit.DeniedResponse(deniedDecision(t))
	check := func(t *testing.T, app *fiber.App) {
		t.Helper()
		send(t, app, "GET", "/hello")
		got := send(t, app, "GET", "/hello")
		if got.status != 429 || got.body != string(want.Body) || got.header.Get("Content-Type") != httplimit.ContentTypeProblem {
			t.Errorf("denied: %d %s %q, want 429 %s %q", got.status, got.header.Get("Content-Type"), got.body, httplimit.ContentTypeProblem, want.Body)
		}
	}
	t.Run("DefaultErrorHandler", func(t *testing.T) {
		app := newFiber()
		app.Use(fiber3limit.New(limiter(t, 1)))
		app.Get("/hello", hello)
		check(t, app)
	})
	t.Run("ErrorHandler", func(t *testing.T) {
		calls := 0
		own := func(c fiber.Ctx, err error) error {
			calls++
			return c.Status(418).SendString("own: " + err.Error())
		}
		app := newFiber(fiber.Config{ErrorHandler: fiber3limit.ErrorHandler(own)})
		app.Use(fiber3limit.New(limiter(t, 1), fiber3limit.WithNext(func(c fiber.Ctx) bool { return c.Path() == "/fail" })))
		app.Get("/hello", hello)
		app.Get("/fail", func(c fiber.Ctx) error { return errors.New("boom") })
		check(t, app)
		if calls != 0 {
			t.Errorf("the app's handler called %d times for a refusal, want 0", calls)
		}
		if got := send(t, app, "GET", "/fail"); got.status != 418 || got.body != "own: boom" || calls != 1 {
			t.Errorf("another error: %d %q, the app's handler called %d times; want its 418", got.status, got.body, calls)
		}
	})
	t.Run("nil is the default", func(t *testing.T) {
		app := newFiber(fiber.Config{ErrorHandler: fiber3limit.ErrorHandler(nil)})
		app.Use(fiber3limit.New(limiter(t, 1)))
		app.Get("/hello", hello)
		check(t, app)
	})
}

// With WithCountIf, the status counted is the one the app's ErrorHandler
// makes of an error the handler returns.
func TestCountIfJudgesReturnedError(t *testing.T) {
	for _, tc := range []struct {
		path string
		want []int
	}{
		{"/ok", []int{200, 200, 200}},
		// The handler writes nothing before it returns the error: the
		// status so far is 200.
		{"/fail", []int{401, 401, 429}},
	} {
		app := newFiber()
		app.Use(fiber3limit.New(limiter(t, 2), httplimit.WithCountIf(httplimit.Failures)))
		app.Get("/ok", hello)
		app.Get("/fail", func(c fiber.Ctx) error { return fiber.ErrUnauthorized })
		checkStatuses(t, tc.path, statuses(t, app, "GET", tc.path, 3), tc.want...)
	}
}
