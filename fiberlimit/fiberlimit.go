// Package fiberlimit is ratekit's rate-limiting middleware for fiber
// (github.com/gofiber/fiber/v2): one line in front of an API or a route,
//
//	app.Use(fiberlimit.New(limiter))
//
// It is glue around [httplimit.Engine]: the options, headers and responses
// are [httplimit]'s, the same in every framework. The options of this
// package are the same options over fiber's own context, named as fiber's
// limiter middleware names its fields: [WithKeyGenerator], [WithCost],
// [WithNext] and [WithLimitReached]. For fiber v3, see fiber3limit.
package fiberlimit

import (
	"context"
	"reflect"

	"github.com/gofiber/fiber/v2"

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
// Context is c.UserContext(), and its Route is the path of the route the
// middleware was registered on (c.Route().Path). Registered with app.Use or
// a group's Use, the route a request will match is not known yet: Route is
// "", so a route key ([keyfunc.Route], [keyfunc.RouteMethod]) finds no key,
// which is reported to the [httplimit.WithErrorHook] hook and refused as
// [httplimit.WithNoKey] says (400 by default), never counted under the
// prefix of the Use. Register a route-keyed limit on the route, as in
// app.Post("/login", fiberlimit.New(l), login). fasthttp does not report a
// client that went away, so a leaky bucket's wait ends early only when
// c.UserContext() is canceled.
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
	return func(c *fiber.Ctx) error {
		var req keyfunc.Request = request{c}
		if bounded {
			// A view of two words costs an allocation: only when the bound
			// is not the default.
			req = boundedRequest{request{c}, e.MaxBodyBytes()}
		}
		outer, _ := c.Locals(stacked.LocalsKey()).(*httplimit.Result)
		res := stacked.Get()
		defer stacked.Put(res)
		checkInto(e, res, req)
		res.After(outer)
		res.WriteHeaders(&c.Response().Header)
		if !res.Serve() {
			return refuse(c, res)
		}
		// A limit further down finds this one's Result in c.Locals.
		c.Locals(stacked.LocalsKey(), res)
		defer c.Locals(stacked.LocalsKey(), outer)
		if res.Settling() {
			// The handlers report their cost through c.UserContext()
			// (httplimit.SetCost).
			c.SetUserContext(res.Context(c.UserContext()))
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
func refuse(c *fiber.Ctx, res *httplimit.Result) error {
	if c.Request().IsBodyStream() {
		// fasthttp does not drain a streamed body the handler leaves
		// unread (StreamRequestBody): its rest would be parsed as the
		// next request on the connection.
		c.Context().SetConnectionClose()
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

// request is the keyfunc.Request view of a fiber request. fasthttp reuses
// its buffers, so every string it returns is a copy.
type request struct{ c *fiber.Ctx }

func (r request) RemoteAddr() string       { return fastbody.RemoteAddr(r.c.Context().RemoteAddr()) }
func (r request) Method() string           { return r.c.Method() }
func (r request) Context() context.Context { return r.c.UserContext() }

func (r request) Header(name string) []string {
	return fastbody.Values(&r.c.Request().Header, name)
}

// Route returns the path of the route the middleware runs on, or "" when
// it runs as a Use, whose path is a prefix of the routes it precedes.
func (r request) Route() string {
	rt := r.c.Route()
	if isUse(r.c, rt) {
		return ""
	}
	return rt.Path
}

// useField is the index of fiber.Route's unexported use field, which
// fiber sets on the routes of app.Use, a group's Use and Mount, and reads
// alone: fiber v2 exposes no other way to tell a Use from a route (its
// Method is the request's either way), and v2 is in maintenance, so the
// field stays. Nil if a release renames it: then a route whose path does
// not match the whole request path is taken for a Use.
var useField = func() []int {
	f, ok := reflect.TypeFor[fiber.Route]().FieldByName("use")
	if !ok || f.Type.Kind() != reflect.Bool {
		return nil
	}
	return f.Index
}()

// isUse reports whether rt, c's current route, was registered as a Use.
func isUse(c *fiber.Ctx, rt *fiber.Route) bool {
	if useField != nil {
		return reflect.ValueOf(rt).Elem().FieldByIndex(useField).Bool()
	}
	return !fiber.RoutePatternMatch(c.Path(), rt.Path, c.App().Config())
}

// Field reads the body as sent, c.Request().Body(), and decodes it with
// bodyfield.Decode, which bounds every layer: c.Body() would decode it
// whole first, however large it inflates.
func (r request) Field(name string) (string, error) {
	return r.field(name, keyfunc.DefaultMaxBodyBytes)
}

// boundedRequest is a request whose body bound is not the default
// ([httplimit.WithMaxBodyBytes]).
type boundedRequest struct {
	request
	maxBody int64
}

func (r boundedRequest) Field(name string) (string, error) { return r.field(name, r.maxBody) }

func (r request) field(name string, maxBody int64) (string, error) {
	req := r.c.Request()
	return fastbody.Field("fiberlimit", &req.Header, req, req.URI().QueryString(), name, maxBody)
}
