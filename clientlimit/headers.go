package clientlimit

import (
	"net/http"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// The fields a server describes its limits with, as
// [http.CanonicalHeaderKey] spells them.
const (
	hRetryAfter     = "Retry-After"
	hRateLimit      = "Ratelimit"
	hRateLimitPol   = "Ratelimit-Policy"
	hRemaining      = "Ratelimit-Remaining"
	hReset          = "Ratelimit-Reset"
	hXRemaining     = "X-Ratelimit-Remaining"
	hXReset         = "X-Ratelimit-Reset"
	hIdempotencyKey = "Idempotency-Key"
	hXIdempotency   = "X-Idempotency-Key"
)

// The most of a response's rate-limit fields that is read, so that a
// hostile or broken server costs the client a bounded time whatever it
// sends (the work is linear in what is read):
//
//   - of RateLimit and RateLimit-Policy (Lists or Dictionaries, over all
//     their field lines), the first maxMembers members that end within the
//     first maxFieldBytes bytes; the rest is left out, and the field is
//     reported malformed. A server that limits a client with more than
//     64 quotas at once, or needs 8 KiB to say so, does not exist.
//   - of Retry-After and the RateLimit-Remaining / RateLimit-Reset pairs,
//     the first field line, when it is at most maxValueBytes long; a
//     longer one is malformed and ignored.
//
// Leaving the rest of a field out is the safe way for a client to cut it:
// a RateLimit member read can only slow the client down (a longer hold, a
// slower pace), so a prefix slows it down at least as much as ignoring
// the field would; and the members read mean what they meant in the whole
// field (cutList cuts between members). Of RateLimit-Policy, a member
// left out loses its window (as a malformed policy does) or its quota
// unit (its quota is then read as requests: more careful).
const (
	maxMembers    = 64
	maxFieldBytes = 8 << 10
	maxValueBytes = 64
)

// maxHint bounds every time read from a header: a longer one is taken as
// this long (366 days), so that no arithmetic on it overflows.
const maxHint = 366 * 24 * time.Hour

// Magnitudes that tell an X-RateLimit-Reset's unit: below epochSeconds it
// is a number of seconds to wait (no API resets a quota 31 years ahead);
// from epochSeconds (2001-09-09 in Unix seconds) a Unix time in seconds, as
// GitHub and Twitter send it; from epochMillis (in Unix seconds, the year
// 33658) a Unix time in milliseconds.
const (
	epochSeconds = 1_000_000_000
	epochMillis  = 1_000_000_000_000
)

// signals is what one response says about the server's limits.
type signals struct {
	// retryAfter is Retry-After, when present and valid.
	retryAfter    time.Duration
	hasRetryAfter bool
	// exhausted is set when a quota has no units left: none until
	// exhaustedFor (the longest of them).
	exhausted    bool
	exhaustedFor time.Duration
	// interval paces the next requests, until paceFor: the longest t/r
	// over the quotas with r units left until reset t.
	interval time.Duration
	paceFor  time.Duration
	// malformed names the first field that could not be read, ignored.
	malformed string
}

// quota records r units left until t.
func (s *signals) quota(r int64, t time.Duration) {
	switch {
	case t <= 0:
	case r == 0:
		s.exhausted = true
		s.exhaustedFor = max(s.exhaustedFor, t)
	case t/time.Duration(r) > s.interval:
		s.interval, s.paceFor = t/time.Duration(r), t
	}
}

func (s *signals) bad(field string) {
	if s.malformed == "" {
		s.malformed = field
	}
}

// readSignals reads h's rate-limit fields at now. A field that cannot be
// read is ignored and named in malformed.
func readSignals(h http.Header, now time.Time) signals {
	var s signals
	if v := h[hRetryAfter]; len(v) > 0 {
		if d, ok := parseRetryAfter(v[0], now); ok && len(v[0]) <= maxValueBytes {
			s.retryAfter, s.hasRetryAfter = d, true
		} else {
			s.bad(hRetryAfter)
		}
	}
	if v := h[hRateLimit]; len(v) > 0 {
		v, cut := cutList(v, maxMembers, maxFieldBytes)
		pol, polCut := cutList(h[hRateLimitPol], maxMembers, maxFieldBytes)
		if !parseRateLimit(&s, v, pol) || cut {
			s.bad(hRateLimit)
		}
		if polCut {
			s.bad(hRateLimitPol)
		}
	}
	for _, f := range [...][2]string{{hRemaining, hReset}, {hXRemaining, hXReset}} {
		rv, tv := h[f[0]], h[f[1]]
		if len(rv) == 0 || len(tv) == 0 {
			continue
		}
		r, ok := parseCount(rv[0])
		if !ok || len(rv[0]) > maxValueBytes {
			s.bad(f[0])
			continue
		}
		t, ok := parseReset(tv[0], now)
		if !ok || len(tv[0]) > maxValueBytes {
			s.bad(f[1])
			continue
		}
		s.quota(r, t)
	}
	return s
}

// parseRetryAfter reads Retry-After (RFC 9110 10.2.3): delta-seconds or an
// HTTP-date, which is turned into the wait from now (0 when past).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, ok := parseCount(v)
		return seconds(n), ok
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return until(t, now), true
}

// parseCount reads a non-negative decimal integer, saturating far beyond
// any count or time a header means.
func parseCount(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < 1<<53 {
			n = n*10 + int64(c-'0')
		}
	}
	return n, true
}

// seconds returns n seconds, at most maxHint.
func seconds(n int64) time.Duration {
	if n >= int64(maxHint/time.Second) {
		return maxHint
	}
	return time.Duration(n) * time.Second
}

// until returns the wait from now to t: 0 when t is past, at most maxHint.
func until(t, now time.Time) time.Duration {
	d := t.Sub(now)
	return min(max(d, 0), maxHint)
}

// parseReset reads an X-RateLimit-Reset or RateLimit-Reset value: a number
// of seconds, with up to 9 decimals, that is a wait below epochSeconds, a
// Unix time in seconds from there, and a Unix time in milliseconds from
// epochMillis. It returns the wait from now, 0 when the time is past.
func parseReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	whole, frac, hasFrac := strings.Cut(v, ".")
	n, ok := parseCount(whole)
	if !ok || hasFrac && (frac == "" || len(frac) > 9) {
		return 0, false
	}
	var ns int64 // the fraction of a unit, in billionths
	if hasFrac {
		f, ok := parseCount(frac)
		if !ok {
			return 0, false
		}
		for range 9 - len(frac) {
			f *= 10
		}
		ns = f
	}
	switch {
	case n < epochSeconds:
		return min(seconds(n)+time.Duration(ns), maxHint), true
	case n < epochMillis:
		return until(time.Unix(n, ns), now), true
	case n < 1<<53:
		return until(time.UnixMilli(n).Add(time.Duration(ns/1000)), now), true // ns billionths of a millisecond
	}
	return maxHint, true
}

// parseRateLimit reads the IETF RateLimit field (draft-ietf-httpapi-
// ratelimit-headers): a List of the policies' names, each with r, the
// units remaining, and t, the seconds until they reset;
// RateLimit-Policy's w, the policy's window, stands in for a missing t,
// and a policy whose quota unit (qu) is not "requests" is left out. It
// also reads the earlier drafts' Dictionary "limit=100, remaining=50,
// reset=30". It reports false when the field is malformed; members it
// cannot use are skipped.
func parseRateLimit(s *signals, v, policies []string) bool {
	list, err := httpsfv.UnmarshalList(v)
	if err != nil {
		dict, err := httpsfv.UnmarshalDictionary(v)
		if err != nil {
			return false
		}
		r, okR := dictInt(dict, "remaining")
		t, okT := dictInt(dict, "reset")
		if !okR || !okT {
			return false
		}
		s.quota(r, seconds(t))
		return true
	}
	// The policies, read once: at most maxMembers, as cutList leaves them.
	var pols [maxMembers]policy
	np := 0
	if len(policies) > 0 {
		pl, _ := httpsfv.UnmarshalList(policies) // a malformed policy only loses its windows
		for _, pm := range pl {
			p, ok := pm.(httpsfv.Item)
			if !ok || np == len(pols) {
				continue
			}
			qu, hasQU := p.Params.Get("qu")
			w, hasW := paramInt(p.Params, "w")
			pols[np] = policy{itemName(p), hasQU && qu != httpsfv.Token("requests") && qu != "requests", w, hasW}
			np++
		}
	}
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		r, ok := paramInt(it.Params, "r")
		if !ok {
			continue
		}
		name := itemName(it)
		t, hasT := paramInt(it.Params, "t")
		skip := false
		for _, p := range pols[:np] {
			if p.name != name {
				continue
			}
			skip = skip || p.notRequests
			if !hasT {
				t, hasT = p.w, p.hasW
			}
		}
		if !skip && hasT {
			s.quota(r, seconds(t))
		}
	}
	return true
}

// policy is what a RateLimit-Policy member says that parseRateLimit uses.
type policy struct {
	name        string
	notRequests bool // its quota unit (qu) is not requests
	w           int64
	hasW        bool
}

// cutList returns the part of a Structured Field List or Dictionary
// (RFC 9651), given as its field lines, that is read: its first
// maxMembers members, as far as they end within the first maxBytes bytes
// of the lines joined with ", " (as a parser joins them). cut reports
// that members were left out. The prefix ends before a comma that
// separates members, so a parser reads in it the first members of the
// whole field, unchanged. It reads at most maxBytes+1 bytes, and
// allocates only when it cuts.
func cutList(lines []string, maxMembers, maxBytes int) (prefix []string, cut bool) {
	var sc listScanner
	off, members, end := 0, 1, -1 // end: the offset of the last separator
	for i, line := range lines {
		for j := -2; j < len(line); j++ { // j < 0: the ", " before a line
			var c byte
			switch {
			case j >= 0:
				c = line[j]
			case i == 0:
				continue
			case j == -2:
				c = ','
			default:
				c = ' '
			}
			if sc.next(c) {
				if members == maxMembers {
					return joinPrefix(lines, off), true
				}
				members, end = members+1, off
			}
			if off == maxBytes { // and the field goes on
				if end < 0 {
					return nil, true
				}
				return joinPrefix(lines, end), true
			}
			off++
		}
	}
	return lines, false
}

// joinPrefix returns the first n bytes of lines joined with ", ", n at
// most their length.
func joinPrefix(lines []string, n int) []string {
	b := make([]byte, 0, n)
	for i := 0; len(b) < n; i++ {
		if i > 0 {
			b = append(b, ", "[:min(2, n-len(b))]...)
		}
		b = append(b, lines[i][:min(len(lines[i]), n-len(b))]...)
	}
	return []string{string(b)}
}

// listScanner finds the commas that separate the members of a Structured
// Field List or Dictionary: those outside Strings ("...", with \ and \"
// escapes) and Display Strings (%"...", without escapes). In a valid
// field no other comma is outside a string.
type listScanner struct {
	state uint8
	prev  byte // the previous byte outside strings
}

const (
	scanOut uint8 = iota
	scanString
	scanEscape
	scanDisplay
)

// next reads c and reports whether it separates members.
func (s *listScanner) next(c byte) bool {
	switch s.state {
	case scanString:
		switch c {
		case '\\':
			s.state = scanEscape
		case '"':
			s.state = scanOut
		}
	case scanEscape:
		s.state = scanString
	case scanDisplay:
		if c == '"' {
			s.state = scanOut
		}
	default:
		switch c {
		case '"':
			s.state = scanString
			if s.prev == '%' {
				s.state = scanDisplay
			}
		case ',':
			s.prev = c
			return true
		}
		s.prev = c
	}
	return false
}

// itemName returns an item's value as a name: a string or a token.
func itemName(it httpsfv.Item) string {
	switch v := it.Value.(type) {
	case string:
		return v
	case httpsfv.Token:
		return string(v)
	}
	return ""
}

// paramInt returns the non-negative integer parameter k.
func paramInt(p *httpsfv.Params, k string) (int64, bool) {
	if p == nil {
		return 0, false
	}
	v, ok := p.Get(k)
	n, isInt := v.(int64)
	return n, ok && isInt && n >= 0
}

// dictInt returns the non-negative integer member k of d.
func dictInt(d *httpsfv.Dictionary, k string) (int64, bool) {
	m, ok := d.Get(k)
	if !ok {
		return 0, false
	}
	it, ok := m.(httpsfv.Item)
	if !ok {
		return 0, false
	}
	n, ok := it.Value.(int64)
	return n, ok && n >= 0
}
