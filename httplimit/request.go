package httplimit

import (
	"context"
	"net/http"

	"github.com/ratekit/ratekit/keyfunc"
)

// HTTPRequest returns the [keyfunc.Request] view of a net/http request whose
// router knows the matched route pattern, for adapters of routers that keep
// it on their own context (gin's FullPath, echo's Path). route is the
// pattern without the method, or "" when no route matched; then Route falls
// back to [http.Request.Pattern] as [keyfunc.FromHTTP] does. Everything else
// behaves as the view of [keyfunc.FromHTTP]; Field reads the body without
// consuming it.
func HTTPRequest(r *http.Request, route string) keyfunc.Request {
	return &httpRequest{r: r, route: route}
}

// HTTPRequestFunc is like [HTTPRequest] for routers whose route pattern
// costs something to compute, such as chi's: route is called only when a
// key function asks for the route, and "" from it means unknown.
func HTTPRequestFunc(r *http.Request, route func(*http.Request) string) keyfunc.Request {
	return &httpRequest{r: r, routeFunc: route}
}

type httpRequest struct {
	r         *http.Request
	route     string
	routeFunc func(*http.Request) string
	full      keyfunc.Request // keyfunc.FromHTTP(r), built when first needed
	maxBody   int64           // the Engine's WithMaxBodyBytes, set by Check
	// slots holds the per-request header value slices, so that they cost
	// no allocation of their own.
	slots headerSlots
}

func (h *httpRequest) RemoteAddr() string          { return h.r.RemoteAddr }
func (h *httpRequest) Header(name string) []string { return h.r.Header.Values(name) }
func (h *httpRequest) Method() string              { return h.r.Method }
func (h *httpRequest) Context() context.Context    { return h.r.Context() }

func (h *httpRequest) Route() string {
	if h.route != "" {
		return h.route
	}
	if h.routeFunc != nil {
		if p := h.routeFunc(h.r); p != "" {
			return p
		}
	}
	return h.fromHTTP().Route()
}

func (h *httpRequest) Field(name string) (string, error) { return h.fromHTTP().Field(name) }

func (h *httpRequest) fromHTTP() keyfunc.Request {
	if h.full == nil {
		h.full = keyfunc.FromHTTP(h.r, keyfunc.MaxBodyBytes(h.maxBody))
	}
	return h.full
}
