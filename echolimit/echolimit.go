// Package echolimit is ratekit's rate-limiting middleware for echo
// (github.com/labstack/echo/v4): one line in front of an API or a route,
//
//	e.Use(echolimit.New(limiter))
//
// It is glue around [httplimit.Engine]: the options, headers and responses
// are [httplimit]'s, the same in every framework. Beside them, [WithKey],
// [WithCost] and [WithSkipper] take functions of echo's own context, so that
// a value earlier middleware set with c.Set is a key. They keep ratekit's
// words for what is limited (key, cost) rather than the names of echo's
// RateLimiterConfig (IdentifierExtractor), so that a configuration reads
// the same in every framework, and take echo's own function types, so an
// extractor or a [github.com/labstack/echo/v4/middleware.Skipper] an app
// already has plugs in; the skipper keeps echo's name, the one every echo
// middleware config uses.
//
// A refused request is an error, as with echo's own limiter: the
// middleware returns an [*echo.HTTPError] and echo's HTTPErrorHandler
// answers it. [ErrorHandler] writes the refusal as httplimit does in every
// other framework, for an app whose own error handler would lose its
// problem body.
package echolimit

import (
	"errors"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/labstack/echo/v4"

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
// [httplimit.ContentTypeProblem]) and returns an [*echo.HTTPError] with its
// status, as echo's own RateLimiter does. Its Message marshals to JSON as
// the refusal's problem body, so echo's default HTTPErrorHandler answers
// exactly what httplimit writes in other frameworks (its JSON encoder adds
// a newline, and indents it in debug mode); fmt prints it as the problem's
// title and detail. A custom error handler that answers in another format
// sets its own Content-Type; one that would lose the problem body can be
// wrapped with [ErrorHandler]. A denial answered by an [httplimit.WithDenied]
// function is the app's own response, not a problem: it is written as it
// is, and the middleware returns nil.
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
	var built handlerCache
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if h := built.get(next); h != nil {
			return h
		}
		h := func(c echo.Context) error {
			resp := c.Response()
			// Pooled writers are zero (put back only once reset), so
			// setting the writer is all its Reset would do. A handler
			// that panics leaves l as resp.Writer, and l is not reused:
			// echo's Recover, around this, writes through it.
			l := limitedPool.Get().(*httpview.Writer[httplimit.Result])
			l.ResponseWriter = resp.Writer
			l.View.Reset(c.Request(), c.Path(), nil)
			l.View.Native = c
			checkInto(e, &l.Value, &l.View)
			l.Value.After(httpview.Outer[httplimit.Result](resp.Writer))
			l.Value.WriteHeaders(resp.Header())
			var err error
			if !l.Value.Serve() {
				err = refuse(c, &l.Value)
			} else {
				// The handlers write through l, where a limit further
				// down finds this one's Result.
				resp.Writer = l
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
						c.Error(err)
						err = nil
					}
					l.Value.Done(resp.Status)
				} else if settling {
					l.Value.Done(resp.Status)
				}
				resp.Writer = l.ResponseWriter
			}
			l.Value.Release()
			l.Reset(nil)
			limitedPool.Put(l)
			return err
		}
		built.put(next, h)
		return h
	}
}

// handlerCache holds the handlers New's middleware built, by the handler
// each wraps. echo applies the middleware of Echo.Use to the route's
// handler on every request, and a handler built anew each time would be
// an allocation per request; the same next gets the same handler, which
// holds no state of its own.
//
// A handler is known by its func value's pointer, to the closure (or the
// static function) it calls. An entry holds next itself, so that closure
// stays alive and its address cannot be reused by another. Slots are
// filled once and never replaced: a next built anew on every request (by a
// middleware after this one in Echo.Use's list) fills at most
// len(slots) of them and is never found again, costing a lookup.
type handlerCache struct {
	slots [64]atomic.Pointer[builtHandler]
}

type builtHandler struct {
	next echo.HandlerFunc
	h    echo.HandlerFunc
}

// funcPointer returns the pointer that identifies f.
func funcPointer(f echo.HandlerFunc) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&f)) }

func (c *handlerCache) slot(p unsafe.Pointer) *atomic.Pointer[builtHandler] {
	u := uintptr(p)
	return &c.slots[(u>>4^u>>10)%uintptr(len(c.slots))]
}

// get returns the handler built over next, or nil.
func (c *handlerCache) get(next echo.HandlerFunc) echo.HandlerFunc {
	p := funcPointer(next)
	if b := c.slot(p).Load(); b != nil && funcPointer(b.next) == p {
		return b.h
	}
	return nil
}

// put records h as the handler built over next, if its slot is free.
func (c *handlerCache) put(next, h echo.HandlerFunc) {
	c.slot(funcPointer(next)).CompareAndSwap(nil, &builtHandler{next: next, h: h})
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
// DefaultHTTPErrorHandler:
//
//	e.HTTPErrorHandler = echolimit.ErrorHandler(e.HTTPErrorHandler)
//
// It is for an app whose error handler answers every error in a format of
// its own, which would lose the problem body.
func ErrorHandler(next echo.HTTPErrorHandler) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		var he *echo.HTTPError
		if errors.As(err, &he) {
			if r, ok := he.Message.(*refusal); ok {
				if resp := c.Response(); !resp.Committed {
					resp.WriteHeader(he.Code)
					resp.Write(r.body)
				}
				return
			}
		}
		if next == nil {
			c.Echo().DefaultHTTPErrorHandler(err, c)
			return
		}
		next(err, c)
	}
}

// refusal is the Message of the error a refused request returns.
type refusal struct {
	body []byte
	text string
}

// refuse answers a refused request whose headers are set: the error for
// echo's error handler, or nil after writing a WithDenied function's
// response, which alone has a problem without a title.
func refuse(c echo.Context, res *httplimit.Result) error {
	resp, p := res.Response(), res.Problem()
	if p.Title == "" {
		c.Response().WriteHeader(resp.Status)
		c.Response().Write(resp.Body)
		return nil
	}
	msg := &refusal{body: resp.Body, text: p.Title + ": " + p.Detail}
	return &echo.HTTPError{Code: resp.Status, Message: msg}
}

// MarshalJSON returns the problem body.
func (r *refusal) MarshalJSON() ([]byte, error) { return r.body, nil }

// String returns the problem's title and detail, for logs.
func (r *refusal) String() string { return r.text }
