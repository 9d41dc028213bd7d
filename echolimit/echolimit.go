// Package echolimit is ratekit's rate-limiting middleware for echo
// (github.com/labstack/echo/v4): one line in front of an API or a route,
//
//	e.Use(echolimit.New(limiter))
//
// It is glue around [httplimit.Engine]: the options, headers and responses
// are [httplimit]'s, the same in every framework.
package echolimit

import (
	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
)

// New returns echo middleware that limits requests with l, configured by the
// [httplimit.Option] values opts. Allowed requests get the rate headers and
// go on to the next handler; refused ones get the [httplimit.Engine]
// response. [httplimit.WithKey] functions see echo's route pattern (c.Path(),
// such as "/items/:id") as the route.
//
// With [httplimit.WithCountIf], an error returned by the handler is passed to
// echo's HTTPErrorHandler here, so that the status it answers with is the
// one counted; the middleware then returns nil, as echo's request logger does.
//
// New panics if l is nil or an option is invalid (see [httplimit.New]): a
// configuration mistake, found when the server starts.
func New(l core.Limiter, opts ...httplimit.Option) echo.MiddlewareFunc {
	e := httplimit.MustNew(l, opts...)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			res := e.Check(httpview.New(c.Request(), c.Path()))
			if !res.WriteHTTP(c.Response()) {
				return nil
			}
			if !res.Counting() {
				return next(c)
			}
			if err := next(c); err != nil {
				c.Error(err)
			}
			res.Done(c.Response().Status)
			return nil
		}
	}
}
