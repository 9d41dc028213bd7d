package ginlimit

import (
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/internal/nativeopt"
	"github.com/ratekit/ratekit/keyfunc"
)

// The options below take functions of gin's own context, so that what
// earlier middleware stored with c.Set (an authenticated user, a tenant, a
// plan) decides the key, the cost or a skip. They are [httplimit.Option]
// values, used beside httplimit's own; each replaces httplimit's option of
// the same name, and the last one given wins. Outside this package's
// middleware, where no gin context exists, their functions are not called:
// a key or cost is then an error (the request is refused, 400, and the
// error hook told), a skip is false.

// native finds gin's context in a request of ginlimit's middleware.
var native = nativeopt.Native[*gin.Context]{
	Of:      httpview.NativeOf[*gin.Context],
	Outside: fmt.Errorf("ginlimit: %w: no gin context: the option is used outside ginlimit.New", keyfunc.ErrInvalidKey),
}

// WithKey sets who is limited, from gin's context, such as the user an
// authentication middleware stored with c.Set:
//
//	ginlimit.New(limiter, ginlimit.WithKey(func(c *gin.Context) (string, error) {
//		if user := c.GetString("user"); user != "" {
//			return user, nil
//		}
//		return "", keyfunc.ErrNoKey // refused, 400 (see httplimit.WithNoKey)
//	}))
//
// It is [httplimit.WithKey] over c: an error wrapping [keyfunc.ErrNoKey] is
// handled as [httplimit.WithNoKey] says, any other as
// [httplimit.WithInvalidKey] says. [New] panics if f is nil.
func WithKey(f func(c *gin.Context) (string, error)) httplimit.Option { return native.Key(f) }

// WithCost sets how many units a request spends, from gin's context: it is
// [httplimit.WithCost] over c. [New] panics if f is nil.
func WithCost(f func(c *gin.Context) (int64, error)) httplimit.Option { return native.Cost(f) }

// WithSkip sets which requests are not limited, from gin's context (no
// rate headers, nothing counted): it is [httplimit.WithSkip] over c. [New]
// panics if f is nil.
func WithSkip(f func(c *gin.Context) bool) httplimit.Option { return native.Skip(f) }
