package fiber3limit

import (
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// errNotFiber is the error of a key or cost function of this package's
// options called with a keyfunc.Request that is not fiber3limit's view of a
// fiber request: the option was given to another adapter, or its function
// called outside the middleware. It wraps keyfunc.ErrInvalidKey, so the
// request is refused (400) and the error reported, never served unlimited.
var errNotFiber = fmt.Errorf("fiber3limit: %w: the request is no fiber request: a fiber3limit option works in fiber3limit.New only", keyfunc.ErrInvalidKey)

// ctxOf returns the fiber context of r, a request that fiber3limit's
// middleware passes to an option's function, or false if r is no request
// of fiber3limit's.
func ctxOf(r keyfunc.Request) (fiber.Ctx, bool) {
	switch v := r.(type) {
	case request[*fiber.DefaultCtx]:
		return v.c, true
	case boundedRequest[*fiber.DefaultCtx]:
		return v.c, true
	case request[fiber.Ctx]:
		return v.c, true
	case boundedRequest[fiber.Ctx]:
		return v.c, true
	}
	return nil, false
}

// WithKeyGenerator sets who is limited by a function of fiber's context, as
// fiber's limiter's KeyGenerator: it can read what earlier middleware
// stored with c.Locals, such as the authenticated user. It is
// [httplimit.WithKey] over the request's fiber.Ctx, with its rules: an
// error wrapping [keyfunc.ErrNoKey] (return one for a request without a
// user, say) is handled as [httplimit.WithNoKey] says, any other as
// [httplimit.WithInvalidKey] says; an empty key is refused. Given to
// another adapter, every request is refused (400) and the error reported.
// A nil f is the mistake httplimit.WithKey(nil) is.
//
// Default: [keyfunc.PeerIP], as httplimit.WithKey.
func WithKeyGenerator(f func(c fiber.Ctx) (string, error)) httplimit.Option {
	if f == nil {
		return httplimit.WithKey(nil)
	}
	return httplimit.WithKey(func(r keyfunc.Request) (string, error) {
		c, ok := ctxOf(r)
		if !ok {
			return "", errNotFiber
		}
		return f(c)
	})
}

// WithCost sets how many units a request spends by a function of fiber's
// context. It is [httplimit.WithCost] over the request's fiber.Ctx, with
// its rules: an error or a cost below 1 is refused with 400, as is every
// request when the option is given to another adapter.
//
// Default: every request costs 1.
func WithCost(f func(c fiber.Ctx) (int64, error)) httplimit.Option {
	if f == nil {
		return httplimit.WithCost(nil)
	}
	return httplimit.WithCost(func(r keyfunc.Request) (int64, error) {
		c, ok := ctxOf(r)
		if !ok {
			return 0, errNotFiber
		}
		return f(c)
	})
}

// WithNext sets which requests are not limited at all, as fiber's
// middleware Next: a request for which f returns true goes on to the next
// handler without being counted and without rate headers. It is
// [httplimit.WithSkip] over the request's fiber.Ctx; called outside
// fiber3limit's middleware, it skips nothing.
//
// Default: no request is skipped.
func WithNext(f func(c fiber.Ctx) bool) httplimit.Option {
	if f == nil {
		return httplimit.WithSkip(nil)
	}
	return httplimit.WithSkip(func(r keyfunc.Request) bool {
		c, ok := ctxOf(r)
		return ok && f(c)
	})
}

// WithLimitReached sets the handler a request denied by the limiter gets
// instead of the 429 response, as fiber's limiter's LimitReached: it runs
// with the status 429 and the rate headers, Retry-After and Cache-Control:
// no-store already set, and what it returns is the middleware's return
// value (an error goes to the app's ErrorHandler). The next handler is not
// called. It answers denials only, as [httplimit.WithDenied], which it
// replaces; the other refusals get the middleware's response. Given to
// another adapter, a denial gets [httplimit.DeniedResponse]. A nil h is the
// mistake httplimit.WithDenied(nil) is.
//
// Default: the 429 problem+json response, returned to the app's
// ErrorHandler as [New] says.
func WithLimitReached(h fiber.Handler) httplimit.Option {
	if h == nil {
		return httplimit.WithDenied(nil)
	}
	return httplimit.WithDenied(func(r keyfunc.Request, d core.Decision) httplimit.Response {
		c, ok := ctxOf(r)
		if !ok {
			return httplimit.DeniedResponse(d)
		}
		c.Locals(limitReachedKey{}, h)
		return httplimit.Response{Status: fiber.StatusTooManyRequests}
	})
}

// limitReachedKey is the c.Locals key of the WithLimitReached handler of
// the request being denied.
type limitReachedKey struct{}

// limitReached returns the WithLimitReached handler of the request c being
// denied, and forgets it, or nil.
func limitReached(c fiber.Ctx) fiber.Handler {
	h, _ := c.Locals(limitReachedKey{}).(fiber.Handler)
	if h != nil {
		c.Locals(limitReachedKey{}, nil)
	}
	return h
}

// DirectWrite returns h, a handler of [New], sending its refusals itself,
// as fiberlimit for fiber v2 did before refusals went to the app's ErrorHandler: the status
// and the problem+json body are written to the response and h returns nil,
// so the app's ErrorHandler never sees them. A [WithLimitReached] handler
// still answers denials.
func DirectWrite(h fiber.Handler) fiber.Handler {
	if h == nil {
		panic(errors.New("fiber3limit: DirectWrite: a handler is required"))
	}
	return func(c fiber.Ctx) error {
		c.Locals(directKey{}, true)
		return h(c)
	}
}

// directKey is the c.Locals key DirectWrite sets for the middleware it
// wraps.
type directKey struct{}

// directWrite reports whether DirectWrite wraps the middleware c runs now,
// and forgets it, so that a limit further down writes as it is told.
func directWrite(c fiber.Ctx) bool {
	if c.Locals(directKey{}) == nil {
		return false
	}
	c.Locals(directKey{}, nil)
	return true
}
