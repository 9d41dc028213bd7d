// Package echo5limit is ratekit's rate-limiting middleware for echo v5
// (github.com/labstack/echo/v5): one line in front of an API or a route,
//
//	e.Use(echo5limit.New(limiter))
//
// It is glue around [httplimit.Engine]: the options, headers and responses
// are [httplimit]'s, the same in every framework, and the same as
// echolimit's for echo v4. Beside them, [WithKey], [WithCost] and
// [WithSkipper] take functions of echo's own context, so that a value
// earlier middleware set with c.Set is a key. They keep ratekit's words for
// what is limited (key, cost) rather than the names of echo's
// RateLimiterConfig (IdentifierExtractor), so that a configuration reads
// the same in every framework, and take echo's own function types, so an
// extractor or a [github.com/labstack/echo/v5/middleware.Skipper] an app
// already has plugs in; the skipper keeps echo's name, the one every echo
// middleware config uses.
//
// A refused request is an error, as with echo's own limiter: the
// middleware returns it and echo's HTTPErrorHandler answers it.
// [ErrorHandler] writes the refusal as httplimit does in every other
// framework, for an app whose own error handler would lose its problem
// body.
package echo5limit

import (
	"errors"
	"net/http"
	"sync"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
)

// New returns echo middleware that limits requests with l, configured by the
// [httplimit.Option] values opts and this package's. Allowed requests get
// the rate headers and go on to the next handler. [httplimit.WithKey]
// functions see echo's route pattern (c.Path(), such as "/items/:id") as the
// route; this package's [WithKey], [WithCost] and [WithSkipper] see echo's
// context itself.
//
// A refused request (429 for a denial, 400 for a request without a valid
// key or cost, 503 when the limiter cannot decide) is not passed on: the
// middleware sets the refusal's headers on the response (the rate headers,
// Retry-After, Cache-Control and its Content-Type,
// [httplimit.ContentTypeProblem]) and returns an error with its status, as
// echo's own RateLimiter does. The error is an [echo.HTTPStatusCoder], a
// [json.Marshaler] giving the refusal's problem body and an
// [echo.ProblemErrorer], so echo's DefaultHTTPErrorHandler answers exactly
// what httplimit writes in other frameworks (its JSON encoder adds a
// newline), and its ProblemDetailsHTTPErrorHandler the same problem without
// its "policy" member. A custom error handler that answers in another
// format sets its own Content-Type; one that would lose the problem body
// can be wrapped with [ErrorHandler]. A denial answered by an
// [httplimit.WithDenied] function is the app's own response, not a problem:
// it is written as it is, and the middleware returns nil.
//
// With [httplimit.WithCountIf], an error returned by the handler is passed to
// echo's HTTPErrorHandler here, so that the status it answers with is the
// one counted; the middleware then returns nil, as echo's request logger does.
//
// Limits stacked on one request (the app's, a group's, a route's) decide
// together: one that refuses the request gives back what the limits around
// it counted ([httplimit.Result.After]).
//
// New panics if l is nil or an option is invalid (see [httplimit.New]): a
// configuration mistake, found when the server starts.
func New(l core.Limiter, opts ...httplimit.Option) echo.MiddlewareFunc {
	e := httplimit.MustNew(l, opts...)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			w := c.Response()
			// Pooled writers are zero (put back only once reset), so
			// setting the writer is all its Reset would do. A handler
			// that panics leaves l as the context's response, and l is
			// not reused: echo's Recover, around this, writes through it.
			l := limitedPool.Get().(*httpview.Writer[httplimit.Result])
			l.ResponseWriter = w
			l.View.Reset(c.Request(), c.Path(), nil)
			l.View.Native = c
			checkInto(e, &l.Value, &l.View)
			l.Value.After(httpview.Outer[httplimit.Result](w))
			l.Value.WriteHeaders(w.Header())
			var err error
			if !l.Value.Serve() {
				err = refuse(c, &l.Value)
			} else {
				// The handlers write through l, which unwraps to echo's
				// Response, and where a limit further down finds this
				// one's Result.
				c.SetResponse(l)
				settling := l.Value.Settling()
				if settling {
					// The handlers report their cost through the
					// request's context (httplimit.SetCost).
					c.SetRequest(c.Request().WithContext(l.Value.Context(c.Request().Context())))
				}
				ended := false
				defer func() {
					if !ended {
						l.Value.Release() // the handler panicked: its in-flight lease goes back
					}
				}()
				err = next(c)
				ended = true
				if l.Value.Counting() {
					if err != nil {
						c.Echo().HTTPErrorHandler(c, err)
						err = nil
					}
					_, status := echo.ResolveResponseStatus(w, nil)
					l.Value.Done(status)
				} else if settling {
					l.Value.Done(0) // the status is not needed to settle
				}
				c.SetResponse(w)
			}
			l.Value.Release()
			l.Reset(nil)
			limitedPool.Put(l)
			return err
		}
	}
}

// limitedPool holds the writers that carry one request's Result through
// one limit, for the limits further down.

// checkInto is [httplimit.Engine.Check] deciding into the pooled Result
// (internal/httpview.CheckInto), which costs no copy of it.
var checkInto = httpview.CheckInto.(func(*httplimit.Engine, *httplimit.Result, keyfunc.Request))

var limitedPool = sync.Pool{New: func() any { return new(httpview.Writer[httplimit.Result]) }}

// ErrorHandler returns an echo HTTPErrorHandler that writes a refusal of
// this package's middleware as httplimit writes it in every framework, its
// status and problem body as they are (the headers are already on the
// response), and passes every other error to next, nil meaning echo's
// DefaultHTTPErrorHandler(false):
//
//	e.HTTPErrorHandler = echo5limit.ErrorHandler(e.HTTPErrorHandler)
//
// It is for an app whose error handler answers every error in a format of
// its own, which would lose the problem body.
func ErrorHandler(next echo.HTTPErrorHandler) echo.HTTPErrorHandler {
	if next == nil {
		next = echo.DefaultHTTPErrorHandler(false)
	}
	return func(c *echo.Context, err error) {
		var r *refusal
		if !errors.As(err, &r) {
			next(c, err)
			return
		}
		if resp, _ := echo.UnwrapResponse(c.Response()); resp != nil && resp.Committed {
			return
		}
		c.Response().WriteHeader(r.problem.Status)
		c.Response().Write(r.body)
	}
}

// refusal is the error a refused request returns.
type refusal struct {
	problem httplimit.Problem
	body    []byte
}

// refuse answers a refused request whose headers are set: the error for
// echo's error handler, or nil after writing a WithDenied function's
// response, which alone has a problem without a title.
func refuse(c *echo.Context, res *httplimit.Result) error {
	resp, p := res.Response(), res.Problem()
	if p.Title == "" {
		c.Response().WriteHeader(resp.Status)
		c.Response().Write(resp.Body)
		return nil
	}
	p.Status = resp.Status
	return &refusal{problem: p, body: resp.Body}
}

// Error returns the status, the problem's title and its detail.
func (r *refusal) Error() string {
	return "echo5limit: " + http.StatusText(r.problem.Status) + ": " + r.problem.Title + ": " + r.problem.Detail
}

// StatusCode returns the refusal's status: it is an [echo.HTTPStatusCoder].
func (r *refusal) StatusCode() int { return r.problem.Status }

// MarshalJSON returns the problem body.
func (r *refusal) MarshalJSON() ([]byte, error) { return r.body, nil }

// ProblemError returns the problem, for echo's
// ProblemDetailsHTTPErrorHandler: it is an [echo.ProblemErrorer].
func (r *refusal) ProblemError() *echo.ProblemError {
	return &echo.ProblemError{Type: r.problem.Type, Title: r.problem.Title, Status: r.problem.Status, Detail: r.problem.Detail}
}
