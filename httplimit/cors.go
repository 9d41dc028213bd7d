package httplimit

import (
	"net/http"
	"strings"

	"github.com/ratekit/ratekit/keyfunc"
)

// Preflight reports whether r is a CORS preflight request: OPTIONS with an
// Origin and an Access-Control-Request-Method header. Pass it to
// [WithSkip] to leave preflights uncounted when the CORS middleware that
// answers them runs behind the limit:
//
//	httplimit.WithSkip(httplimit.Preflight)
//
// A client can send those two headers on any OPTIONS request, so a route
// whose own handler serves OPTIONS (one registered for every method) then
// runs it unlimited. Putting the CORS middleware in front of the limit
// instead leaves preflights uncounted with no skip at all (docs/http.md).
func Preflight(r keyfunc.Request) bool {
	return r.Method() == http.MethodOptions && len(r.Header("Origin")) > 0 &&
		len(r.Header("Access-Control-Request-Method")) > 0
}

// The CORS fields the Engine reads and writes, canonical.
const (
	hAllowOrigin   = "Access-Control-Allow-Origin"
	hExposeHeaders = "Access-Control-Expose-Headers"
)

// HeaderReader is a [HeaderWriter] that also reads back the values of a
// field already set on the response, one element per field line, as
// fasthttp's *ResponseHeader does. [Result.WriteHeaders] reads the CORS
// fields through it to expose the rate headers to a browser; through a
// HeaderWriter alone it cannot, and leaves Access-Control-Expose-Headers
// as it is.
type HeaderReader interface {
	HeaderWriter
	PeekAll(name string) [][]byte
}

// exposedNames returns the names of the fields an engine with style writes
// that a browser's script may not read unless they are exposed: Retry-After
// and the rate headers.
func exposedNames(style HeaderStyle) []string {
	names := []string{"Retry-After"}
	if style&IETFHeaders != 0 {
		names = append(names, "RateLimit", "RateLimit-Policy")
	}
	if style&LegacyHeaders != 0 {
		names = append(names, "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
	}
	if style&XRateLimitHeaders != 0 {
		names = append(names, "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
	}
	return names
}

// expose adds the engine's field names to Access-Control-Expose-Headers;
// see [exposeNames].
func (e *Engine) expose(h headerSink) { exposeNames(h, e.exposedNames, e.exposed) }

// exposeNames adds names to Access-Control-Expose-Headers when the
// response is a CORS one, that is when a CORS middleware that ran before
// set Access-Control-Allow-Origin, so that a browser's script sees the
// 429's Retry-After and the rate headers. A name listed already, by that
// middleware or by another limit on the same request, is not added again.
// joined is names as one value, set as it is when the field is absent. A
// response that is no CORS one is left as it is, with nothing allocated.
func exposeNames(h headerSink, names, joined []string) {
	if !h.has(hAllowOrigin) {
		return
	}
	old := h.values(hExposeHeaders)
	if len(old) == 0 {
		h.set(hExposeHeaders, joined)
		return
	}
	var b strings.Builder
	for _, name := range names {
		if listed(old, name) {
			continue
		}
		if b.Len() == 0 {
			for i, v := range old {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(v)
			}
		}
		b.WriteString(", ")
		b.WriteString(name)
	}
	if b.Len() > 0 {
		h.set(hExposeHeaders, []string{b.String()})
	}
}

// listed reports whether name is a member of the comma-separated lists
// values, compared case-insensitively as field names are.
func listed(values []string, name string) bool {
	for _, v := range values {
		for member := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(member), name) {
				return true
			}
		}
	}
	return false
}
