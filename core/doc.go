// Package core holds what ratekit is built on: one [Limiter] interface,
// five exact algorithms selected by a [Policy], [Memory], the sharded
// in-process limiter, and the compositions of limiters: [Layered] limits
// on one key, [Tiered] plans, and [Failover] for a remote store that
// fails. The Redis store, the framework adapters and the other packages
// build on these types.
//
// A [Policy] says "at most Limit units per Window", counted by one
// [Algorithm]. A [Limiter] answers each request with a [Decision]: whether it
// is allowed, how many units remain, and, when denied, the exact RetryAfter.
// A denial is a Decision, never an error; errors are for bad input and broken
// stores.
//
// # Algorithms
//
// Let L = Limit, W = Window, B = Burst (default L), r = L/W and n the cost of
// a request. Every algorithm counts n units or nothing: a denied request
// leaves no trace, so a client that keeps retrying gets in exactly when room
// frees up. All arithmetic is in integers, exact to the microsecond: time is
// counted in whole microseconds, the resolution of Redis's TIME, so the
// memory and Redis stores make the same decisions, field for field.
//
//   - [TokenBucket]: a bucket of B tokens refilled continuously at r; a
//     request is allowed while the bucket holds n. An hour of silence buys B,
//     not thousands; L requests spaced W/L apart pass forever, with no
//     rounding drift. It keeps one int64 per key (the generic cell rate
//     algorithm's theoretical arrival time) and agrees with
//     golang.org/x/time/rate, whose float64 arithmetic can differ only
//     within a microsecond of a boundary.
//   - [FixedWindow]: windows aligned to multiples of W since the Unix epoch,
//     or calendar days, weeks or months in a time zone ([Calendar]);
//     allowed if count + n <= L. Up to 2L can pass in a short span across a
//     boundary (L at 12:00:59.9, L at 12:01:00.1): that is the algorithm.
//   - [SlidingLog]: the time and cost of every allowed request; a request
//     allowed at s counts while now - W < s and leaves exactly at s + W.
//     Exactly "at most L in any window of length W", at the price of memory
//     that grows with L.
//   - [SlidingWindow]: two fixed-window counters and the estimate
//     prev·(W-e)/W + cur, e being the time into the current window; allowed
//     if the estimate plus n is at most L. Close to the sliding log in two
//     counters, exact in 128-bit integers; it assumes the previous window's
//     traffic was spread evenly, so a true window can see up to 2L.
//   - [LeakyBucket]: requests queue and leave at r, like nginx's limit_req.
//     An allowed request carries the Delay until its slot; the k-th of
//     simultaneous requests waits (k-1)·W/L, and the queue holds B of them.
//
// # Choosing an algorithm
//
// Choose by what the limit means to the people it protects:
//
//   - "Bursts are fine, but no more than r on average": [TokenBucket]. The
//     default, the cheapest (one int64 per key), and what APIs usually mean.
//   - "Never more than L in any W" (logins, signups, password resets, SMS):
//     [SlidingLog] when L is small, [SlidingWindow] when L is large and an
//     estimate is good enough.
//   - "L per calendar window", easy to explain on a pricing page, where the
//     boundary burst does not matter: [FixedWindow].
//   - "Smooth the traffic to a fragile backend" (wait rather than reject):
//     [LeakyBucket], whose Decision.Delay the middleware waits out.
//
// # Stores
//
// [New] builds a [Memory] limiter for one Policy, configured by [Option]
// values ([WithClock], [WithMaxKeys]): keys kept as seeded 128-bit hashes in
// sharded tables, memory bounded by WithMaxKeys (default [DefaultMaxKeys]),
// fresh keys (full buckets, empty windows) dropped first at no cost to
// correctness, and [Memory.Stats] ([Stats]) to watch evictions. A Policy is
// written as a value or read with [ParsePolicy] ([ParseAlgorithm] and
// [Algorithms] for the names), within [MaxLimit], [MinWindow] and
// [MaxWindow]; an invalid one is a [PolicyError]. The conformance suite in
// core/limitertest holds every store to the same decisions.
//
// # Time
//
// A limiter reads its [Clock] once per decision: [SystemClock] by default,
// measured monotonically; a [CoarseClock] for a cheaper read at a stated
// resolution; a [ManualClock] in tests, which never sleep. [WithClock] sets
// it. [Wait] blocks until a limiter allows, for workers and API clients.
//
// # Around a limiter
//
// [NewLayered] enforces several policies on one key (10 per second and 1,000
// per hour), counting a request in every layer or in none, and reports each
// layer in a [LayeredDecision] ([MostRestrictive] picks the layer that
// decides); each layer may have a key and a cost of its own
// ([Layered.AllowCosts]). [NewTiered] picks a key's policy from its plan ([PlanFunc]) on
// every request. [NewFailover] wraps a remote limiter (Redis) with an
// [ErrorPolicy] for when it is down ([FailOpen], [FailClosed], [Fallback],
// [FallbackShare]), behind a circuit breaker, configured by [FailoverOption]
// values; a request it refuses gets an [UnavailableError]. Package hotkey
// holds the wrappers that take load off a remote store (leases and a denial
// cache); packages observe and guard hold observability and the login guard.
//
// # Capabilities
//
// Beyond the Limiter methods, a limiter may have optional capabilities, each
// a named interface that embeds Limiter:
//
//   - [Refunder]: it gives units back, so that a request can be counted
//     before it runs and given back after;
//   - [LayeredLimiter]: it reports every layer's Decision, for one header
//     member per layer;
//   - [MultiKeyLimiter]: a layered limiter that keys each layer apart (the
//     layered limiters themselves only; wrappers do not pass it on);
//   - [PartialLimiter]: it grants as many of the units asked for as fit
//     now (the memory store's limiters; wrappers do not pass it on yet);
//   - [Settler]: it settles a request's actual cost after it ran, giving
//     back or charging the difference from its estimate (the memory
//     store's limiters; wrappers do not pass it on yet);
//   - [PolicyReporter]: it knows its Policy;
//   - [Wrapper]: it passes requests to another limiter, which Unwrap returns.
//
// Find a capability with [As], never with a type assertion of your own: a
// wrapper ([Failover], the hotkey and observe limiters) has the methods of
// every capability whatever it wraps, and As follows Unwrap, as [errors.As]
// does, to tell whether the limiter it wraps has the capability too. A
// user's own wrapper takes part by implementing Unwrap.
//
// # Errors
//
// A denial is a Decision, never an error. The caller's errors are
// [ErrEmptyKey], [ErrInvalidCost], [ErrCostTooHigh], [ErrInvalidElapsed] and
// [ErrNoRefund], which [CallerError] tells from a store's; a constructor
// rejects a policy with an error wrapping [ErrInvalidPolicy]; [Tiered]
// reports [ErrUnknownPlan]. Any other error is a store's: a Failover that
// refuses a request because its store fails returns an [UnavailableError]
// (wrapping [ErrBreakerOpen] when the store was not called).
//
// # Example
//
//	limiter, err := core.New(core.Policy{Limit: 100, Window: time.Minute})
//	if err != nil {
//		return err
//	}
//	d, err := limiter.Allow(ctx, clientIP)
//	if err != nil {
//		return err // a bad key or a broken store, not a denial
//	}
//	if !d.Allowed {
//		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.RetryAfter.Seconds()))))
//		w.WriteHeader(http.StatusTooManyRequests)
//		return nil
//	}
//
// The framework adapters (ginlimit, echolimit, echo5limit, chilimit,
// fiberlimit, fiber3limit) do the HTTP part for you.
package core
