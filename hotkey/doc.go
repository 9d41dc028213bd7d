// Package hotkey holds two wrappers that take load off a remote limiter,
// such as the Redis store, for the keys that cost it most:
//
//   - [Leased] ([NewLeased]), for a hot key within its limit: units are
//     taken from the remote limiter in batches and spent in process, so a
//     key at 20,000 requests a minute costs about one remote call per batch
//     instead of one per request. The price is bounded over-admission: N
//     instances hold at most N×batch units the remote limiter counted before
//     they were spent. [Leased.Stats] returns a [LeaseStats].
//   - [DenialCache] ([NewDenialCache]), for a key hammered past its limit: a
//     denial is remembered until its RetryAfter and repeated requests of the
//     same cost are denied from memory, with the Decision the remote limiter
//     would give.
//
// Both implement [core.Limiter], [core.PolicyReporter] and [core.Wrapper];
// a DenialCache also passes on its remote limiter's [core.Refunder] and
// [core.LayeredLimiter] capabilities. Both keep a bounded number of keys
// ([WithMaxKeys], default [DefaultMaxKeys]) and read an injected clock
// ([WithClock]); these are [Option] values, which a Leased takes beside
// [WithLeaseTime] (default [DefaultLeaseTime]) as a [LeaseOption]. Put
// them outermost first: a DenialCache over a Leased over a [core.Failover]
// over the remote limiter. How each decides, and why: docs/scale.md.
package hotkey
