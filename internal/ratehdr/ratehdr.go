// Package ratehdr formats the values of the IETF RateLimit-Policy and
// RateLimit fields (draft-ietf-httpapi-ratelimit-headers) and of
// Retry-After from core's decisions, once for every writer of them: the
// HTTP middleware (httplimit, which caches what depends on the policies
// only) and the Envoy rate limit service (cmd/ratekit-server).
package ratehdr

import (
	"math/bits"
	"slices"
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
	b = AppendInt(b, r)
	b = append(b, ";t="...)
	return AppendInt(b, t)
}

// AppendInt appends i in decimal to b, as strconv.AppendInt(b, i, 10)
// does. It writes the digits in place, two at a time, without strconv's
// intermediate buffer: a RateLimit value is formatted on every response.
func AppendInt(b []byte, i int64) []byte {
	if i < 0 {
		return strconv.AppendInt(b, i, 10)
	}
	u := uint64(i)
	if u < 10 {
		return append(b, byte('0'+u))
	}
	// The number of digits: log10 from the bit length, corrected by one
	// comparison (1233/4096 is log10(2) from below).
	n := (bits.Len64(u) * 1233) >> 12
	if u >= pow10[n] {
		n++
	}
	l := len(b)
	b = slices.Grow(b, n)[:l+n]
	d := b[l:]
	k := n
	for u >= 10000 {
		q := u / 10000
		r := u - q*10000
		hi, lo := (r/100)*2, (r%100)*2
		k -= 4
		_ = d[k+3]
		d[k], d[k+1], d[k+2], d[k+3] = digitPairs[hi], digitPairs[hi+1], digitPairs[lo], digitPairs[lo+1]
		u = q
	}
	if u >= 100 {
		q := u / 100
		j := (u - q*100) * 2
		k -= 2
		d[k], d[k+1] = digitPairs[j], digitPairs[j+1]
		u = q
	}
	if u >= 10 {
		d[0], d[1] = digitPairs[u*2], digitPairs[u*2+1]
	} else {
		d[0] = byte('0' + u)
	}
	return b
}

// pow10[n] is 10 to the n; digitPairs the two digits of 0 to 99.
var pow10 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

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
