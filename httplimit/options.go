package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/inflight"
	"github.com/ratekit/ratekit/keyfunc"
)

// An Option configures the middleware built by [New] and by every adapter
// (ginlimit, echolimit, echo5limit, chilimit, fiberlimit, fiber3limit): the options are one
// vocabulary, the same names in every framework. Each option's doc says its
// default, which is what leaving the option out gives; a nil function is a
// configuration mistake, for which [New] fails.
type Option func(*config)

type config struct {
	key       keyfunc.Func
	cost      func(keyfunc.Request) (int64, error)
	skip      func(keyfunc.Request) bool
	denied    func(keyfunc.Request, core.Decision) Response
	onError   core.ErrorPolicy
	errorHook func(keyfunc.Request, error)
	dryRun    func(keyfunc.Request, core.Decision)
	headers   HeaderStyle
	countIf   func(status int) bool
	settle    bool
	noKey     KeyPolicy
	badKey    KeyPolicy
	clock     core.Clock
	maxBody   int64
	lockout   *core.Lockout
	inflight  inflight.Limiter
	errs      []error // invalid options, reported by New

	// keyGiven and onErrorGiven record WithKey and WithErrorPolicy, which
	// a RequestLimiter refuses.
	keyGiven, onErrorGiven bool
}

// WithKey sets who is limited: the function that turns a request into the
// key the limiter counts by, such as [keyfunc.ClientIP] behind trusted
// proxies, [keyfunc.Header] for an API key, or [keyfunc.Route] joined with a
// caller key. A key error wrapping [keyfunc.ErrNoKey] is handled as
// [WithNoKey] says; any other key error as [WithInvalidKey] says.
//
// [New] fails if f is nil, which is what a keyfunc constructor returns for
// a configuration it cannot build (such as [keyfunc.Join] of nothing).
//
// Default: [keyfunc.PeerIP], the socket peer's address; no header is
// trusted, so a client cannot change its key with X-Forwarded-For.
func WithKey(f keyfunc.Func) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, errors.New("httplimit: WithKey(nil): a key function is required (a keyfunc constructor returns nil for a configuration it cannot build)"))
		}
		c.key = f
	}
}

// WithCost sets how many units a request spends, such as 50 for an export
// and 1 for everything else. An error, or a cost that is not positive, is
// the request's fault (a cost parsed from a query parameter, say): it is
// reported to the [WithErrorHook] hook and refused with 400
// [ProblemInvalidCost], never served unlimited. A cost above what the
// policy can ever allow is refused with [ProblemCostTooHigh].
//
// Default: every request costs 1.
func WithCost(f func(keyfunc.Request) (int64, error)) Option {
	return func(c *config) { c.cost = f; c.need("WithCost", f == nil) }
}

// WithSkip sets which requests are not limited at all, such as health checks
// or an allowlist of internal addresses: a request for which f returns true
// is served without being counted and without rate headers.
//
// Default: no request is skipped.
func WithSkip(f func(keyfunc.Request) bool) Option {
	return func(c *config) { c.skip = f; c.need("WithSkip", f == nil) }
}

// WithDenied replaces the response to a request denied by the limiter (the
// default is 429 with a [ProblemRateLimited] problem+json body). f returns
// the response to write instead; the rate headers, Retry-After and
// Cache-Control: no-store are still set, and the Header of f's response is
// set over them. The handler is not called either way. f is not called for
// the other refusals (cost too high, invalid key, limiter unavailable).
//
// Default: [DeniedResponse].
func WithDenied(f func(r keyfunc.Request, d core.Decision) Response) Option {
	return func(c *config) { c.denied = f; c.need("WithDenied", f == nil) }
}

// WithErrorPolicy sets what a request gets when the limiter fails (a store
// is down or times out): [core.FailOpen], [core.FailClosed] or
// [core.Fallback], as [core.ErrorPolicy] describes. The middleware decides
// it by a [core.Failover] over the limiter, without a circuit breaker
// (give it a Failover of your own for one): a [core.UnavailableError],
// from failing closed or a fallback failing too, here or in a Failover
// given as the limiter, is a 503 [ProblemUnavailable] with the error's
// RetryAfter as Retry-After (1 s unless a breaker is open). Every such
// error also reaches the [WithErrorHook] hook with the request. It never
// applies to the request's own faults ([core.CallerError]: no key, a bad
// cost): those are refused.
//
// Default: [core.FailOpen]: the request is served, without rate headers.
func WithErrorPolicy(p core.ErrorPolicy) Option {
	return func(c *config) { c.onError, c.onErrorGiven = p, true }
}

// WithErrorHook sets a function that receives every error met while
// limiting a request: limiter and store errors, cost function errors, and
// every key error, whatever [WithNoKey] or [WithInvalidKey] then did with
// the request; one served all the same, by its fallback key or unlimited,
// is reported with an error wrapping [ErrKeyFallback] (and the key
// function's error), so fallbacks can be counted. It
// runs on the request's goroutine before the response is decided, so keep it
// quick (log, count). The error text never reaches the client.
//
// Default: errors are not reported.
func WithErrorHook(f func(r keyfunc.Request, err error)) Option {
	return func(c *config) { c.errorHook = f; c.need("WithErrorHook", f == nil) }
}

// WithDryRun makes the middleware decide, count and set rate headers as
// usual, but never block: a denied request is reported to f and then served
// (without Retry-After), and a leaky bucket's Delay is not waited. Use it to
// try a new limit on live traffic; a function that does nothing only sets
// headers.
//
// Default: off; denied requests get 429.
func WithDryRun(f func(r keyfunc.Request, d core.Decision)) Option {
	return func(c *config) { c.dryRun = f; c.need("WithDryRun", f == nil) }
}

// WithHeaders sets which rate headers are written on allowed and denied
// responses; several styles may be combined, such as
// WithHeaders([IETFHeaders], [XRateLimitHeaders]), and WithHeaders([NoHeaders])
// or WithHeaders() writes none. Retry-After is written on every 429 and 503
// whatever the style.
//
// Default: [IETFHeaders].
func WithHeaders(styles ...HeaderStyle) Option {
	return func(c *config) {
		var s HeaderStyle
		for _, st := range styles {
			if st&^allHeaders != 0 {
				c.errs = append(c.errs, errors.New("httplimit: WithHeaders: unknown header style"))
			}
			s |= st
		}
		c.headers = s
	}
}

// WithCountIf counts only the requests whose response status f accepts, such
// as [Failures] on a login route so that only failed attempts count.
//
// A request is counted before the handler runs, like any other, and its
// units are given back after the handler when f does not accept the status
// (the limiter must be a [core.Refunder]; [New] fails otherwise). So at
// most Limit requests per key can be in flight or counted at once: checking
// first and counting afterwards would let every parallel attempt through
// the check. The rate headers describe the state with this request counted.
//
// Default: every allowed request is counted, before the handler.
func WithCountIf(f func(status int) bool) Option {
	return func(c *config) { c.countIf = f; c.need("WithCountIf", f == nil) }
}

// WithBlock refuses a key for a while after it breaks its limit: each
// denial locks the key in lockout, for longer while denials repeat, and a
// locked key gets a 429 with the lock's time left as its Retry-After,
// counting nothing. With [WithCountIf], the denial that locks is the one
// that finds the counted requests (failed logins, say) at the limit. It
// wraps the limiter in a [core.Blocking], whose doc has the details; the
// lockout's limiters decide where the locks live (core.New for this
// process, redisstore.New for every server). [New] fails if lockout is
// nil, or for a rule set ([RequestLimiter]).
//
// Default: no block; a key is let in again as soon as its limit allows.
func WithBlock(lockout *core.Lockout) Option {
	return func(c *config) {
		if lockout == nil {
			c.errs = append(c.errs, errors.New("httplimit: WithBlock(nil): a lockout is required"))
		}
		c.lockout = lockout
	}
}

// Failures reports whether status is an error (400 or above), for
// [WithCountIf].
func Failures(status int) bool { return status >= http.StatusBadRequest }

// WithNoKey sets what a request gets when the key function finds nothing to
// key by (an error wrapping [keyfunc.ErrNoKey], such as a login body
// without its email field or a missing API key header): [RefuseKey]
// answers 400 with a [ProblemInvalidKey] body, [FallbackKey] keys it by
// another function, [SkipKey] serves it unlimited. Every such request is
// reported to the [WithErrorHook] hook, a served one with an error
// wrapping [ErrKeyFallback].
//
// Keying a request by something else than its key function asked for
// changes what is limited: an account's limit becomes an address's, so a
// client that leaves out (or hides) its account gets a fresh limit per
// address. Name a fallback only where that is what you want, such as
// anonymous clients of an API keyed by [keyfunc.Header]:
// WithNoKey(FallbackKey([keyfunc.PeerIP])).
//
// Default: [RefuseKey], whatever the key function.
func WithNoKey(p KeyPolicy) Option { return func(c *config) { c.noKey = p } }

// WithInvalidKey sets what a request gets when the key function reports any
// other error, such as one wrapping [keyfunc.ErrInvalidKey] (an email
// address with a zero-width space) or an unreadable body. Letting such a
// request through unlimited would let a client escape its limit by sending
// malformed input, hence the default.
//
// Default: [RefuseKey]: 400 with a [ProblemInvalidKey] body.
func WithInvalidKey(p KeyPolicy) Option { return func(c *config) { c.badKey = p } }

// WithClock sets the clock the middleware reads: for the epoch time of
// X-RateLimit-Reset ([XRateLimitHeaders]), the only absolute time it
// writes; with [WithCountIf], to measure how long the handler took before
// a request is given back; and as the clock of the local limiter a
// [core.FallbackShare] error policy builds. It does not clock the limiter
// the middleware enforces, which has its own: give both the same clock in
// tests. [New] fails if clk is nil.
//
// Default: [core.SystemClock].
func WithClock(clk core.Clock) Option { return func(c *config) { c.clock = clk } }

// WithMaxBodyBytes bounds the request body a key function may read to find
// a field ([keyfunc.Email], a form or JSON field): at most n bytes as sent
// and at most n after decoding a gzip or deflate Content-Encoding, so that a
// small compressed body cannot inflate into memory before the limit
// decides. A body over the bound, or in another encoding, is refused as
// [WithInvalidKey] says. 0 means the default; [New] fails if n is negative.
//
// Default: [keyfunc.DefaultMaxBodyBytes] (1 MiB).
func WithMaxBodyBytes(n int64) Option {
	return func(c *config) {
		c.maxBody = n
		if n < 0 {
			c.errs = append(c.errs, fmt.Errorf("httplimit: WithMaxBodyBytes(%d): must not be negative", n))
		}
	}
}

// WithInFlight caps the requests in flight per key with l: a request
// takes a lease from l, by the request's key ([WithKey]), before the rate
// limit is asked, and gives it back when the handler returns or panics.
// The two decide together, all or nothing: a request refused by the cap
// counts nothing in the rate limit, which is not asked, and one the rate
// limit refuses (or a limit stacked inside this one: [Result.After])
// gives its lease back at once, so a refused request holds neither.
//
// A request refused by the cap gets 429 Too Many Requests with
// Retry-After (the [inflight.Decision]'s RetryAfter in whole seconds,
// rounded up: 1 s unless a lease expires sooner), Cache-Control: no-store
// and a [ProblemInFlight] body, without rate headers, since the rate
// limit decided nothing; a [WithDenied] function is not called for it. It
// is a 429, not a 503: the key's own requests fill its cap. In a dry run
// ([WithDryRun]) it is reported to the dry-run function, as a Decision
// with the cap as its Limit and the RetryAfter, and served without a
// lease.
//
// When l fails (a store outage), the error reaches the [WithErrorHook]
// hook and the request is served without a lease, the rate limit still
// deciding it, unless the error policy is [core.FailClosed]: then it is
// refused with 503 [ProblemUnavailable], Retry-After 1 s. [New] fails if
// l is nil, and with a [RequestLimiter], whose limits have keys of their
// own.
//
// Default: no cap on the requests in flight.
func WithInFlight(l inflight.Limiter) Option {
	return func(c *config) {
		c.inflight = l
		if l == nil {
			c.errs = append(c.errs, errors.New("httplimit: WithInFlight(nil): a limiter is required"))
		}
	}
}

// need records a configuration mistake when an option's function is nil.
func (c *config) need(option string, isNil bool) {
	if isNil {
		c.errs = append(c.errs, errors.New("httplimit: "+option+"(nil): a function is required"))
	}
}

// HeaderStyle is a set of rate header styles for [WithHeaders]; combine them
// with | or by passing several. For a policy named "api" of 100 per minute
// with 42 units left, [IETFHeaders] are:
//
//	RateLimit-Policy: "api";q=100;w=60
//	RateLimit: "api";r=42;t=12
//
// q is the policy's Limit and w its Window in seconds, rounded up. r is the
// units left, from 0 to q; t the seconds until the key is as if new (the
// Decision's ResetAfter, rounded up). On a denial r is 0 and t is the
// Retry-After value: the Decision's RetryAfter in whole seconds, rounded up,
// at least 1. An unnamed policy is called [DefaultPolicyName]. Over a
// [core.LayeredLimiter] the IETF fields have one member per layer, in layer
// order:
//
//	RateLimit-Policy: "burst";q=10;w=1, "daily";q=1000;w=86400
//	RateLimit: "burst";r=5;t=1, "daily";r=900;t=3600
//
// On a denial the layers that denied have r=0 and their own Retry-After as
// t; the others show their state as it is, since nothing was counted. A
// layer named as an earlier one is called "name-2" ("-3", and so on,
// skipping names other layers have). The triples ([LegacyHeaders],
// [XRateLimitHeaders]) describe the most restrictive layer, and a 429's
// problem body names the layer that denied, as its member is named.
type HeaderStyle uint8

const (
	// NoHeaders writes no rate headers.
	NoHeaders HeaderStyle = 0
	// IETFHeaders writes the IETF httpapi fields, RFC 9651 structured-field
	// Lists: RateLimit-Policy: "name";q=<limit>;w=<window seconds> and
	// RateLimit: "name";r=<remaining>;t=<seconds>.
	IETFHeaders HeaderStyle = 1 << iota
	// LegacyHeaders writes the earlier draft's triple RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset: q, r and t as above.
	LegacyHeaders
	// XRateLimitHeaders writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset: q, r, and the time t ends in Unix epoch seconds,
	// rounded up, as GitHub does.
	XRateLimitHeaders

	allHeaders = IETFHeaders | LegacyHeaders | XRateLimitHeaders
)

// KeyPolicy says what a request gets when its key cannot be found or used;
// see [WithNoKey] and [WithInvalidKey].
type KeyPolicy struct {
	kind     keyKind
	fallback keyfunc.Func
}

type keyKind uint8

const (
	keyDefault keyKind = iota
	keyRefuse
	keySkip
	keyFallback
)

// RefuseKey answers 400 Bad Request with a [ProblemInvalidKey] body; the
// handler is not called.
func RefuseKey() KeyPolicy { return KeyPolicy{kind: keyRefuse} }

// SkipKey serves the request unlimited and without rate headers, and
// reports it to the [WithErrorHook] hook with an error wrapping
// [ErrKeyFallback].
func SkipKey() KeyPolicy { return KeyPolicy{kind: keySkip} }

// FallbackKey keys the request by f instead, such as [keyfunc.PeerIP],
// and reports it to the [WithErrorHook] hook with an error wrapping
// [ErrKeyFallback]. If f fails too, the request is refused as with
// [RefuseKey]. f must not be nil: [New] fails otherwise.
func FallbackKey(f keyfunc.Func) KeyPolicy { return KeyPolicy{kind: keyFallback, fallback: f} }

// ErrKeyFallback reports, to the [WithErrorHook] hook, a request whose key
// function failed and that was served all the same: keyed by the
// [FallbackKey] function, or unlimited under [SkipKey]. The error also
// wraps the key function's, such as [keyfunc.ErrNoKey]. Count fallbacks
// with errors.Is(err, ErrKeyFallback) in the hook, as a metric of their
// own: the limiter, and so an observed one's metrics, sees the fallback
// key like any other.
var ErrKeyFallback = errors.New("httplimit: request served without its own key")

// failClosedRetry is the Retry-After of a 503 for a limiter error that is
// neither the caller's nor a core.UnavailableError (which brings its own):
// the failover composition leaves none, but the answer is defined.
const failClosedRetry = time.Second
