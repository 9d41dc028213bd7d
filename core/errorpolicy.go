package core

import (
	"errors"
	"fmt"
)

// An ErrorPolicy says what a request gets when its limiter fails: the store
// is down, times out or sits behind an open circuit breaker. It is one
// vocabulary for [NewFailover] ([WithErrorPolicy]) and for the HTTP
// middleware (httplimit.WithErrorPolicy). It never applies to the caller's
// own errors ([ErrEmptyKey], [ErrInvalidCost], [ErrCostTooHigh], a context
// the caller ended): those are returned or refused as they are.
//
//   - [FailOpen] (the zero value, and the default): the request is allowed.
//     A Failover answers an allowing Decision; the middleware serves the
//     request without rate headers.
//   - [FailClosed]: the request is refused. A Failover answers a denying
//     Decision whose RetryAfter is the time until the store is tried again
//     (HTTP middleware over it answers 429); the middleware, when the
//     limiter itself fails, answers 503 with Retry-After: 1.
//   - [Fallback]: a local limiter decides instead. If it fails too, a
//     Failover returns its error and the middleware answers 503.
//     [FallbackShare] is Fallback to a memory limiter of the limiter's own
//     policy divided among the servers, built by the constructor.
type ErrorPolicy struct {
	closed   bool
	fallback bool // Fallback or FallbackShare was called, possibly with nil
	local    Limiter
	shared   bool // FallbackShare, until Resolve builds local
	share    int  // its instances
}

// FailOpen allows every request the limiter cannot decide, so that an
// outage of the store does not become an outage of the service. It is the
// default. For logins and other abuse-prone routes prefer [FailClosed] or
// [Fallback].
func FailOpen() ErrorPolicy { return ErrorPolicy{} }

// FailClosed refuses every request the limiter cannot decide: protection
// first. See [ErrorPolicy] for what the refusal looks like.
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
// limiter's Policy method ([ErrorPolicy.Resolve]): [NewFailover] from the
// remote limiter's, reading its clock; the HTTP middleware from its
// limiter's. instances must be at least 1.
func FallbackShare(instances int) ErrorPolicy {
	return ErrorPolicy{fallback: true, shared: true, share: instances}
}

// Resolve returns p ready for l, reading clock (nil: the [SystemClock]):
// a [FallbackShare] becomes [Fallback] to a new [Memory] limiter of l's
// policy shared as it says; any other policy is returned as it is. It fails
// for a FallbackShare when instances is below 1 or l has no valid Policy
// method. The constructors taking an ErrorPolicy call it once; a limiter or
// middleware of your own can too.
func (p ErrorPolicy) Resolve(l Limiter, clock Clock) (ErrorPolicy, error) {
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
	pol.Limit = max(pol.Limit/int64(p.share), 1)
	if pol.Burst > 0 {
		pol.Burst = max(pol.Burst/int64(p.share), 1)
	}
	if clock == nil {
		clock = SystemClock{}
	}
	local, err := New(pol, WithClock(clock))
	if err != nil {
		return p, fmt.Errorf("FallbackShare: %w", err)
	}
	return Fallback(local), nil
}

// Closed reports whether p is [FailClosed].
func (p ErrorPolicy) Closed() bool { return p.closed }

// Local returns the limiter of a [Fallback] policy and true, or nil and
// false for [FailOpen] and [FailClosed]. It lets a limiter or middleware of
// your own honour the policy as ratekit's do. A [FallbackShare] has its
// limiter once resolved ([ErrorPolicy.Resolve]); before, Local returns nil
// and true.
func (p ErrorPolicy) Local() (Limiter, bool) { return p.local, p.fallback }
