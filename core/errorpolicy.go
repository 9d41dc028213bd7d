package core

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
type ErrorPolicy struct {
	closed   bool
	fallback bool // Fallback was called, possibly with nil
	local    Limiter
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

// Closed reports whether p is [FailClosed].
func (p ErrorPolicy) Closed() bool { return p.closed }

// Local returns the limiter of a [Fallback] policy and true, or nil and
// false for [FailOpen] and [FailClosed]. It lets a limiter or middleware of
// your own honour the policy as ratekit's do.
func (p ErrorPolicy) Local() (Limiter, bool) { return p.local, p.fallback }
