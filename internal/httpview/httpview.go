// Package httpview is the [keyfunc.Request] view of a net/http request that
// ratekit's net/http adapters (ginlimit, echolimit, echo5limit, chilimit) pass to
// httplimit's Engine.Check: the request, the route pattern its router
// matched, and the room the Engine keeps in it for one request, the body
// bound and the header value slots.
//
// The Engine recognises a [*Request] and fills that room; any other view
// works with it too, without the slots. A user's own adapter builds its view
// with [keyfunc.FromHTTP] and the Engine's MaxBodyBytes, so nothing here is
// public. The adapters live in modules of their own that import this
// package: a change to it must keep compiling the adapters' released
// versions, or they must require the root version that makes it.
package httpview

import (
	"context"
	"net/http"

	"github.com/ratekit/ratekit/keyfunc"
)

// Request is the view of a net/http request whose router knows the matched
// route pattern. An adapter keeps one per request in its pooled [Writer]
// and sets it with [Request.Reset]; [New] and [NewFunc] build a fresh one.
// Like any [keyfunc.Request], it is used by one goroutine at a time, and
// only while its request is handled.
type Request struct {
	r         *http.Request
	route     string
	routeFunc func(*http.Request) string
	full      keyfunc.Request // keyfunc.FromHTTP(r), built when first needed

	// MaxBody bounds the body Field reads and decodes, as
	// [keyfunc.MaxBodyBytes] does; the Engine sets it before any key
	// function runs. 0 means [keyfunc.DefaultMaxBodyBytes].
	MaxBody int64

	// Native is the framework's own request context (*gin.Context for
	// ginlimit), set by an adapter whose native options read it with
	// [NativeOf]; nil otherwise.
	Native any

	// Scratch is the memory httplimit writes a response's headers with,
	// kept with the pooled view across requests (Reset keeps it) so that
	// writing them takes nothing from a pool of its own. It holds no
	// reference to any request.
	Scratch any
}

// Reset makes v the view of r, as [New] (route) or [NewFunc] (routeFunc)
// would build it, keeping its Scratch; Reset(nil, "", nil) drops every
// reference v holds to a request, before v goes back to a pool.
func (v *Request) Reset(r *http.Request, route string, routeFunc func(*http.Request) string) {
	*v = Request{r: r, route: route, routeFunc: routeFunc, Scratch: v.Scratch}
}

// NativeOf returns the framework context of type T that an adapter set on
// r's view, and false when r is not such a view (a native option used
// outside its adapter's middleware).
func NativeOf[T any](r keyfunc.Request) (T, bool) {
	var zero T
	v, ok := r.(*Request)
	if !ok {
		return zero, false
	}
	t, ok := v.Native.(T)
	return t, ok
}

var _ keyfunc.Request = (*Request)(nil)

// CheckInto is httplimit's Engine.Check deciding into a Result of the
// caller's, a func(*httplimit.Engine, *httplimit.Result, keyfunc.Request)
// set by httplimit: an adapter decides into the Result its pooled Writer
// holds, which Check, returning it by value, would copy twice. The Result
// must be the zero Result, as a pooled one is, put back only once reset.
// A Result decided through it writes its headers with the view's Scratch,
// which the adapter's pooled view keeps; one decided by Check takes a
// scratch from a pool, as an adapter released before CheckInto resets its
// view's Scratch with the rest.
var CheckInto any

// New returns the view of r for routers that keep the matched pattern on
// their own context (gin's FullPath, echo's Path). route is the pattern
// without the method, or "" when no route matched; then Route falls back to
// [http.Request.Pattern] as [keyfunc.FromHTTP] does. Everything else
// behaves as the view of [keyfunc.FromHTTP]; Field reads the body without
// consuming it.
func New(r *http.Request, route string) *Request {
	return &Request{r: r, route: route}
}

// NewFunc is like [New] for routers whose route pattern costs something to
// compute, such as chi's: route is called only when a key function asks for
// the route, and "" from it means unknown.
func NewFunc(r *http.Request, route func(*http.Request) string) *Request {
	return &Request{r: r, routeFunc: route}
}

// RemoteAddr returns r.RemoteAddr.
func (v *Request) RemoteAddr() string { return v.r.RemoteAddr }

// Header returns the values of the named header of r.
func (v *Request) Header(name string) []string { return v.r.Header.Values(name) }

// Method returns r.Method.
func (v *Request) Method() string { return v.r.Method }

// Context returns r's context.
func (v *Request) Context() context.Context { return v.r.Context() }

// Route returns the router's pattern, else the [http.Request.Pattern] set by
// [http.ServeMux] without its method, else "".
func (v *Request) Route() string {
	if v.route != "" {
		return v.route
	}
	if v.routeFunc != nil {
		if p := v.routeFunc(v.r); p != "" {
			return p
		}
	}
	return v.fromHTTP().Route()
}

// Field returns the named field of the body or query, as the view of
// [keyfunc.FromHTTP] with [keyfunc.MaxBodyBytes](v.MaxBody) does, leaving
// the body intact for the handler.
func (v *Request) Field(name string) (string, error) { return v.fromHTTP().Field(name) }

func (v *Request) fromHTTP() keyfunc.Request {
	if v.full == nil {
		v.full = keyfunc.FromHTTP(v.r, keyfunc.MaxBodyBytes(v.MaxBody))
	}
	return v.full
}
