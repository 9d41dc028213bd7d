// Package chilimit is ratekit's rate-limiting middleware for chi
// (github.com/go-chi/chi/v5) and any other net/http router: one line in
// front of an API, or per route,
//
//	r.Use(chilimit.New(limiter))
//	r.With(chilimit.New(loginLimiter, httplimit.WithCountIf(httplimit.Failures))).Post("/login", login)
//
// It is glue around [httplimit.Engine]: the options, headers and responses
// are [httplimit]'s, the same in every framework.
package chilimit

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// New returns net/http middleware that limits requests with l, configured by
// the [httplimit.Option] values opts. Allowed requests get the rate headers
// and go on to next; refused ones get the [httplimit.Engine] response.
//
// [httplimit.WithKey] functions see chi's route pattern (such as
// "/items/{id}") as the route when chi routed the request, else
// [http.Request.Pattern] as set by [http.ServeMux]. chi knows the pattern
// only after routing: in middleware added with r.With, or r.Use inside
// r.Group, not in r.Use on the top-level router, which runs before routing.
//
// New panics if l is nil or an option is invalid (see [httplimit.New]): a
// configuration mistake, found when the server starts.
func New(l core.Limiter, opts ...httplimit.Option) func(http.Handler) http.Handler {
	e := httplimit.MustNew(l, opts...)
	return func(next http.Handler) http.Handler { return e.Handler(next, route) }
}

// route returns chi's route pattern, or "" when chi did not route the
// request (the engine then reads the ServeMux pattern).
func route(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}
