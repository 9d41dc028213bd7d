package core

import (
	"errors"
	"fmt"
)

// An ErrorPolicy says what a request gets when its limiter fails: the store
// is down, times out or sits behind an open circuit breaker. A [Failover]
// applies it ([WithErrorPolicy]), and so does the HTTP middleware
// (httplimit.WithErrorPolicy), which builds on a Failover: one decision,
// made in one place. It never applies to the caller's own errors
// ([CallerError]): those are returned as they are.
//
//   - [FailOpen] (the zero value, and the default): the request is allowed,
//     as a new key would be.
//   - [FailClosed]: the request is refused with an [UnavailableError],
//     never a denial (the caller exceeded nothing). The HTTP middleware
//     answers it with 503 and Retry-After, the RPC interceptors with
//     Unavailable and a RetryInfo.
//   - [Fallback]: a local limiter decides instead. If it fails too, the
//     request is refused as under FailClosed. [FallbackShare] is Fallback
//     to a memory limiter of the limiter's own policy divided among the
//     servers, built by the constructor.
type ErrorPolicy struct {
	closed   bool
	fallback bool // Fallback or FallbackShare was called, possibly with nil
	local    Limiter
	shared   bool // FallbackShare, until resolve builds local
	share    int  // its instances
}

// FailOpen allows every request the limiter cannot decide, so that an
// outage of the store does not become an outage of the service. It is the
// default. For logins and other abuse-prone routes prefer [FailClosed] or
// [Fallback].
func FailOpen() ErrorPolicy { return ErrorPolicy{} }

// FailClosed refuses every request the limiter cannot decide: protection
// first. The refusal is an [UnavailableError], not a denial.
func FailClosed() ErrorPolicy { return ErrorPolicy{closed: true} }

// Fallback has local decide every request the limiter cannot, typically a
// [Memory] limiter at the policy's Limit divided by the number of servers.
// local counts only what it decides, so it starts empty when an outage
// begins. local must not be nil: the constructors taking the policy fail
// otherwise.
func Fallback(local Limiter) ErrorPolicy { return ErrorPolicy{fallback: true, local: local} }

// FallbackShare is [Fallback] to a [Memory] limiter of the limiter's own
// policy shared among instances servers: its Limit and Burst divided by
// instances, rounded down, at least 1, so that while the store is out the
// servers together admit about the policy's limit and never more (unless
// instances exceeds the Limit: each server then admits 1 per window). The
// constructor taking the error policy builds the memory limiter from the
// limiter's Policy method: [NewFailover] from the remote limiter's, on its
// clock ([WithClock]); the HTTP middleware from its limiter's, on its own
// clock. A [NewFailover]'s memory limiter follows the remote's policy: after
// a SetPolicy on the remote limiter, the next request decided locally sets
// it to the share of the new policy, keeping its keys' usage as
// [Memory.SetPolicy] does. instances must be at least 1.
func FallbackShare(instances int) ErrorPolicy {
	return ErrorPolicy{fallback: true, shared: true, share: instances}
}

// resolve returns p ready for l, reading clock (nil: the [SystemClock]):
// a [FallbackShare] becomes [Fallback] to a new [Memory] limiter of l's
// policy shared as it says; any other policy is returned as it is. It fails
// for a FallbackShare when instances is below 1 or l has no valid Policy
// method.
func (p ErrorPolicy) resolve(l Limiter, clock Clock) (ErrorPolicy, error) {
	if !p.shared {
		return p, nil
	}
	if p.share < 1 {
		return p, fmt.Errorf("FallbackShare(%d): at least 1 instance", p.share)
	}
	pol, ok := policyOf(l)
	if !ok {
		return p, errors.New("FallbackShare: the limiter has no Policy to share")
	}
	if clock == nil {
		clock = SystemClock{}
	}
	local, err := New(sharePolicy(pol, p.share), WithClock(clock))
	if err != nil {
		return p, fmt.Errorf("FallbackShare: %w", err)
	}
	r := Fallback(local)
	r.share = p.share // for the Failover to follow the remote's policy
	return r, nil
}

// sharePolicy returns one of instances' share of p: its Limit and Burst
// divided, at least 1 each.
func sharePolicy(p Policy, instances int) Policy {
	p.Limit = max(p.Limit/int64(instances), 1)
	if p.Burst > 0 {
		p.Burst = max(p.Burst/int64(instances), 1)
	}
	return p
}
