package httplimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
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
// that writes nothing answered 200. Limits stacked on one request through
// Handler decide together: one that refuses the request gives back what
// the limits around it counted ([Result.After]).
func (e *Engine) Handler(next http.Handler, route func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := limitedPool.Get().(*limited)
		l.ResponseWriter, l.status = w, 0
		// The view is the request's own: the header values it holds room
		// for outlive the handler, in the response's header map.
		l.res = e.Check(httpview.NewFunc(r, route))
		l.res.After(outerOf(w))
		if l.res.WriteHTTP(w) {
			// The handler writes through l, where a limit further down
			// finds this one's Result. A handler that panics leaves the
			// request counted, and l is not reused.
			next.ServeHTTP(l, r)
			l.res.Done(l.final())
		}
		*l = limited{}
		limitedPool.Put(l)
	})
}

// limited is one request's pass through one limit of [Engine.Handler]: the
// Result, and the writer the handler writes through, which records the
// final status and carries the Result for the limits further down. Pooled:
// a ResponseWriter is not used after the handler returns.
type limited struct {
	statusWriter
	res Result
}

var limitedPool = sync.Pool{New: func() any { return new(limited) }}

// outerOf returns the Result of the nearest limit of [Engine.Handler]
// around w, found along w's Unwrap chain, or nil.
func outerOf(w http.ResponseWriter) *Result {
	for w != nil {
		if l, ok := w.(*limited); ok {
			return &l.res
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
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

// ReadFrom copies from src as the wrapped writer's ReadFrom does (net/http's
// sends a file with sendfile), so that serving a file behind the limit
// costs what it costs without it.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides every method of a writer but Write, so that io.Copy
// does not call ReadFrom back.
type writerOnly struct{ io.Writer }

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
