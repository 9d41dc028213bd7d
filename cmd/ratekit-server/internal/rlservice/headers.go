package rlservice

import (
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ratekit/ratekit/httplimit"
)

// headers returns the RateLimit-Policy and RateLimit fields (IETF httpapi
// draft) with one member per limit the request was held to, and
// Retry-After when it was denied, as ratekit's HTTP middleware writes them
// for a layered decision: r is the units left, t the seconds until the
// limit resets; a limit that denied has r=0 and t its Retry-After. Limits
// in shadow mode are left out.
//
// The formatting follows httplimit's (its layerHeaders), which is
// unexported there.
func headers(items []item, denied bool) []*corev3.HeaderValue {
	var policy, rate strings.Builder
	var retry time.Duration
	used := make(map[string]bool, len(items))
	n := 0
	for k := range items {
		it := &items[k]
		if it.limit.Shadow || (it.kind != enforced && it.kind != check && it.kind != denyAll) {
			continue
		}
		name := httplimit.PolicyName(it.limit.Policy)
		for i := 2; used[name]; i++ {
			name = httplimit.PolicyName(it.limit.Policy) + "-" + strconv.Itoa(i)
		}
		used[name] = true
		if n > 0 {
			policy.WriteString(", ")
			rate.WriteString(", ")
		}
		n++
		q := it.limit.Policy.Limit
		w := max(ceilSeconds(it.limit.Policy.Window), 1)
		sf := sfString(name)
		policy.WriteString(sf + ";q=" + strconv.FormatInt(q, 10) + ";w=" + strconv.FormatInt(w, 10))
		r, t := max(min(it.d.Remaining, it.d.Limit), 0), ceilSeconds(it.d.ResetAfter)
		if it.over {
			ra := it.d.RetryAfter
			if it.kind == denyAll {
				ra = it.limit.Policy.Window
			}
			r, t = 0, httplimit.RetryAfterSeconds(ra)
			retry = max(retry, ra)
		}
		rate.WriteString(sf + ";r=" + strconv.FormatInt(r, 10) + ";t=" + strconv.FormatInt(t, 10))
	}
	if n == 0 {
		return nil
	}
	hs := []*corev3.HeaderValue{
		{Key: "ratelimit-policy", Value: policy.String()},
		{Key: "ratelimit", Value: rate.String()},
	}
	if denied {
		hs = append(hs, &corev3.HeaderValue{Key: "retry-after", Value: strconv.FormatInt(httplimit.RetryAfterSeconds(retry), 10)})
	}
	return hs
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString returns s as an RFC 9651 sf-string. A policy name holds only
// letters, digits, '-', '_' and '.', which need no escaping.
func sfString(s string) string { return `"` + s + `"` }
