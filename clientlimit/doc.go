// Package clientlimit is the outbound side of rate limiting: an
// [http.RoundTripper] for calling APIs that limit their clients (GitHub,
// Stripe, an LLM provider, a ratekit server), so that a program slows down
// before it is cut off and backs off as the server asks when it is.
//
//	client := &http.Client{Transport: clientlimit.MustNew(nil,
//		clientlimit.WithLimiter(quota), // optional: a core.Limiter, on Redis for a fleet
//	)}
//
// [MustNew] panics on a configuration mistake, found when the
// program starts; [New] returns it as an error.
//
// A [Transport] does three things per key (the request's host by default):
//
//   - Pace: with [WithLimiter], each request first takes its units, waiting
//     as [core.Wait] does. A limiter on Redis gives a fleet of processes one
//     shared quota. A rule set (rules.Limiter) decides each request by the
//     rule it matches instead, with the rule's limits, keys and costs, and
//     follows its reloads; [WithRoute] and [HostKey] fit it to outgoing
//     requests (see [WithLimiter]).
//   - Obey: it reads Retry-After (seconds or an HTTP-date), the IETF
//     RateLimit and RateLimit-Policy fields, and the RateLimit-Remaining /
//     RateLimit-Reset and X-RateLimit-Remaining / X-RateLimit-Reset pairs.
//     After a 429 or 503 (or a 403 naming a rate limit, as GitHub's do) it
//     holds the key's requests for the time the server names, and retries
//     what is safe to repeat with full jitter.
//   - Slow down: when a server says r units remain until reset t, the next
//     requests go one every t/r instead of all at once.
//
// Whatever a server sends, reading it takes bounded time: of RateLimit
// and RateLimit-Policy (all their field lines together), the transport
// reads the first 64 members that end within the first 8 KiB and leaves
// the rest out; a Retry-After, remaining or reset value longer than 64
// bytes is ignored. Both are reported as malformed. A RateLimit member
// read can only make the client wait longer, so reading the first ones is
// never less careful than ignoring the field would be.
//
// X-RateLimit-Reset is a wait in seconds below 1,000,000,000, a Unix time
// in seconds from there (GitHub's), and a Unix time in milliseconds from
// 1,000,000,000,000. No wait exceeds [WithMaxWait] (default one minute) or
// the request's context: a request that would wait longer fails at once
// with [ErrWaitTooLong], and a 429 whose Retry-After is that far off is
// returned as it is. [Transport.Stats] and [WithObserver] show the waits,
// retries and refusals. See docs/client.md for the details.
package clientlimit
