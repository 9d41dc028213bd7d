package httplimit

import (
	"bufio"
	"net"
	"net/http"

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
// "GET /items/{id}"), as the route: known in middleware around a handler
// registered on the mux, not in middleware around the mux itself, which
// runs before routing.
//
// Middleware panics if l is nil or an option is invalid (see [New]): a
// configuration mistake, found when the server starts.
func Middleware(l core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	e := MustNew(l, opts...)
	return func(next http.Handler) http.Handler { return e.Handler(next, nil) }
}

// Handler returns next limited by e, for middleware of a net/http router:
// route returns the pattern the router matched for a request (nil: the
// request's [http.Request.Pattern]; so is a route that returns ""). [Middleware] and chilimit are this
// method with the standard and chi's patterns. With [WithCountIf], the
// status next writes decides whether the request stays counted; a handler
// that writes nothing answered 200.
func (e *Engine) Handler(next http.Handler, route func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := e.Check(httpview.NewFunc(r, route))
		if !res.WriteHTTP(w) {
			return
		}
		if !res.Counting() {
			next.ServeHTTP(w, r)
			return
		}
		// A handler that panics leaves the request counted.
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		res.Done(sw.final())
	})
}

// statusWriter records the final status a handler writes. It unwraps for
// [http.ResponseController], and flushes and hijacks through it, so a
// streaming or upgrading handler works behind it as without it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx responses are informational, except 101 Switching Protocols,
	// which is final.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends buffered data, as the wrapped writer's Flush does.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes over the connection, as the wrapped writer's Hijack does.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap returns the wrapped writer, for [http.ResponseController].
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// final returns the status the client got: 200 when the handler wrote
// nothing, as net/http sends.
func (w *statusWriter) final() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
