package httplimit

import (
	"bytes"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/fastbody"
	"github.com/ratekit/ratekit/internal/ratehdr"
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
func PolicyName(p core.Policy) string { return ratehdr.PolicyName(p) }

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
	name := ratehdr.SFString(PolicyName(p))
	return &policyHeaders{
		policy:  p,
		ietf:    []string{ratehdr.PolicyMember(name, p)},
		limit:   []string{strconv.FormatInt(p.Limit, 10)},
		rPrefix: ratehdr.RatePrefix(name),
	}
}

// headersFor returns the per-policy header values of d, cached for the
// policy seen last. The values depend on the policy's name, limit and
// window only, which is all that is compared.
func (e *Engine) headersFor(p *core.Policy) *policyHeaders {
	if ph := e.last.Load(); ph != nil && ph.policy.Limit == p.Limit &&
		ph.policy.Window == p.Window && ph.policy.Name == p.Name {
		return ph
	}
	ph := newPolicyHeaders(*p)
	e.last.Store(ph)
	return ph
}

// headerSink receives header values: an [http.Header] is assigned directly,
// other frameworks get a [HeaderWriter]. set replaces a field's values; add
// appends to them, for the IETF fields, which are Lists: middleware stacked
// on one request (an app-wide limit and a route's) each add their members.
// has and values read a field already on the response (canonical name),
// for the CORS fields; a sink that cannot read has none.
//
// setBytes and addBytes take a value being formatted in a buffer of the
// Engine's, which they copy: an http.Header into memory of the value's own
// (see valueSlab), a [HeaderWriter] that takes bytes (fasthttp's) into its
// own buffers, so that the value costs that writer no allocation.
type headerSink interface {
	set(name string, v []string)
	add(name string, v []string)
	setBytes(name string, b []byte)
	addBytes(name string, b []byte)
	has(name string) bool
	values(name string) []string
}

// httpSink writes to an http.Header. It is used through a pointer, into
// the pooled [headerScratch], whose slab its formatted values are carved
// from; with no scratch (sc nil) each value is an allocation of its own.
//
// A header that is empty when the sink is made (fresh), as a response's
// is before any handler ran, holds only what the sink wrote for as long as
// it writes the IETF fields alone: their presence is then known without
// looking, and reading or adding costs no map lookup. Setting any other
// field ends that (it may be one read later, a [WithDenied] response's
// Access-Control-Allow-Origin), and the sink looks from then on.
type httpSink struct {
	h     http.Header
	sc    *headerScratch
	fresh bool       // h holds the IETF fields in wrote, and nothing else
	wrote seenFields // the IETF fields written, while fresh
}

// reset makes s a sink over h, with the scratch sc.
func (s *httpSink) reset(h http.Header, sc *headerScratch) {
	*s = httpSink{h: h, sc: sc, fresh: len(h) == 0}
}

// ietfField returns the seenFields bit of an IETF field's canonical name,
// 0 for any other name.
func ietfField(name string) seenFields {
	switch name {
	case hRateLimit:
		return seenRateLimit
	case hRateLimitPolicy:
		return seenRateLimitPolicy
	}
	return 0
}

func (s *httpSink) set(name string, v []string) { s.setting(name); s.h[name] = v }

func (s *httpSink) setBytes(name string, b []byte) { s.setting(name); s.h[name] = s.value(b) }

// setting records that name is set: a field other than the IETF ones ends
// the fresh header's knowledge.
func (s *httpSink) setting(name string) {
	if f := ietfField(name); f != 0 {
		s.wrote |= f
		return
	}
	s.fresh = false
}

func (s *httpSink) addBytes(name string, b []byte) { s.add(name, s.value(b)) }

func (s *httpSink) has(name string) bool {
	if s.fresh {
		return s.wrote&ietfField(name) != 0
	}
	v := s.h[name]
	return len(v) > 0 && v[0] != ""
}

func (s *httpSink) values(name string) []string {
	if s.fresh && s.wrote&ietfField(name) == 0 {
		return nil
	}
	return s.h[name]
}

func (s *httpSink) add(name string, v []string) {
	if s.fresh {
		if f := ietfField(name); f != 0 && s.wrote&f == 0 {
			s.wrote |= f
			s.h[name] = v
			return
		}
	}
	if name != hRateLimit && name != hRateLimitPolicy {
		s.fresh = false
	}
	old := s.h[name]
	if len(old) == 0 {
		s.h[name] = v
		return
	}
	// Capped, so that appending never writes into a slice the engine shares.
	s.h[name] = append(old[:len(old):len(old)], v...)
}

// value returns b as the value of an http.Header field, in memory of its
// own: carved from the scratch's slab, which is replaced when full.
func (s *httpSink) value(b []byte) []string {
	if s.sc == nil {
		return []string{string(b)}
	}
	return s.sc.value(b)
}

// value returns b as the value of an http.Header field, carved from sc's
// slab, which is replaced when full; a value too long for a slab is
// allocated alone.
func (sc *headerScratch) value(b []byte) []string {
	if len(b) > maxSlabValue {
		return []string{string(b)}
	}
	sl := sc.slab
	if sl == nil || !sl.fits(b) {
		sl = new(valueSlab)
		sc.slab = sl
	}
	return sl.carve(b)
}

// valueSlab is the memory the values of http.Header fields are carved
// from: one-element slices the header holds and the bytes of their
// strings, about 40 responses' RateLimit values in one allocation.
//
// A carved value is written once, when carved, and never again, and a slab
// is never reused once full: an http.Header is read after the middleware
// returns (net/http writes it when the handler has written nothing, a
// recorder or a cache keeps it), so its values must stay as they are for
// as long as anything holds them, which the garbage collector sees to. A
// slab belongs to one pooled scratch at a time, so carving needs no lock;
// readers of a carved value share no memory with the values carved after
// it. The cost of a response kept for long (in a cache) is the slab it
// pins: at most its 2 KiB.
type valueSlab struct {
	s      [slabValues]string
	b      [slabBytes]byte
	ns, nb int // strings and bytes carved
}

const (
	slabValues   = 40
	slabBytes    = 2048 - slabValues*16 - 16
	maxSlabValue = 256 // a longer value is allocated alone
)

func (sl *valueSlab) fits(b []byte) bool {
	return sl.ns < len(sl.s) && len(b) <= len(sl.b)-sl.nb
}

// carve returns b as a one-element slice of sl's memory, capped so that
// appending to it never writes into the next value. sl.fits(b) must hold.
func (sl *valueSlab) carve(b []byte) []string {
	i, n := sl.ns, len(b)
	if n > 0 {
		copy(sl.b[sl.nb:], b)
		sl.s[i] = unsafe.String(&sl.b[sl.nb], n)
	}
	sl.ns++
	sl.nb += n
	return sl.s[i : i+1 : i+1]
}

// HeaderWriter is where an adapter's framework takes response headers:
// [http.Header] and fasthttp's *ResponseHeader both have these methods.
// Set replaces a field's values, Add appends one.
type HeaderWriter interface {
	Set(name, value string)
	Add(name, value string)
}

// bytesHeaderWriter is a [HeaderWriter] that also takes a value as bytes,
// copying them, as fasthttp's *ResponseHeader does.
type bytesHeaderWriter interface {
	SetBytesV(name string, value []byte)
	AddBytesV(name string, value []byte)
}

// canonicalHeaderSetter is a [HeaderWriter] that sets a field whose name
// is already in canonical form without normalizing it again, as fasthttp's
// *ResponseHeader does; every name the Engine writes is canonical.
type canonicalHeaderSetter interface {
	SetCanonical(name, value []byte)
}

// headerVisitor and headerLister are a HeaderWriter that lists the fields
// it holds: fasthttp's *ResponseHeader (VisitAll; All in later versions).
// A writer that lists and sets canonical names is written without its
// normalizing a name on every call: one pass over the response's few
// fields tells which of the engine's are there already. VisitAll is
// preferred: called through an interface, an iterator All returns, or the
// loop body passed to it, is an allocation, which the sink's visit made
// once is not (fasthttp's own VisitAll ranges over All without one).
type (
	headerVisitor interface {
		VisitAll(f func(key, value []byte))
	}
	headerLister interface {
		All() iter.Seq2[[]byte, []byte]
	}
)

// writerSink writes to a HeaderWriter; it is used through a pointer, into
// the pooled [headerScratch], so that passing it costs no allocation.
type writerSink struct {
	sc *headerScratch // the scratch the sink is in, set once
	w  HeaderWriter
	bw bytesHeaderWriter     // w, when it takes bytes
	cs canonicalHeaderSetter // w, when it sets canonical names
	hv headerVisitor         // w, when it visits its fields
	hl headerLister          // w, when it lists them (and does not visit)

	// What one pass over w's fields found, once listed: which of the
	// fields the engine adds to or reads w holds. visit and yield record a
	// field; they are made once per pooled sink, so that passing them
	// costs no allocation.
	listed bool
	seen   seenFields
	visit  func(key, value []byte)
	yield  func(key, value []byte) bool
}

// seenFields are the fields a listing found: the IETF fields (present),
// and Access-Control-Allow-Origin with a first value that is not empty, as
// has reads it.
type seenFields uint8

const (
	seenRateLimit seenFields = 1 << iota
	seenRateLimitPolicy
	seenAllowOrigin
	seenAllowOriginAny // the field is there, its first value read
)

// reset makes s a sink over w (nil: none).
func (s *writerSink) reset(w HeaderWriter) {
	s.w = w
	s.bw, _ = w.(bytesHeaderWriter)
	s.cs, _ = w.(canonicalHeaderSetter)
	s.hv, _ = w.(headerVisitor)
	s.hl = nil
	if s.hv == nil {
		s.hl, _ = w.(headerLister)
	}
	s.listed, s.seen = false, 0
}

// list makes one pass over w's fields, and reports whether w can list them.
func (s *writerSink) list() bool {
	switch {
	case s.listed:
	case s.hv != nil:
		s.hv.VisitAll(s.visit)
	case s.hl != nil:
		s.hl.All()(s.yield)
	default:
		return false
	}
	s.listed = true
	return true
}

// note records field k, of value v, if it is one the sink looks for.
func (s *writerSink) note(k, v []byte) {
	// The names' lengths differ: most fields are told apart by theirs,
	// without comparing their bytes.
	switch len(k) {
	case len(hRateLimit), len(hRateLimitPolicy), len(hAllowOrigin):
	default:
		return
	}
	switch {
	case bytes.EqualFold(k, bytesOf(hRateLimit)):
		s.seen |= seenRateLimit
	case bytes.EqualFold(k, bytesOf(hRateLimitPolicy)):
		s.seen |= seenRateLimitPolicy
	case s.seen&seenAllowOriginAny == 0 && bytes.EqualFold(k, bytesOf(hAllowOrigin)):
		s.seen |= seenAllowOriginAny
		if len(v) > 0 {
			s.seen |= seenAllowOrigin
		}
	}
}

// absent reports whether name is an IETF field w does not hold yet, which
// a canonical set then adds without normalizing the name; it marks the
// field held.
func (s *writerSink) absent(name string) bool {
	var f seenFields
	switch name {
	case hRateLimit:
		f = seenRateLimit
	case hRateLimitPolicy:
		f = seenRateLimitPolicy
	default:
		return false
	}
	if s.cs == nil || !s.list() || s.seen&f != 0 {
		return false
	}
	s.seen |= f
	return true
}

// bytesOf returns s's bytes, for a writer that only reads them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func (s *writerSink) setBytes(name string, b []byte) {
	if s.cs != nil {
		s.cs.SetCanonical(bytesOf(name), b)
		return
	}
	if s.bw != nil {
		s.bw.SetBytesV(name, b)
		return
	}
	s.w.Set(name, string(b))
}

func (s *writerSink) addBytes(name string, b []byte) {
	if s.absent(name) {
		s.cs.SetCanonical(bytesOf(name), b)
		return
	}
	if s.bw != nil {
		s.bw.AddBytesV(name, b)
		return
	}
	s.w.Add(name, string(b))
}

// headerScratch is the memory [Result.WriteHeaders] formats header values
// in and its writerSink, kept in a pool or with an adapter's pooled view
// of the request; one request uses it at a time.
type headerScratch struct {
	buf  [160]byte
	ws   writerSink
	hs   httpSink
	slab *valueSlab // the values of http.Header fields are carved here
	rate rateCache  // the RateLimit value carved last
	rb   rateBytes  // the RateLimit value formatted last, for a HeaderWriter

	// peer and peerKey are the peer address keyed last by the default
	// key function and its key (Result.peerKey).
	peer, peerKey string
}

// rateBytes is rateCache for a [HeaderWriter], which copies the value it
// is given: the value is formatted in b and kept there.
type rateBytes struct {
	ph   *policyHeaders
	r, t int64
	n    int
	b    [96]byte
}

// rateBytes returns the single policy ph's RateLimit value for r and t,
// for a HeaderWriter to copy: the one formatted last when it is the same,
// else formatted anew (and kept, when it fits).
func (sc *headerScratch) rateBytes(ph *policyHeaders, r, t int64) []byte {
	c := &sc.rb
	if c.ph == ph && c.r == r && c.t == t {
		return c.b[:c.n]
	}
	b := ratehdr.AppendRate(c.b[:0], ph.rPrefix, r, t)
	if len(b) > len(c.b) {
		c.ph = nil // formatted elsewhere: not kept
		return b
	}
	c.ph, c.r, c.t, c.n = ph, r, t, len(b)
	return b
}

// rateCache is the RateLimit value of one policy's r and t, carved from a
// slab: written once, never changed, it serves every response of the
// scratch with the same policy, r and t as it is (as the policy's own
// values serve every response of the policy), without formatting or
// carving it again. Clients far below their limits, each on its first
// request of a window, all get the same value.
type rateCache struct {
	ph   *policyHeaders
	r, t int64
	v    []string
}

// rateValue returns the single policy ph's RateLimit value for r and t,
// for an http.Header: the one carved last when it is the same, else carved
// anew.
func (sc *headerScratch) rateValue(ph *policyHeaders, r, t int64) []string {
	if c := &sc.rate; c.ph == ph && c.r == r && c.t == t && c.v != nil {
		return c.v
	}
	v := sc.value(ratehdr.AppendRate(sc.buf[:0], ph.rPrefix, r, t))
	sc.rate = rateCache{ph: ph, r: r, t: t, v: v}
	return v
}

var scratchPool = sync.Pool{New: func() any { return newHeaderScratch() }}

func newHeaderScratch() *headerScratch {
	sc := new(headerScratch)
	sc.ws.sc = sc
	sc.ws.visit = func(k, v []byte) { sc.ws.note(k, v) }
	sc.ws.yield = func(k, v []byte) bool { sc.ws.note(k, v); return true }
	return sc
}

func (s *writerSink) set(name string, v []string) {
	if s.cs != nil && len(v) == 1 {
		s.cs.SetCanonical(bytesOf(name), bytesOf(v[0]))
		return
	}
	for i, x := range v {
		if i == 0 {
			s.w.Set(name, x)
		} else {
			s.w.Add(name, x)
		}
	}
}

func (s *writerSink) add(name string, v []string) {
	if len(v) > 0 && s.absent(name) {
		s.cs.SetCanonical(bytesOf(name), bytesOf(v[0]))
		v = v[1:]
	}
	for _, x := range v {
		s.w.Add(name, x)
	}
}

func (s *writerSink) has(name string) bool {
	if name == hAllowOrigin && s.list() {
		return s.seen&seenAllowOrigin != 0
	}
	r, ok := s.w.(HeaderReader)
	if !ok {
		return false
	}
	vs := r.PeekAll(name)
	return len(vs) > 0 && len(vs[0]) > 0
}

func (s *writerSink) values(name string) []string {
	r, ok := s.w.(HeaderReader)
	if !ok {
		return nil
	}
	return fastbody.Strings(r.PeekAll(name))
}

// writeRateHeaders writes the rate headers of res in the configured
// styles, formatting the values that change per request in buf. When denied, remaining
// is 0 and the reset is the Retry-After value. The IETF fields of a
// layered decision list every layer; the triples describe its most
// restrictive layer.
func (e *Engine) writeRateHeaders(h headerSink, res *Result, buf []byte) {
	style := e.cfg.headers
	if style == NoHeaders {
		return
	}
	d, denied := &res.d, res.denied
	var ph *policyHeaders
	if res.layers != nil {
		lh := e.layerHeadersFor(res.layers)
		ph = lh.single[res.layer]
		if style&IETFHeaders != 0 {
			h.add(hRateLimitPolicy, lh.ietf)
			h.addBytes(hRateLimit, lh.appendRateLimit(buf[:0], res.layers, denied))
			style &^= IETFHeaders
		}
	} else {
		ph = e.headersFor(&d.Policy)
	}
	r, t, delta := rateOf(d, denied)
	if style&IETFHeaders != 0 {
		h.add(hRateLimitPolicy, ph.ietf)
		switch s := h.(type) {
		case *httpSink:
			if s.sc != nil {
				s.add(hRateLimit, s.sc.rateValue(ph, r, t))
				break
			}
			s.addBytes(hRateLimit, ratehdr.AppendRate(buf[:0], ph.rPrefix, r, t))
		case *writerSink:
			// The writer copies the bytes (or makes a string of them).
			s.addBytes(hRateLimit, s.sc.rateBytes(ph, r, t))
		default:
			h.addBytes(hRateLimit, ratehdr.AppendRate(buf[:0], ph.rPrefix, r, t))
		}
	}
	if style&LegacyHeaders != 0 {
		h.set(hLimit, ph.limit)
		h.setBytes(hRemaining, strconv.AppendInt(buf[:0], r, 10))
		h.setBytes(hReset, strconv.AppendInt(buf[:0], t, 10))
	}
	if style&XRateLimitHeaders != 0 {
		at := e.cfg.clock.Now().Add(delta)
		epoch := at.Unix()
		if at.Nanosecond() != 0 {
			epoch++
		}
		h.set(hXLimit, ph.limit)
		h.setBytes(hXRemaining, strconv.AppendInt(buf[:0], r, 10))
		h.setBytes(hXReset, strconv.AppendInt(buf[:0], epoch, 10))
	}
}

// rateOf returns the units left and the seconds until reset that the rate
// headers give for d, and the time to that reset: when denied, 0 and the
// Retry-After.
func rateOf(d *core.Decision, denied bool) (r, t int64, delta time.Duration) {
	r = d.Remaining
	if r > d.Limit {
		r = d.Limit
	}
	if r < 0 || denied {
		r = 0
	}
	if denied {
		return r, RetryAfterSeconds(d.RetryAfter), d.RetryAfter
	}
	return r, ceilSeconds(d.ResetAfter), d.ResetAfter
}

// writeFresh writes the headers of a request served on a single policy's
// allowance, in the default style, to a response whose headers are empty,
// as most are when the limit runs: the two IETF fields, set, without the
// general path's lookups (no field is there to add to, and no CORS field
// to expose the names in). It reports false, writing nothing, for every
// other request or response, which the general path writes.
func (r *Result) writeFresh(h http.Header, sc *headerScratch) bool {
	e := r.e
	if len(h) != 0 || !r.serve || !r.rate || r.denied || r.layers != nil || e.cfg.headers != IETFHeaders {
		return false
	}
	d := &r.d
	ph := e.last.Load()
	if ph == nil || ph.policy.Limit != d.Policy.Limit || ph.policy.Window != d.Policy.Window || ph.policy.Name != d.Policy.Name {
		ph = e.headersFor(&d.Policy)
	}
	rem := max(min(d.Remaining, d.Limit), 0)
	h[hRateLimitPolicy] = ph.ietf
	h[hRateLimit] = sc.rateValue(ph, rem, ceilSeconds(d.ResetAfter))
	return true
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
// are ds, cached in one of the engine's slots, picked by the layers'
// count and first policy: a limiter whose requests meet a few lists of
// layers (a rule set's rules) keeps each list's values, most of the time
// in a slot of its own. A list meeting another in its slot costs them
// both their values' building again.
func (e *Engine) layerHeadersFor(ds []core.Decision) *layerHeaders {
	p := &ds[0].Policy
	slot := &e.lastL[(uint(len(ds))*7+uint(p.Limit)*3+uint(len(p.Name))+uint(p.Window>>20))%uint(len(e.lastL))]
	if lh := slot.Load(); lh != nil && lh.matches(ds) {
		return lh
	}
	lh := newLayerHeaders(ds)
	slot.Store(lh)
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
	lh.names = ratehdr.LayerNames(lh.policies)
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

// appendRateLimit appends the RateLimit value of a layered decision to b,
// one member per layer of ds (ratehdr.AppendLayered).
func (lh *layerHeaders) appendRateLimit(b []byte, ds []core.Decision, denied bool) []byte {
	return ratehdr.AppendLayered(b, lh.prefixes, ds, denied)
}

// retryAfterValue is Retry-After for a denial.
func retryAfterValue(d time.Duration) []string {
	return []string{strconv.FormatInt(RetryAfterSeconds(d), 10)}
}
