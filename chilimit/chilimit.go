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
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// New returns net/http middleware that limits requests with l, configured by
// the [httplimit.Option] values opts. Allowed requests get the rate headers
// and go on to next; refused ones get the [httplimit.Engine] response.
//
// [httplimit.WithKey] functions see chi's route pattern (such as
// "/items/{id}") as the route when chi routes the request, else
// [http.Request.Pattern] as set by [http.ServeMux]. Where the middleware
// runs before chi has matched the route (r.Use on the top-level router, or
// on a router mounted with r.Route or r.Mount), the route is found by
// matching the request against the router's tree, as chi is about to: the
// key is the same in every place the middleware can be added. A request
// that no route serves (404, or a method chi does not know: 405) has no
// route.
//
// New panics if l is nil or an option is invalid (see [httplimit.New]): a
// configuration mistake, found when the server starts.
func New(l core.Limiter, opts ...httplimit.Option) func(http.Handler) http.Handler {
	e := httplimit.MustNew(l, opts...)
	return func(next http.Handler) http.Handler { return e.Handler(next, route) }
}

// route returns the request's chi route pattern, or "" when chi does not
// route it (the engine then reads the ServeMux pattern) or no route matches.
// A pattern chi has not finished matching (none yet, or a mounted router's
// prefix ending in "/*") is found on the root router's tree; a HEAD that no
// route serves takes its GET route, as keyfunc.Route folds HEAD into GET.
func route(r *http.Request) string {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return ""
	}
	if n := len(rc.RoutePatterns); n > 0 && !strings.HasSuffix(rc.RoutePatterns[n-1], "/*") {
		return rc.RoutePattern()
	}
	if rc.Routes == nil {
		return ""
	}
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	if path == "" {
		path = "/"
	}
	p := rc.Routes.Find(chi.NewRouteContext(), r.Method, path)
	if p == "" && r.Method == http.MethodHead {
		p = rc.Routes.Find(chi.NewRouteContext(), http.MethodGet, path)
	}
	return p
}
