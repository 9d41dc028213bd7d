package connectlimit

import (
	"context"
	"maps"

	"connectrpc.com/connect"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
	"github.com/ratekit/ratekit/internal/rpclimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// An Option configures the interceptor built by [NewInterceptor]. Each
// option's doc says its default, which is what leaving the option out
// gives; a nil option, a nil function given to an option, or
// [WithClock](nil) is a configuration mistake, for which [NewInterceptor]
// panics. They
// are grpclimit's options in Connect's words (a procedure is gRPC's full
// method name) and, where a call has an equivalent, httplimit's: the same
// words mean the same thing.
type Option func(*config)

// config is what the options set: rpclimit's, which grpclimit's options
// set too.
type config struct {
	rpclimit.Config
}

// WithKey sets who is limited: the function that turns a call into the key
// the limiter counts by. It sees the call as a [keyfunc.Request]: the
// peer's address (connect's Peer().Addr) as RemoteAddr, the request's HTTP
// headers as headers, matched case-insensitively, "POST" as the method,
// the procedure ("/pkg.Service/Method") as the route, and no form fields.
// So [keyfunc.Header] keys by an API key, hashed, [keyfunc.Route] joined
// with a caller key limits each procedure apart, and
// keyfunc.ClientIP(keyfunc.TrustProxies(...)) reads X-Forwarded-For from
// the right, only when the peer is a trusted proxy. A key error, including
// finding nothing to key by (an error wrapping [keyfunc.ErrNoKey]),
// refuses the call with [connect.CodeInvalidArgument] and reaches the
// [WithErrorHook] hook, as in HTTP: keying the call by the peer's address
// instead would turn the key's limit into the address's. For anonymous
// callers limited by address, make the key function return
// [keyfunc.PeerIP]'s key when its own finds nothing.
//
// Default: [keyfunc.PeerIP], the peer's address; no header is trusted, so
// a client cannot change its key with X-Forwarded-For.
func WithKey(f keyfunc.Func) Option {
	return func(c *config) { c.Key = f; c.Need("WithKey", f == nil) }
}

// WithProcedures gives procedures limiters of their own, by full
// procedure name ("/pkg.Service/Method"); every other procedure uses the
// limiter given to [NewInterceptor]. Each limiter counts only its own
// procedure's calls. A malformed name or a nil limiter makes
// [NewInterceptor] panic.
//
// Default: every procedure uses the one limiter.
func WithProcedures(m map[string]core.Limiter) Option {
	m = maps.Clone(m)
	return func(c *config) { c.Methods = m }
}

// WithProcedureFunc picks the limiter of a procedure not given by
// [WithProcedures]; nil from f means the limiter given to
// [NewInterceptor]. f is asked once per procedure, at its first call, and
// its answer is kept for the life of the interceptor: procedures are those
// of the handlers built with it, never names clients send, so that is
// bounded. (At most 4,096 procedures keep an answer in any case: those
// first met past that are limited as one procedure, "/*/*", f's answer for
// that name, and the [WithErrorHook] hook is told once.) f must be safe
// for concurrent use.
//
// Default: every procedure not in WithProcedures uses the one limiter.
func WithProcedureFunc(f func(procedure string) core.Limiter) Option {
	return func(c *config) { c.MethodFunc = f; c.Need("WithProcedureFunc", f == nil) }
}

// WithCost sets how many units a call spends (with [WithPerMessage], each
// message of a stream too), such as 10 for a report and 1 for everything
// else. An error, or a cost that is not positive, is the caller's fault: it
// is reported to the [WithErrorHook] hook and the call is refused with
// [connect.CodeInvalidArgument], never served unlimited. A cost above what
// the policy can ever allow is refused with
// [connect.CodeResourceExhausted] and no RetryInfo.
//
// Default: every call costs 1.
func WithCost(f func(ctx context.Context, procedure string) (int64, error)) Option {
	return func(c *config) { c.Cost = f; c.Need("WithCost", f == nil) }
}

// WithSkip sets which calls are not limited at all, such as health checks:
// a call for which f returns true is served without being counted and
// without rate headers.
//
// Default: no call is skipped.
func WithSkip(f func(ctx context.Context, procedure string) bool) Option {
	return func(c *config) { c.Skip = f; c.Need("WithSkip", f == nil) }
}

// WithErrorPolicy sets what a call gets when the limiter fails (a store is
// down or times out): [core.FailOpen], [core.FailClosed] or
// [core.Fallback], as [core.ErrorPolicy] describes. Failing closed, or a
// fallback failing too, answers [connect.CodeUnavailable] with a RetryInfo
// and a Retry-After of the [core.UnavailableError]'s RetryAfter (1 second
// unless a core.Failover's breaker is open). Every such error also reaches
// the [WithErrorHook] hook. It never
// applies to the caller's own faults (a bad key or cost): those are
// refused. core.Fallback(nil) makes [NewInterceptor] panic.
//
// Default: [core.FailOpen]: the call is served, without rate headers.
func WithErrorPolicy(p core.ErrorPolicy) Option {
	return func(c *config) { c.ErrorPolicy = &p }
}

// WithDryRun makes the interceptor decide, count and set rate headers as
// usual, but never refuse: a denied call is reported to f and then served
// (its headers say r=0, without Retry-After), and a leaky bucket's Delay is
// not waited. Use it to try a new limit on live traffic; a function that
// does nothing only sets headers.
//
// Default: off; denied calls get [connect.CodeResourceExhausted].
func WithDryRun(f func(ctx context.Context, procedure string, d core.Decision)) Option {
	return func(c *config) { c.DryRun, c.DryRunFunc = true, f; c.Need("WithDryRun", f == nil) }
}

// WithCountIf counts only the calls whose final code f accepts, such as
// [connect.CodeUnauthenticated] on a login procedure so that only failed
// attempts count. f is given 0 for a call that succeeded (connect has no
// constant for it), and [connect.CodeOf] of the handler's error otherwise
// ([connect.CodeUnknown] for an error that is not a [*connect.Error]).
//
// A call is counted before the handler runs, like any other, and its units
// are given back after the handler when f does not accept the code (the
// limiter must be a [core.Refunder]; [NewInterceptor] panics otherwise).
// So at most Limit calls per key can be in flight or counted at once. With
// [WithPerMessage], only the stream's start is judged; the messages stay
// counted.
//
// Default: every allowed call is counted, before the handler.
func WithCountIf(f func(code connect.Code) bool) Option {
	return func(c *config) { c.CountIf = rpclimit.CountIf(f); c.Need("WithCountIf", f == nil) }
}

// WithErrorHook sets a function called with each error the interceptor
// handled instead of failing the call with it, with the call's context
// and procedure. These errors, and what the call then gets:
//
//   - the limiter's (a store down or timing out, the call's context ending
//     while it is asked): what [WithErrorPolicy] says, served without rate
//     headers by default;
//   - the key function's, a missing key ([keyfunc.ErrNoKey]) included:
//     [connect.CodeInvalidArgument];
//   - the cost function's, or a cost below 1:
//     [connect.CodeInvalidArgument]; a cost above what the policy can ever
//     allow ([core.ErrCostTooHigh]): [connect.CodeResourceExhausted]
//     without RetryInfo;
//   - from [WithProcedureFunc], a limiter that cannot be used:
//     [connect.CodeUnavailable]; and, once, the bound of 4,096 procedures
//     reached: the call is limited as the procedure "/*/*";
//   - with [WithCountIf], a refund that failed after the handler: the call
//     has the handler's answer, and its units stay counted.
//
// It runs on the call's goroutine, before the call is decided (a refund's
// after the handler), so keep it quick (log, count). The error text never
// reaches the client.
//
// Default: errors are not reported.
func WithErrorHook(f func(ctx context.Context, procedure string, err error)) Option {
	return func(c *config) { c.ErrorHook = f; c.Need("WithErrorHook", f == nil) }
}

// WithClock sets the clock the interceptor reads: [WithCountIf] measures
// by it how long the handler took, before a call's units are given back,
// and a [core.FallbackShare] error policy's in-memory limiter decides by
// it. It clocks nothing else: the limiters given keep their own clocks,
// and a leaky bucket's Delay is waited on a real timer. Give it the
// limiter's clock in tests. A nil clk makes [NewInterceptor] panic.
//
// Default: [core.SystemClock].
func WithClock(clk core.Clock) Option {
	return func(c *config) { c.Clock, c.ClockSet = clk, true }
}

// WithPerMessage charges every message a client sends on a stream, as it
// is received, on top of the stream's start. A message the limit refuses
// is not handed to the handler: the stream's Receive returns the refusal,
// a [*connect.Error] like the one a refused call gets, whose Meta holds the
// rate headers (the response headers, sent with the first response, are
// those of the stream's start). Unary calls are charged once either way.
//
// Default: a stream is charged once, at its start.
func WithPerMessage() Option { return func(c *config) { c.PerMessage = true } }

// WithSettle settles a call's cost after its handler ran, as
// httplimit.WithSettle does in HTTP: the call is counted at its cost
// ([WithCost], the estimate) before the handler, and the handler reports
// what it really cost with [SetCost] on the context it is given; using
// less gives the rest back, using more puts the key into debt, which its
// next calls wait out exactly. A handler that panics, or reports nothing,
// is settled at the estimate. The limiter must be a core.Settler (the
// memory store's limiters are); [NewInterceptor] panics otherwise, and with
// [WithPerMessage].
//
// Default: off; a call costs its estimate.
func WithSettle() Option { return func(c *config) { c.Settle = true } }

// SetCost reports n as the actual cost of the call whose context (given
// to its handler, or derived from it) is ctx, for [WithSettle]; it is
// httplimit.SetCost. It reports whether a limit settles the call.
func SetCost(ctx context.Context, n int64) bool { return httplimit.SetCost(ctx, n) }

// WithInFlight caps the calls in flight per key with l: a call takes a
// lease before its limiter is asked and gives it back when the handler
// returns or panics, as httplimit.WithInFlight does in HTTP (the same
// cap for every procedure, by the call's key). A call over the cap is refused
// with ResourceExhausted and a RetryInfo (1 s unless a lease expires
// sooner), and counts nothing in the rate limit; one the rate limit
// refuses holds no lease. It does not go with [WithPerMessage], for which
// [NewInterceptor] panics, nor does a nil l.
//
// Default: no cap on the calls in flight.
func WithInFlight(l inflight.Limiter) Option {
	return func(c *config) { c.InFlight, c.InFlightSet = l, true }
}
