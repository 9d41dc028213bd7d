package httplimit

import (
	"net/http"
	"strings"
	"sync"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/httpview"
)

// Middleware returns plain net/http middleware that limits requests with
// l, configured by opts, for the standard [http.ServeMux] or any handler
// chain, with no router dependency:
//
//	mux.Handle("POST /login", httplimit.Middleware(loginLimiter,
//		httplimit.WithCountIf(httplimit.Failures))(login))
//
// Allowed requests get the rate headers and go on to next; refused ones get
// the [Engine]'s response. Key functions see [http.Request.Pattern], the
// ServeMux pattern that matched, without its method ("/items/{id}" for
// "GET /items/{id}"), as the route. Around a handler registered on the mux
// it is set; around an *http.ServeMux itself, which runs before it routes,
// the route is the pattern the mux will match (ServeMux.Handler), so a
// route key is the same in both places. Around any other handler before
// routing, there is no route.
//
// Middleware panics if l is nil or an option is invalid (see [New]): a
// configuration mistake, found when the server starts.
func Middleware(l core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	e := MustNew(l, opts...)
	return func(next http.Handler) http.Handler {
		if mux, ok := next.(*http.ServeMux); ok {
			return e.Handler(next, muxRoute(mux))
		}
		return e.Handler(next, nil)
	}
}

// muxRoute returns the route function of middleware around mux: the
// pattern mux will match for a request, without its method, or "" when it
// matches none (a 404, a 405, a redirect).
func muxRoute(mux *http.ServeMux) func(*http.Request) string {
	return func(r *http.Request) string {
		_, p := mux.Handler(r)
		// A ServeMux pattern is "[METHOD ][HOST]/[PATH]"; paths and hosts
		// hold no spaces, so anything before a space is the method.
		if i := strings.IndexAny(p, " \t"); i >= 0 {
			p = strings.TrimLeft(p[i:], " \t")
		}
		return p
	}
}

// Handler returns next limited by e, for middleware of a net/http router:
// route returns the pattern the router matched for a request (nil: the
// request's [http.Request.Pattern]; so is a route that returns ""). [Middleware] and chilimit are this
// method with the standard and chi's patterns. With [WithCountIf], the
// status next writes decides whether the request stays counted; a handler
// that writes nothing answered 200. Limits stacked on one request through
// Handler decide together: one that refuses the request gives back what
// the limits around it counted ([Result.After]).
func (e *Engine) Handler(next http.Handler, route func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Pooled writers are zero (put back only once reset), so setting
		// the writer is all its Reset would do.
		l := limitedPool.Get().(*httpview.Writer[Result])
		l.ResponseWriter = w
		l.View.Reset(r, "", route)
		l.Value.e, l.Value.req = e, &l.View // l.Value is zero, as pooled
		l.Value.keepScratch()
		e.check(&l.Value)
		l.Value.After(httpview.Outer[Result](w))
		if l.Value.WriteHTTP(w) {
			// The handler writes through l, where a limit further down
			// finds this one's Result. A handler that panics leaves the
			// request counted at its estimate, gives back its in-flight
			// lease, and l is not reused.
			if l.Value.Settling() {
				r = r.WithContext(l.Value.Context(r.Context()))
			}
			ended := false
			defer func() {
				if !ended {
					l.Value.Release()
				}
			}()
			next.ServeHTTP(l, r)
			ended = true
			l.Value.Done(l.Status())
		}
		l.Value.Release()
		l.Reset(nil)
		limitedPool.Put(l)
	})
}

// limitedPool holds the writers of [Engine.Handler]: each carries one
// request's Result through one limit.
var limitedPool = sync.Pool{New: func() any { return new(httpview.Writer[Result]) }}
