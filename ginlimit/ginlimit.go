// Package ginlimit is ratekit's rate-limiting middleware for gin
// (github.com/gin-gonic/gin): one line in front of an API or a route,
//
//	r.Use(ginlimit.New(limiter))
//
// It is glue around [httplimit.Engine]: the options, headers and responses
// are [httplimit]'s, the same in every framework.
package ginlimit

import (
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
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
		g := limitedPool.Get().(*limited)
		g.view.Reset(c.Request, c.FullPath(), nil)
		g.view.Native = c
		checkInto(e, &g.res, &g.view)
		g.res.After(outerOf(c.Writer))
		if !g.res.WriteHTTP(c.Writer) {
			c.Abort()
		} else {
			// The handlers write through g, where a limit further down
			// finds this one's Result. One that panics leaves the request
			// counted, gives back its in-flight lease, and g is not reused.
			g.ResponseWriter = c.Writer
			c.Writer = g
			if g.res.Settling() {
				// The handlers report their cost through the request's
				// context (httplimit.SetCost).
				c.Request = c.Request.WithContext(g.res.Context(c.Request.Context()))
			}
			ended := false
			defer func() {
				if !ended {
					g.res.Release() // the handler panicked: its in-flight lease goes back
				}
			}()
			c.Next()
			ended = true
			c.Writer = g.ResponseWriter
			g.res.Done(c.Writer.Status())
		}
		g.res.Release()
		*g = limited{view: httpview.Request{Scratch: g.view.Scratch}}
		limitedPool.Put(g)
	}
}

// limited is one request's pass through one limit: its Result and the
// view of its request the key functions read, carried on
// the writer the handlers after it write through, so that limits stacked
// on one request (the engine's, a group's, a route's) decide together
// ([httplimit.Result.After]). Pooled: gin's writer is not used after the
// handlers return.
type limited struct {
	gin.ResponseWriter
	res  httplimit.Result
	view httpview.Request
}

// checkInto is [httplimit.Engine.Check] deciding into the pooled Result
// (internal/httpview.CheckInto), which costs no copy of it.
var checkInto = httpview.CheckInto.(func(*httplimit.Engine, *httplimit.Result, keyfunc.Request))

var limitedPool = sync.Pool{New: func() any { return new(limited) }}

// Unwrap returns the writer g wraps, for http.ResponseController and for
// the limits further down that look for this one.
func (g *limited) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// outerOf returns the Result of the nearest limit around w, found along
// w's Unwrap chain, or nil.
func outerOf(w http.ResponseWriter) *httplimit.Result {
	if g, ok := httpview.Find[*limited](w); ok {
		return &g.res
	}
	return nil
}
