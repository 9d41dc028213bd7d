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
	"github.com/go-chi/chi/v5/middleware"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
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
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res := e.Check(httpview.NewFunc(r, route))
			if !res.WriteHTTP(w) {
				return
			}
			if !res.Counting() {
				next.ServeHTTP(w, r)
				return
			}
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK // nothing written: net/http sends 200
			}
			res.Done(status)
		})
	}
}

// route returns chi's route pattern, or the ServeMux pattern when chi did
// not route the request.
func route(r *http.Request) string {
	if p := chi.RouteContext(r.Context()).RoutePattern(); p != "" {
		return p
	}
	return keyfunc.FromHTTP(r).Route()
}
