// Package fiber3limit is ratekit's rate-limiting middleware for fiber v3
// (github.com/gofiber/fiber/v3): one line in front of an API or a route,
//
//	app.Use(fiber3limit.New(limiter))
//
// It is glue around [httplimit.Engine]: the options, headers and responses
// are [httplimit]'s, the same in every framework. The options of this
// package are the same options over fiber's own context, named as fiber's
// limiter middleware names its fields: [WithKeyGenerator], [WithCost],
// [WithNext] and [WithLimitReached]. For fiber v2, see fiberlimit.
package fiber3limit

import (
	"context"
	"reflect"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/fastbody"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/internal/stacked"
	"github.com/ratekit/ratekit/keyfunc"
)

// New returns fiber middleware that limits requests with l, configured by the
// [httplimit.Option] values opts, this package's included. Allowed requests
// get the rate headers and go on to the next handler.
//
// A refused request (429, and every other refusal of [httplimit.Engine])
// gets the rate headers, Retry-After and Cache-Control set on the response,
// and is returned to the app's ErrorHandler as a [*fiber.Error] holding
// the status and, as its Message, the application/problem+json body, so
// that an ErrorHandler of the app's own answers it its way. fiber's
// [fiber.DefaultErrorHandler] would send that body as text/plain: with it
// (the app's Config().ErrorHandler) the middleware sends the refusal
// itself, with its problem+json Content-Type, and returns nil; wrap an
// ErrorHandler of the app's own in [ErrorHandler] to keep the problem body
// there too. [WithLimitReached] answers denials with a handler.
//
// The [keyfunc.Request] that key functions see reads fiber's request: its
// Context is c.Context(), and its Route is the path of the route the
// middleware was registered on (c.Route().Path). Registered with app.Use or
// a group's Use (c.Matched() is false: no route matched yet), the route a
// request will match is not known yet: Route is "", so a route key ([keyfunc.Route], [keyfunc.RouteMethod]) finds no key,
// which is reported to the [httplimit.WithErrorHook] hook and refused as
// [httplimit.WithNoKey] says (400 by default), never counted under the
// prefix of the Use. Register a route-keyed limit on the route, as in
// app.Post("/login", fiber3limit.New(l), login). fasthttp does not report
// a client that went away, so a leaky bucket's wait ends early only when
// c.Context() is canceled.
//
// With [httplimit.WithCountIf], an error returned by the handler is passed to
// the app's ErrorHandler here, so that the status it answers with is the one
// counted; the middleware then returns nil, as fiber's logger does.
//
// Limits stacked on one request (the app's, a group's, a route's) decide
// together: one that refuses the request gives back what the limits around
// it counted ([httplimit.Result.After]).
//
// New panics if l is nil or an option is invalid (see [httplimit.New]): a
// configuration mistake, found when the server starts.
func New(l core.Limiter, opts ...httplimit.Option) fiber.Handler {
	e := httplimit.MustNew(l, opts...)
	bounded := e.MaxBodyBytes() != keyfunc.DefaultMaxBodyBytes
	return func(c fiber.Ctx) error {
		req := view(c, bounded, e.MaxBodyBytes())
		// c.Locals, through the fiber.Ctx interface, would allocate its
		// variadic value: the same storage, asked directly.
		uv := c.RequestCtx()
		outer, _ := uv.UserValue(stacked.LocalsKey()).(*httplimit.Result)
		res := stacked.Get()
		defer stacked.Put(res)
		checkInto(e, res, req)
		res.After(outer)
		res.WriteHeaders(&c.Response().Header)
		if !res.Serve() {
			return refuse(c, res)
		}
		// A limit further down finds this one's Result in c.Locals.
		uv.SetUserValue(stacked.LocalsKey(), res)
		defer uv.SetUserValue(stacked.LocalsKey(), outer)
		if res.Settling() {
			// The handlers report their cost through c.Context()
			// (httplimit.SetCost).
			c.SetContext(res.Context(c.Context()))
			if !res.Counting() {
				err := c.Next()
				res.Done(0) // the status is not needed to settle
				return err
			}
		}
		if !res.Counting() {
			return c.Next()
		}
		if err := c.Next(); err != nil {
			if err := c.App().ErrorHandler(c, err); err != nil {
				c.Status(fiber.StatusInternalServerError)
			}
		}
		res.Done(c.Response().StatusCode())
		return nil
	}
}

// checkInto is [httplimit.Engine.Check] deciding into the pooled Result
// (internal/httpview.CheckInto), which costs no copy of it.
var checkInto = httpview.CheckInto.(func(*httplimit.Engine, *httplimit.Result, keyfunc.Request))

// refuse answers a refused request, its headers set: by the
// WithLimitReached handler for a denial when there is one, else directly
// when the app's ErrorHandler is fiber's default, or as a *fiber.Error
// (a refusal) returned to the app's ErrorHandler.
func refuse(c fiber.Ctx, res *httplimit.Result) error {
	if c.Request().IsBodyStream() {
		// fasthttp does not drain a streamed body the handler leaves
		// unread (StreamRequestBody): its rest would be parsed as the
		// next request on the connection.
		c.RequestCtx().SetConnectionClose()
	}
	resp := res.Response()
	if h := limitReached(c); h != nil {
		c.Status(resp.Status)
		return h(c)
	}
	if isDefaultErrorHandler(c.App().Config().ErrorHandler) {
		return c.Status(resp.Status).Send(resp.Body)
	}
	return newRefusal(resp.Status, resp.Body)
}

// defaultErrorHandler is the code of fiber.DefaultErrorHandler: a func
// value is comparable only to nil, its code pointer is not.
var defaultErrorHandler = reflect.ValueOf(fiber.DefaultErrorHandler).Pointer()

func isDefaultErrorHandler(h fiber.ErrorHandler) bool {
	return h == nil || reflect.ValueOf(h).Pointer() == defaultErrorHandler
}

// view returns the keyfunc.Request view of c. A view of one word costs no
// allocation: fiber's own *fiber.DefaultCtx, with the default body bound.
func view(c fiber.Ctx, bounded bool, maxBody int64) keyfunc.Request {
	dc, ok := c.(*fiber.DefaultCtx)
	switch {
	case ok && !bounded:
		return request[*fiber.DefaultCtx]{dc}
	case ok:
		return boundedRequest[*fiber.DefaultCtx]{request[*fiber.DefaultCtx]{dc}, maxBody}
	case !bounded:
		return request[fiber.Ctx]{c} // an app's CustomCtx
	}
	return boundedRequest[fiber.Ctx]{request[fiber.Ctx]{c}, maxBody}
}

// request is the keyfunc.Request view of a fiber request, of fiber's
// DefaultCtx or of an app's CustomCtx. fasthttp reuses its buffers, so
// every string it returns is a copy.
type request[C fiber.Ctx] struct{ c C }

func (r request[C]) RemoteAddr() string       { return fastbody.RemoteAddr(r.c.RequestCtx().RemoteAddr()) }
func (r request[C]) Method() string           { return r.c.Method() }
func (r request[C]) Context() context.Context { return r.c.Context() }

func (r request[C]) Header(name string) []string {
	return fastbody.Values(&r.c.Request().Header, name)
}

// Route returns the path of the route the middleware runs on, or "" when
// it runs as a Use, whose path is a prefix of the routes it precedes: no
// route matched the request yet (c.Matched()).
func (r request[C]) Route() string {
	if !r.c.Matched() {
		return ""
	}
	return r.c.Route().Path
}

// Field reads the body as sent, c.Request().Body(), and decodes it with
// bodyfield.Decode, which bounds every layer: c.Body() would decode it
// whole first, however large it inflates.
func (r request[C]) Field(name string) (string, error) {
	return r.field(name, keyfunc.DefaultMaxBodyBytes)
}

// boundedRequest is a request whose body bound is not the default
// ([httplimit.WithMaxBodyBytes]).
type boundedRequest[C fiber.Ctx] struct {
	request[C]
	maxBody int64
}

func (r boundedRequest[C]) Field(name string) (string, error) { return r.field(name, r.maxBody) }

func (r request[C]) field(name string, maxBody int64) (string, error) {
	req := r.c.Request()
	return fastbody.Field("fiber3limit", &req.Header, req, req.URI().QueryString(), name, maxBody)
}
