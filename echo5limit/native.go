package echo5limit

import (
	"fmt"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/internal/nativeopt"
	"github.com/ratekit/ratekit/keyfunc"
)

// The options below take functions of echo's own context, so that what
// earlier middleware stored with c.Set (an authenticated user, a tenant, a
// plan) decides the key, the cost or a skip. They are [httplimit.Option]
// values, used beside httplimit's own; each replaces httplimit's option of
// the same name, and the last one given wins. Outside this package's
// middleware, where no echo context exists, their functions are not
// called: a key or cost is then an error (the request is refused, 400, and
// the error hook told), a skip is false.

// native finds echo's context in a request of echo5limit's middleware.
var native = nativeopt.Native[*echo.Context]{
	Of:      httpview.NativeOf[*echo.Context],
	Outside: fmt.Errorf("echo5limit: %w: no echo context: the option is used outside echo5limit.New", keyfunc.ErrInvalidKey),
}

// WithKey sets who is limited, from echo's context, such as the user an
// authentication middleware stored with c.Set:
//
//	echo5limit.New(limiter, echo5limit.WithKey(func(c *echo.Context) (string, error) {
//		if user, _ := c.Get("user").(string); user != "" {
//			return user, nil
//		}
//		return "", keyfunc.ErrNoKey // refused, 400 (see httplimit.WithNoKey)
//	}))
//
// f has the type of echo's own limiter's IdentifierExtractor
// ([github.com/labstack/echo/v5/middleware.Extractor]), so an extractor
// written for it is a key function here. It is [httplimit.WithKey] over c:
// an error wrapping [keyfunc.ErrNoKey] is handled as [httplimit.WithNoKey]
// says, any other as [httplimit.WithInvalidKey] says. [New] panics if f is
// nil.
func WithKey(f func(c *echo.Context) (string, error)) httplimit.Option { return native.Key(f) }

// WithCost sets how many units a request spends, from echo's context: it is
// [httplimit.WithCost] over c. [New] panics if f is nil.
func WithCost(f func(c *echo.Context) (int64, error)) httplimit.Option { return native.Cost(f) }

// WithSkipper sets which requests are not limited (no rate headers, nothing
// counted) with an echo [github.com/labstack/echo/v5/middleware.Skipper],
// the function every echo middleware's config takes, so the one an app
// already has for its logger or its own limiter works here: it is
// [httplimit.WithSkip] over c. [New] panics if skip is nil.
func WithSkipper(skip func(c *echo.Context) bool) httplimit.Option { return native.Skip(skip) }
