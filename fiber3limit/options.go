package fiber3limit

import (
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/nativeopt"
	"github.com/ratekit/ratekit/keyfunc"
)

// errNotFiber is the error of a key or cost function of this package's
// options called with a keyfunc.Request that is not fiber3limit's view of a
// fiber request: the option was given to another adapter, or its function
// called outside the middleware. It wraps keyfunc.ErrInvalidKey, so the
// request is refused (400) and the error reported, never served unlimited.
var errNotFiber = fmt.Errorf("fiber3limit: %w: the request is no fiber request: a fiber3limit option works in fiber3limit.New only", keyfunc.ErrInvalidKey)

// native finds fiber's context in a request of fiber3limit's middleware.
var native = nativeopt.Native[fiber.Ctx]{Of: ctxOf, Outside: errNotFiber}

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
func WithKeyGenerator(f func(c fiber.Ctx) (string, error)) httplimit.Option { return native.Key(f) }

// WithCost sets how many units a request spends by a function of fiber's
// context. It is [httplimit.WithCost] over the request's fiber.Ctx, with
// its rules: an error or a cost below 1 is refused with 400, as is every
// request when the option is given to another adapter.
//
// Default: every request costs 1.
func WithCost(f func(c fiber.Ctx) (int64, error)) httplimit.Option { return native.Cost(f) }

// WithNext sets which requests are not limited at all, as fiber's
// middleware Next: a request for which f returns true goes on to the next
// handler without being counted and without rate headers. It is
// [httplimit.WithSkip] over the request's fiber.Ctx; called outside
// fiber3limit's middleware, it skips nothing.
//
// Default: no request is skipped.
func WithNext(f func(c fiber.Ctx) bool) httplimit.Option { return native.Skip(f) }

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

// ErrorHandler returns a fiber ErrorHandler that writes a refusal of this
// package's middleware as httplimit writes it in every framework, its
// status and problem+json body as they are (the headers are already on the
// response), and passes every other error to next, nil meaning
// [fiber.DefaultErrorHandler]:
//
//	app := fiber.New(fiber.Config{ErrorHandler: fiber3limit.ErrorHandler(myErrorHandler)})
//
// It is for an app whose ErrorHandler answers every error in a format of
// its own, which would lose the problem body. (With fiber's default
// ErrorHandler, which would send the body as text/plain, the middleware
// writes its refusals itself.)
func ErrorHandler(next fiber.ErrorHandler) fiber.ErrorHandler {
	if next == nil {
		next = fiber.DefaultErrorHandler
	}
	return func(c fiber.Ctx, err error) error {
		var r *refusal
		if errors.As(err, &r) {
			return c.Status(r.fe.Code).Send(r.body)
		}
		return next(c, err)
	}
}

// refusal is the error a refused request returns to the app's
// ErrorHandler: a *fiber.Error with the status and the problem body as its
// Message, which [ErrorHandler] recognizes.
type refusal struct {
	fe   *fiber.Error
	body []byte
}

// Error returns the problem body, as the *fiber.Error's Message.
func (r *refusal) Error() string { return r.fe.Message }

// Unwrap returns the *fiber.Error, for errors.As.
func (r *refusal) Unwrap() error { return r.fe }

// newRefusal returns the error of a refusal with status and body.
func newRefusal(status int, body []byte) error {
	return &refusal{fe: fiber.NewError(status, string(body)), body: body}
}
