// Package ratehdr formats the values of the IETF RateLimit-Policy and
// RateLimit fields (draft-ietf-httpapi-ratelimit-headers) and of
// Retry-After from core's decisions, once for every writer of them: the
// HTTP middleware (httplimit, which caches what depends on the policies
// only) and the Envoy rate limit service (cmd/ratekit-server).
package ratehdr

import (
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
)

// DefaultPolicyName is the name of a policy whose Name is empty.
const DefaultPolicyName = "default"

// PolicyName returns p.Name, or DefaultPolicyName when it is empty.
func PolicyName(p core.Policy) string {
	if p.Name == "" {
		return DefaultPolicyName
	}
	return p.Name
}

// SFString returns s as an RFC 9651 sf-string: quoted, with '"' and '\'
// escaped. Bytes an sf-string cannot hold (controls, non-ASCII) become '?'.
func SFString(s string) string {
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

// CeilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// RetryAfterSeconds returns d in whole seconds, rounded up and at least 1:
// the Retry-After value of a denial, as the field cannot say "0" or a
// fraction without telling clients to retry too early.
func RetryAfterSeconds(d time.Duration) int64 {
	if s := CeilSeconds(d); s > 1 {
		return s
	}
	return 1
}

// PolicyMember returns p's RateLimit-Policy member under sfName (an
// sf-string, see SFString): `"name";q=<limit>;w=<window in seconds, at
// least 1>`.
func PolicyMember(sfName string, p core.Policy) string {
	w := max(CeilSeconds(p.Window), 1)
	return sfName + ";q=" + strconv.FormatInt(p.Limit, 10) + ";w=" + strconv.FormatInt(w, 10)
}

// RatePrefix returns the start of a RateLimit member under sfName,
// `"name";r=`, which AppendRate completes.
func RatePrefix(sfName string) string { return sfName + ";r=" }

// AppendRate appends to b a RateLimit member: prefix (see RatePrefix),
// then r, ";t=" and t.
func AppendRate(b []byte, prefix string, r, t int64) []byte {
	b = append(b, prefix...)
	b = strconv.AppendInt(b, r, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, t, 10)
}

// LayerNames returns the layers' names in the fields: each policy's
// PolicyName, except that a name already used by an earlier layer gets
// the first suffix "-2", "-3"... that no layer uses.
func LayerNames(ps []core.Policy) []string {
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

// AppendLayered appends the RateLimit value of a layered decision to b,
// one member per layer of ds, each after its prefix (RatePrefix of the
// layer's name): `"name";r=<r>;t=<t>, ...`. r is the units left, clamped
// to [0, q]; t the seconds until the layer resets. On a denial (denied
// set), a layer that denied has r=0 and t its Retry-After; one that would
// have allowed has its units left and its reset as they are, since the
// request was counted nowhere (its Decision describes the layer as a Peek
// does).
func AppendLayered(b []byte, prefixes []string, ds []core.Decision, denied bool) []byte {
	for i, d := range ds {
		if i > 0 {
			b = append(b, ", "...)
		}
		r, t := d.Remaining, CeilSeconds(d.ResetAfter)
		if denied && !d.Allowed {
			r, t = 0, RetryAfterSeconds(d.RetryAfter)
		}
		r = max(min(r, d.Limit), 0)
		b = AppendRate(b, prefixes[i], r, t)
	}
	return b
}

// Layered returns the RateLimit-Policy and RateLimit values of a layered
// decision, one member per layer of ds (each Decision's Policy names its
// layer; see LayerNames), as AppendLayered says. It formats everything
// anew: a writer of many responses caches what depends on the policies.
func Layered(ds []core.Decision, denied bool) (policy, rate string) {
	ps := make([]core.Policy, len(ds))
	for i, d := range ds {
		ps[i] = d.Policy
	}
	names := LayerNames(ps)
	prefixes := make([]string, len(ds))
	var b strings.Builder
	for i, p := range ps {
		sf := SFString(names[i])
		prefixes[i] = RatePrefix(sf)
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(PolicyMember(sf, p))
	}
	return b.String(), string(AppendLayered(nil, prefixes, ds, denied))
}
