// Package ginlimit is ratekit's rate-limiting middleware for gin
// (github.com/gin-gonic/gin): one line in front of an API or a route,
//
//	r.Use(ginlimit.New(limiter))
//
// It is glue around [httplimit.Engine]: the options, headers and responses
// are [httplimit]'s, the same in every framework.
package ginlimit

import (
	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
)

// New returns gin middleware that limits requests with l, configured by the
// [httplimit.Option] values opts. Allowed requests get the rate headers and
// go on to the next handler; refused ones get the [httplimit.Engine]
// response and the chain is aborted. [httplimit.WithKey] functions see gin's
// route pattern (c.FullPath(), such as "/items/:id") as the route; this
// package's [WithKey], [WithCost] and [WithSkip] see gin's context itself,
// so that a value earlier middleware set with c.Set is a key.
//
// New panics if l is nil or an option is invalid (see [httplimit.New]): a
// configuration mistake, found when the server starts.
func New(l core.Limiter, opts ...httplimit.Option) gin.HandlerFunc {
	e := httplimit.MustNew(l, opts...)
	return func(c *gin.Context) {
		v := httpview.New(c.Request, c.FullPath())
		v.Native = c
		res := e.Check(v)
		if !res.WriteHTTP(c.Writer) {
			c.Abort()
			return
		}
		c.Next()
		res.Done(c.Writer.Status())
	}
}
