package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/fastbody"
	"github.com/ratekit/ratekit/internal/httpview"
)

// Canonical header names, as [http.CanonicalHeaderKey] spells them, so they
// can be assigned to an [http.Header] directly.
const (
	hRateLimitPolicy = "Ratelimit-Policy"
	hRateLimit       = "Ratelimit"
	hLimit           = "Ratelimit-Limit"
	hRemaining       = "Ratelimit-Remaining"
	hReset           = "Ratelimit-Reset"
	hXLimit          = "X-Ratelimit-Limit"
	hXRemaining      = "X-Ratelimit-Remaining"
	hXReset          = "X-Ratelimit-Reset"
	hRetryAfter      = "Retry-After"
)

// DefaultPolicyName is the name written in the headers and problem bodies
// for a policy whose Name is empty.
const DefaultPolicyName = "default"

// PolicyName returns the name under which p appears in headers and problem
// bodies: p.Name, or [DefaultPolicyName] when it is empty.
func PolicyName(p core.Policy) string {
	if p.Name == "" {
		return DefaultPolicyName
	}
	return p.Name
}

// policyHeaders holds the header values that depend on the policy only,
// computed once per policy. Their one-element slices are assigned to every
// response of the policy as they are, saving an allocation per response:
// http.Header's Set, Add and Del never write into a value slice (Add
// appends to a full one, which copies), so responses cannot see each other's
// changes unless code writes into h[name][0] directly, which nothing in
// net/http or the frameworks does.
type policyHeaders struct {
	policy  core.Policy
	ietf    []string // RateLimit-Policy value
	limit   []string // the Limit, for the triples
	rPrefix string   // `"name";r=`
}

func newPolicyHeaders(p core.Policy) *policyHeaders {
	name := sfString(PolicyName(p))
	w := ceilSeconds(p.Window)
	if w < 1 {
		w = 1
	}
	lim := strconv.FormatInt(p.Limit, 10)
	return &policyHeaders{
		policy:  p,
		ietf:    []string{name + ";q=" + lim + ";w=" + strconv.FormatInt(w, 10)},
		limit:   []string{lim},
		rPrefix: name + ";r=",
	}
}

// sfString returns s as an RFC 9651 sf-string: quoted, with '"' and '\'
// escaped. Bytes an sf-string cannot hold (controls, non-ASCII) become '?'.
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// headersFor returns the per-policy header values of d, cached for the
// policy seen last.
func (e *Engine) headersFor(p core.Policy) *policyHeaders {
	if ph := e.last.Load(); ph != nil && ph.policy == p {
		return ph
	}
	ph := newPolicyHeaders(p)
	e.last.Store(ph)
	return ph
}

// headerSink receives header values: an [http.Header] is assigned directly,
// other frameworks get a [HeaderWriter]. set replaces a field's values; add
// appends to them, for the IETF fields, which are Lists: middleware stacked
// on one request (an app-wide limit and a route's) each add their members.
// has and values read a field already on the response (canonical name),
// for the CORS fields; a sink that cannot read has none.
type headerSink interface {
	set(name string, v []string)
	add(name string, v []string)
	has(name string) bool
	values(name string) []string
}

type httpSink http.Header

func (h httpSink) set(name string, v []string) { h[name] = v }

func (h httpSink) has(name string) bool { return len(h[name]) > 0 && h[name][0] != "" }

func (h httpSink) values(name string) []string { return h[name] }

func (h httpSink) add(name string, v []string) {
	old := h[name]
	if len(old) == 0 {
		h[name] = v
		return
	}
	// Capped, so that appending never writes into a slice the engine shares.
	h[name] = append(old[:len(old):len(old)], v...)
}

// HeaderWriter is where an adapter's framework takes response headers:
// [http.Header] and fasthttp's *ResponseHeader both have these methods.
// Set replaces a field's values, Add appends one.
type HeaderWriter interface {
	Set(name, value string)
	Add(name, value string)
}

type writerSink struct{ w HeaderWriter }

func (s writerSink) set(name string, v []string) {
	for i, x := range v {
		if i == 0 {
			s.w.Set(name, x)
		} else {
			s.w.Add(name, x)
		}
	}
}

func (s writerSink) add(name string, v []string) {
	for _, x := range v {
		s.w.Add(name, x)
	}
}

func (s writerSink) has(name string) bool {
	r, ok := s.w.(HeaderReader)
	if !ok {
		return false
	}
	vs := r.PeekAll(name)
	return len(vs) > 0 && len(vs[0]) > 0
}

func (s writerSink) values(name string) []string {
	r, ok := s.w.(HeaderReader)
	if !ok {
		return nil
	}
	return fastbody.Strings(r.PeekAll(name))
}

// rateLimitValue returns the RateLimit value "name";r=<r>;t=<t>, its bytes
// in the slots' buffer when it is free and large enough, so that the value
// of the default style costs no allocation of its own.
func rateLimitValue(slots *httpview.Slots, prefix string, r, t int64) string {
	if b := slots.Buf(len(prefix) + 2*20 + 3); b != nil {
		b = appendRateLimit(b, prefix, r, t)
		return unsafe.String(&b[0], len(b))
	}
	var buf [96]byte
	return string(appendRateLimit(buf[:0], prefix, r, t))
}

func appendRateLimit(b []byte, prefix string, r, t int64) []byte {
	b = append(b, prefix...)
	b = strconv.AppendInt(b, r, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, t, 10)
}

// writeRateHeaders writes the rate headers of res in the configured
// styles, their value slices in slots when not nil. When denied, remaining
// is 0 and the reset is the Retry-After value. The IETF fields of a
// layered decision list every layer; the triples describe its most
// restrictive layer.
func (e *Engine) writeRateHeaders(h headerSink, res *Result, slots *httpview.Slots) {
	style := e.cfg.headers
	if style == NoHeaders {
		return
	}
	d, denied := res.d, res.denied
	var ph *policyHeaders
	if res.layers != nil {
		lh := e.layerHeadersFor(res.layers)
		ph = lh.single[res.layer]
		if style&IETFHeaders != 0 {
			h.add(hRateLimitPolicy, lh.ietf)
			h.add(hRateLimit, slots.Slice(lh.rateLimitValue(res.layers, denied)))
			style &^= IETFHeaders
		}
	} else {
		ph = e.headersFor(d.Policy)
	}
	r := d.Remaining
	if r > d.Limit {
		r = d.Limit
	}
	if r < 0 || denied {
		r = 0
	}
	delta := d.ResetAfter
	t := ceilSeconds(delta)
	if denied {
		delta = d.RetryAfter
		t = RetryAfterSeconds(delta)
	}
	if style&IETFHeaders != 0 {
		h.add(hRateLimitPolicy, ph.ietf)
		h.add(hRateLimit, slots.Slice(rateLimitValue(slots, ph.rPrefix, r, t)))
	}
	if style&LegacyHeaders != 0 {
		h.set(hLimit, ph.limit)
		h.set(hRemaining, slots.Slice(strconv.FormatInt(r, 10)))
		h.set(hReset, slots.Slice(strconv.FormatInt(t, 10)))
	}
	if style&XRateLimitHeaders != 0 {
		at := e.cfg.clock.Now().Add(delta)
		epoch := at.Unix()
		if at.Nanosecond() != 0 {
			epoch++
		}
		h.set(hXLimit, ph.limit)
		h.set(hXRemaining, slots.Slice(strconv.FormatInt(r, 10)))
		h.set(hXReset, slots.Slice(strconv.FormatInt(epoch, 10)))
	}
}

// layerHeaders holds the header values of a layered limiter that depend on
// its layers' policies only, computed once per list of policies.
type layerHeaders struct {
	policies []core.Policy
	names    []string         // the layers' member names, made unique
	ietf     []string         // RateLimit-Policy, one member per layer
	prefixes []string         // `"name";r=` per layer
	single   []*policyHeaders // per layer, for the triples
}

// layerHeadersFor returns the header values of the layers whose decisions
// are ds, cached for the layers seen last.
func (e *Engine) layerHeadersFor(ds []core.Decision) *layerHeaders {
	if lh := e.lastL.Load(); lh != nil && lh.matches(ds) {
		return lh
	}
	lh := newLayerHeaders(ds)
	e.lastL.Store(lh)
	return lh
}

func (lh *layerHeaders) matches(ds []core.Decision) bool {
	if len(ds) != len(lh.policies) {
		return false
	}
	for i := range ds {
		if ds[i].Policy != lh.policies[i] {
			return false
		}
	}
	return true
}

func newLayerHeaders(ds []core.Decision) *layerHeaders {
	lh := &layerHeaders{
		policies: make([]core.Policy, len(ds)),
		prefixes: make([]string, len(ds)),
		single:   make([]*policyHeaders, len(ds)),
	}
	for i, d := range ds {
		lh.policies[i] = d.Policy
	}
	lh.names = layerNames(lh.policies)
	var b strings.Builder
	for i, p := range lh.policies {
		// The policy renamed, so that every value names the layer alike.
		p.Name = lh.names[i]
		ph := newPolicyHeaders(p)
		lh.single[i] = ph
		lh.prefixes[i] = ph.rPrefix
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(ph.ietf[0])
	}
	lh.ietf = []string{b.String()}
	return lh
}

// layerNames returns the layers' names in headers: each policy's
// [PolicyName], except that a name already used by an earlier layer gets
// the first suffix "-2", "-3"... that no layer uses.
func layerNames(ps []core.Policy) []string {
	names := make([]string, len(ps))
	used := make(map[string]bool, len(ps))
	for _, p := range ps {
		used[PolicyName(p)] = true
	}
	first := make(map[string]bool, len(ps))
	for i, p := range ps {
		name := PolicyName(p)
		if !first[name] {
			first[name] = true
			names[i] = name
			continue
		}
		for k := 2; ; k++ {
			if c := name + "-" + strconv.Itoa(k); !used[c] {
				used[c] = true
				names[i] = c
				break
			}
		}
	}
	return names
}

// rateLimitValue returns the RateLimit value of a layered decision, one
// member per layer of ds: `"name";r=<r>;t=<t>, ...`. r is the units left,
// clamped to [0, q]; t the seconds until the layer resets. On a denial
// (denied set), a layer that denied has r=0 and t its Retry-After; one
// that would have allowed has its units left and its reset as they are,
// since the request was counted nowhere (its Decision describes the layer
// as a Peek does).
func (lh *layerHeaders) rateLimitValue(ds []core.Decision, denied bool) string {
	var buf [160]byte
	b := buf[:0]
	for i, d := range ds {
		if i > 0 {
			b = append(b, ", "...)
		}
		r, t := d.Remaining, ceilSeconds(d.ResetAfter)
		if denied && !d.Allowed {
			r, t = 0, RetryAfterSeconds(d.RetryAfter)
		}
		r = max(min(r, d.Limit), 0)
		b = appendRateLimit(b, lh.prefixes[i], r, t)
	}
	return string(b)
}

// retryAfterValue is Retry-After for a denial.
func retryAfterValue(d time.Duration) []string {
	return []string{strconv.FormatInt(RetryAfterSeconds(d), 10)}
}
