package keyfunc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/ratekit/ratekit/internal/bodyfield"
)

// DefaultMaxBodyBytes is how much of a request body [FromHTTP] reads, at
// most, to find a field; see [MaxBodyBytes]. Every adapter's bound
// defaults to it, so that a field reads alike in every framework.
const DefaultMaxBodyBytes = 1 << 20

// An HTTPOption configures the [Request] built by [FromHTTP]. A nil one
// makes the view's Field fail, as FromHTTP says.
type HTTPOption func(*httpConfig)

type httpConfig struct {
	route   func(*http.Request) string
	maxBody int64
}

// RouteFunc sets how the route pattern of a request is found, for routers
// that keep it somewhere other than [http.Request.Pattern], such as chi's
// route context. f returns the pattern without the method, or "" when it is
// unknown.
//
// Default: [http.Request.Pattern], set by [http.ServeMux], with any method
// prefix removed. RouteFunc returns nil when f is nil, which [FromHTTP]
// reports.
func RouteFunc(f func(*http.Request) string) HTTPOption {
	if f == nil {
		return nil
	}
	return func(c *httpConfig) { c.route = f }
}

// MaxBodyBytes sets how many bytes of the body [Request.Field] reads, at
// most, and how many it decodes from an encoded body; a
// larger body is an error wrapping [ErrInvalidKey], and what was not read
// of it is left unread. n <= 0 means the default.
//
// Default: [DefaultMaxBodyBytes] (1 MiB).
func MaxBodyBytes(n int64) HTTPOption {
	return func(c *httpConfig) { c.maxBody = n }
}

// FromHTTP returns the [Request] view of a net/http request. Build it once
// per request, before the handler runs.
//
// Its Field method reads the body at most once, whatever its type (any
// body may be JSON that a handler decodes), up to [MaxBodyBytes], decodes
// it as its Content-Encoding says within the same bound,
// and replaces r.Body with a reader over the bytes read, so the handler
// reads the body as sent, as if it had not been touched. Only a key or
// cost function that asks for a field reads the body.
//
// A nil option is a mistake FromHTTP has no error result to report, and
// the options hold the body's bound: so that a key never comes from a body
// read with a bound other than the one meant, the view's Field fails with
// "keyfunc: FromHTTP: option N is nil", reading nothing, and its other
// methods read the request as they would without that option.
func FromHTTP(r *http.Request, opts ...HTTPOption) Request {
	h := &httpRequest{r: r}
	for i, o := range opts {
		if o == nil {
			if h.err == nil {
				h.err = fmt.Errorf("keyfunc: FromHTTP: option %d is nil", i+1)
			}
			continue
		}
		o(&h.httpConfig)
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	return h
}

type httpRequest struct {
	httpConfig
	r   *http.Request
	err error // a nil option, reported by Field
}

func (h *httpRequest) RemoteAddr() string          { return h.r.RemoteAddr }
func (h *httpRequest) Header(name string) []string { return h.r.Header.Values(name) }
func (h *httpRequest) Method() string              { return h.r.Method }
func (h *httpRequest) Context() context.Context    { return h.r.Context() }

func (h *httpRequest) Route() string {
	if h.route != nil {
		return h.route(h.r)
	}
	// A ServeMux pattern is "[METHOD ][HOST]/[PATH]"; paths and hosts hold
	// no spaces, so anything before a space is the method.
	p := h.r.Pattern
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		p = strings.TrimLeft(p[i:], " \t")
	}
	return p
}

func (h *httpRequest) Field(name string) (string, error) {
	if h.err != nil {
		return "", h.err
	}
	ct := h.r.Header.Get("Content-Type")
	body, err := h.body()
	if err != nil {
		return "", err
	}
	var query string
	if h.r.URL != nil {
		query = h.r.URL.RawQuery
	}
	return bodyfield.Field(ct, body, query, name)
}

// replayBody is the body FromHTTP leaves in place of the one it read: a
// reader over the same bytes. Keeping the bytes lets a second view of the
// same request use them without reading again.
type replayBody struct {
	bytes.Reader
	data []byte // the body as sent
	orig io.Closer
	// decoded is data decoded by bodyfield.Decode within decodedMax bytes.
	decoded    []byte
	decodedMax int64
}

func (b *replayBody) Close() error { return b.orig.Close() }

// body returns the request body decoded, read at most once, and leaves
// r.Body readable from the start, as sent.
func (h *httpRequest) body() ([]byte, error) {
	r := h.r
	rb, ok := r.Body.(*replayBody)
	if !ok || rb.Size() != int64(rb.Len()) { // not read by an earlier view, or read since
		if r.Body == nil || r.Body == http.NoBody {
			return nil, nil
		}
		var err error
		if rb, err = h.read(); err != nil {
			return nil, err
		}
	}
	if rb.decoded != nil && rb.decodedMax == h.maxBody {
		return rb.decoded, nil
	}
	// An earlier view with a larger bound may have read more than this
	// view's bound: Decode checks.
	data, err := bodyfield.Decode(r.Header.Values("Content-Encoding"), rb.data, h.maxBody)
	if err != nil {
		return nil, err
	}
	rb.decoded, rb.decodedMax = data, h.maxBody
	return data, nil
}

// read reads the request body as sent, up to maxBody bytes, and replaces
// r.Body with a replayBody over them. When the body is larger or cannot be
// read, it puts back what it read in front of the rest, so that the
// handler sees the body (or its error) unchanged.
func (h *httpRequest) read() (*replayBody, error) {
	r := h.r
	if r.ContentLength > h.maxBody {
		return nil, fmt.Errorf("%w: request body of %d bytes is larger than %d", ErrInvalidKey, r.ContentLength, h.maxBody)
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, h.maxBody+1))
	if err != nil || int64(len(data)) > h.maxBody {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(data), r.Body), r.Body}
		if err != nil {
			return nil, fmt.Errorf("keyfunc: read request body: %w", err)
		}
		return nil, fmt.Errorf("%w: request body is larger than %d bytes", ErrInvalidKey, h.maxBody)
	}
	rb := &replayBody{data: data, orig: r.Body}
	rb.Reset(data)
	r.Body = rb
	return rb, nil
}
