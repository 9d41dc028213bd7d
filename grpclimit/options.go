package grpclimit

import (
	"context"
	"maps"

	"google.golang.org/grpc/codes"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
	"github.com/ratekit/ratekit/internal/rpclimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// An Option configures [UnaryServerInterceptor] and
// [StreamServerInterceptor]; both take every option ([WithPerMessage]
// means nothing to unary calls). Each option's doc says its default, which
// is what leaving the option out gives; a nil option, a nil function given
// to an option, or [WithClock](nil) is a configuration mistake, for which
// the constructors panic. A later option replaces an earlier one of the
// same kind. The options are [httplimit]'s vocabulary in gRPC terms: see
// its options for the full behaviour.
type Option func(*config)

// config is what the options set: the interceptors share their options
// and their behaviour with connectlimit's, in package rpclimit.
type config = rpclimit.Config

// WithKey sets who is limited: the function that turns a call into the key
// the limiter counts by. Key functions see the peer's address as the
// remote address, the request metadata as headers (lowercase keys, as
// gRPC has them) and the full method name ("/pkg.Service/Method") as the
// route ([UnknownMethod] for a method the server does not serve):
// [keyfunc.Header] for an API key (hashed), [keyfunc.Route] for the
// method, [keyfunc.Join] for both. A key error, including finding
// nothing to key by (an error wrapping [keyfunc.ErrNoKey], such as a
// missing authorization entry), refuses the call with InvalidArgument and
// reaches the [WithErrorHook] hook, as in HTTP: keying the call by the
// peer's address instead would turn the key's limit into the address's.
// For anonymous callers limited by address, make the key function return
// [keyfunc.PeerIP]'s key when its own finds nothing.
//
// Default: [keyfunc.PeerIP], the peer's address; no metadata is trusted.
// Behind a proxy that appends to x-forwarded-for, pass
// [keyfunc.ClientIP]([keyfunc.TrustProxies](...)): it reads the metadata
// from the right, and only when the peer is a trusted proxy. A server on a
// Unix socket, whose peers have no IP address, needs a key of its own.
func WithKey(f keyfunc.Func) Option {
	return func(c *config) { c.Key = f; c.Need("WithKey", f == nil) }
}

// WithMethods gives methods limits of their own: the limiter of each full
// method name ("/pkg.Service/Method") in m counts that method's calls
// apart from every other method's. The map is copied; a name that is not a
// full method name, or a nil limiter, makes the interceptor constructors
// panic.
//
// A method named here is limited by its own name even when the server does
// not serve it, as behind a grpc.UnknownServiceHandler that proxies it:
// that is how a proxy limits a backend's methods apart. [UnknownMethod]
// names the limiter of every other method the server does not serve.
//
// Default: every method uses the interceptor's limiter, sharing its count.
func WithMethods(m map[string]core.Limiter) Option {
	m = maps.Clone(m)
	return func(c *config) { c.Methods = m }
}

// WithMethodFunc gives methods limits of their own, picked by f for each
// method not in [WithMethods] (f is asked once per method, on its first
// call, and its answer kept); nil from f means the interceptor's limiter.
// The methods are those the server serves: f is asked once, with
// [UnknownMethod], for all the calls a grpc.UnknownServiceHandler gets, so
// what it keeps is bounded by the server's methods, whatever names clients
// send. At most 4,096 methods keep an answer in any case; a method first
// met past that is limited as UnknownMethod, and the [WithErrorHook] hook
// is told once. A limiter from f that
// cannot be used (with [WithCountIf], one that cannot give units back) is
// reported to the [WithErrorHook] hook, and that method's calls are
// refused with Unavailable.
//
// Default: every method not in WithMethods uses the interceptor's limiter.
func WithMethodFunc(f func(fullMethod string) core.Limiter) Option {
	return func(c *config) { c.MethodFunc = f; c.Need("WithMethodFunc", f == nil) }
}

// WithCost sets how many units a call spends (with [WithPerMessage], each
// message too). An error or a cost that is not positive is the call's
// fault: it is reported to the [WithErrorHook] hook and refused with
// InvalidArgument, never served unlimited. A cost above what the policy can
// ever allow is refused with ResourceExhausted and no RetryInfo.
//
// Default: every call costs 1.
func WithCost(f func(ctx context.Context, fullMethod string) (int64, error)) Option {
	return func(c *config) { c.Cost = f; c.Need("WithCost", f == nil) }
}

// WithSkip sets which calls are not limited at all, such as health checks:
// a call for which f returns true is served without being counted and
// without rate metadata.
//
// Default: no call is skipped.
func WithSkip(f func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) { c.Skip = f; c.Need("WithSkip", f == nil) }
}

// WithErrorPolicy sets what a call gets when the limiter fails (a store is
// down or times out): [core.FailOpen], [core.FailClosed] or
// [core.Fallback], as [core.ErrorPolicy] describes. Failing closed, or a
// fallback failing too, is Unavailable with a RetryInfo of the
// [core.UnavailableError]'s RetryAfter (1 second unless a core.Failover's
// breaker is open). Every such error also reaches the [WithErrorHook]
// hook. It never applies to the call's own faults (an invalid key, a bad
// cost): those are refused.
//
// Default: [core.FailOpen]: the call is served, without rate metadata.
func WithErrorPolicy(p core.ErrorPolicy) Option {
	return func(c *config) { c.ErrorPolicy = &p }
}

// WithDryRun makes the interceptors decide, count and set rate metadata as
// usual, but never refuse: a denied call is reported to f and then served
// (without retry-after), and a leaky bucket's Delay is not waited. Use it
// to try a new limit on live traffic; a function that does nothing only
// sets metadata.
//
// Default: off; denied calls are refused.
func WithDryRun(f func(ctx context.Context, fullMethod string, d core.Decision)) Option {
	return func(c *config) { c.DryRun, c.DryRunFunc = true, f; c.Need("WithDryRun", f == nil) }
}

// WithCountIf counts only the calls whose status code f accepts, such as
// [Failures] on a login method so that only failed attempts count.
//
// A call is counted before the handler runs, like any other, and its units
// are given back after the handler when f does not accept the code it
// returned (the limiter must be a [core.Refunder]; the constructors panic
// otherwise). So at most the limit's calls per key can be in flight or
// counted at once. A stream's code is the one it ends with; with
// [WithPerMessage], its messages are judged by that code too.
//
// Default: every allowed call is counted, before the handler.
func WithCountIf(f func(code codes.Code) bool) Option {
	return func(c *config) { c.CountIf = rpclimit.CountIf(f); c.Need("WithCountIf", f == nil) }
}

// Failures reports whether code is an error (any code but OK), for
// [WithCountIf].
func Failures(code codes.Code) bool { return code != codes.OK }

// WithErrorHook sets a function called with each error the interceptor
// handled instead of failing the call with it, with the call's context
// and full method name ([UnknownMethod] for a method the server does not
// serve). These errors, and what the call then gets:
//
//   - the limiter's (a store down or timing out, the call's context ending
//     while it is asked): what [WithErrorPolicy] says, served without rate
//     metadata by default;
//   - the key function's, a missing key ([keyfunc.ErrNoKey]) included:
//     InvalidArgument;
//   - the cost function's, or a cost below 1: InvalidArgument; a cost above
//     what the policy can ever allow ([core.ErrCostTooHigh]):
//     ResourceExhausted without RetryInfo;
//   - from [WithMethodFunc], a limiter that cannot be used: Unavailable;
//     and, once, the bound of 4,096 methods reached: the call is limited
//     as [UnknownMethod];
//   - with [WithCountIf], a refund that failed after the handler: the call
//     has the handler's answer, and its units stay counted.
//
// It runs on the call's goroutine, before the call is decided (a refund's
// after the handler), so keep it quick (log, count). The error text never
// reaches the client.
//
// Default: errors are not reported.
func WithErrorHook(f func(ctx context.Context, fullMethod string, err error)) Option {
	return func(c *config) { c.ErrorHook = f; c.Need("WithErrorHook", f == nil) }
}

// WithClock sets the clock the interceptors read: [WithCountIf] measures
// by it how long the handler took, before a call's units are given back,
// and a [core.FallbackShare] error policy's in-memory limiter decides by
// it. It clocks nothing else: the limiters given keep their own clocks,
// and a leaky bucket's Delay is waited on a real timer. Give it the
// limiter's clock in tests. A nil clk makes the constructors panic.
//
// Default: [core.SystemClock].
func WithClock(clk core.Clock) Option {
	return func(c *config) { c.Clock, c.ClockSet = clk, true }
}

// WithPerMessage makes [StreamServerInterceptor] charge every message the
// client sends, when the handler receives it, as well as the stream's
// start; see StreamServerInterceptor for a refused message. Unary calls
// are one message, charged once, with or without it.
//
// Default: a stream is charged once, when it starts.
func WithPerMessage() Option { return func(c *config) { c.PerMessage = true } }

// WithSettle settles a call's cost after its handler ran, as
// httplimit.WithSettle does in HTTP: the call is counted at its cost
// ([WithCost], the estimate) before the handler, and the handler reports
// what it really cost with [SetCost] on the context it is given; using
// less gives the rest back, using more puts the key into debt, which its
// next calls wait out exactly. A handler that panics, or reports nothing,
// is settled at the estimate. The limiter must be a core.Settler (the
// memory store's limiters are); the constructors panic otherwise, and with
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
// cap for every method, by the call's key). A call over the cap is refused
// with ResourceExhausted and a RetryInfo (1 s unless a lease expires
// sooner), and counts nothing in the rate limit; one the rate limit
// refuses holds no lease. It does not go with [WithPerMessage], for which
// the constructors panic, nor does a nil l.
//
// Default: no cap on the calls in flight.
func WithInFlight(l inflight.Limiter) Option {
	return func(c *config) { c.InFlight, c.InFlightSet = l, true }
}
