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
		if d, ok := parseRetryAfter(v[0], now); ok {
			s.retryAfter, s.hasRetryAfter = d, true
		} else {
			s.bad(hRetryAfter)
		}
	}
	if v := h[hRateLimit]; len(v) > 0 {
		if !parseRateLimit(&s, v, h[hRateLimitPol]) {
			s.bad(hRateLimit)
		}
	}
	for _, f := range [...][2]string{{hRemaining, hReset}, {hXRemaining, hXReset}} {
		rv, tv := h[f[0]], h[f[1]]
		if len(rv) == 0 || len(tv) == 0 {
			continue
		}
		r, ok := parseCount(rv[0])
		if !ok {
			s.bad(f[0])
			continue
		}
		t, ok := parseReset(tv[0], now)
		if !ok {
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
func parseRateLimit(s *signals, v, policy []string) bool {
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
	var pols httpsfv.List
	if len(policy) > 0 {
		pols, _ = httpsfv.UnmarshalList(policy) // a malformed policy only loses its windows
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
		for _, pm := range pols {
			p, ok := pm.(httpsfv.Item)
			if !ok || itemName(p) != name {
				continue
			}
			if qu, ok := p.Params.Get("qu"); ok && qu != httpsfv.Token("requests") && qu != "requests" {
				skip = true
			}
			if !hasT {
				t, hasT = paramInt(p.Params, "w")
			}
		}
		if !skip && hasT {
			s.quota(r, seconds(t))
		}
	}
	return true
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
