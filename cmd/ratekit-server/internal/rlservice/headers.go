package rlservice

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/ratehdr"
)

// headers returns the RateLimit-Policy and RateLimit fields (IETF httpapi
// draft) with one member per limit the request was held to, and
// Retry-After when it was denied, formatted as ratekit's HTTP middleware
// formats a layered decision (internal/ratehdr): r is the units left, t
// the seconds until the limit resets; a limit that denied has r=0 and t
// its Retry-After (a limit of requests_per_unit 0: its window). Limits in
// shadow mode are left out.
func headers(items []item, denied bool) []*corev3.HeaderValue {
	ds := make([]core.Decision, 0, len(items))
	var retry time.Duration
	for k := range items {
		it := &items[k]
		if it.limit.Shadow || (it.kind != enforced && it.kind != check && it.kind != denyAll) {
			continue
		}
		d := it.d
		d.Policy, d.Allowed = it.limit.Policy, !it.over
		if it.over {
			if it.kind == denyAll {
				d.RetryAfter = it.limit.Policy.Window
			}
			retry = max(retry, d.RetryAfter)
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		return nil
	}
	policy, rate := ratehdr.Layered(ds, true)
	hs := []*corev3.HeaderValue{
		{Key: "ratelimit-policy", Value: policy},
		{Key: "ratelimit", Value: rate},
	}
	if denied {
		hs = append(hs, &corev3.HeaderValue{Key: "retry-after", Value: strconv.FormatInt(ratehdr.RetryAfterSeconds(retry), 10)})
	}
	return hs
}
