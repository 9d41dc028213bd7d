// Package redisstore enforces a [core.Policy] on Redis, so that any number
// of servers share one count per key. It makes the same decisions as the
// in-memory [core.Memory], field for field, for the same policy, traffic and
// clock, and passes the same conformance suite (core/limitertest).
//
// [New] takes a [redis.UniversalClient], so one code path serves a single
// node, Sentinel ([redis.NewFailoverClient]) and Cluster
// ([redis.NewClusterClient]).
//
// # One round trip
//
// Each algorithm is one Lua script that reads the key's state, decides,
// writes the new state and its expiry in one atomic step (or, for a
// refund, gives units back, as [core.Memory.Refund] does; for a settle
// ([Limiter.Settle], a [core.Settler]) gives back or charges the rest of a
// request's actual cost, as [core.Memory.Settle] does; for a partial grant
// ([Limiter.AllowAtMost], a [core.PartialLimiter]) counts as many units as
// fit, as [core.Memory.AllowAtMost] does). On Redis 7 and
// later it runs as a Redis Function, by FCALL, which costs Redis less per
// call than EVALSHA; the library is named "ratekit_" and the SHA-1 of its
// code, so that two versions never replace each other's. It runs by
// EVALSHA where Redis refuses functions (before Redis 7, or an ACL or a
// managed Redis that does not permit FUNCTION and FCALL). A call whose
// function or script the server lacks, as after a restart without
// persistence, a FUNCTION FLUSH or SCRIPT FLUSH, or a failover to a node
// that never had it, did not run: it is sent once more, after loading the
// library (FCALL) or as EVAL. Calls by FCALL and by EVALSHA, from one
// process or many, share keys and decide alike. A policy's constants are
// written into its script, so a call passes only the key, the time and the
// cost; one script (or library) is loaded per policy, by [New], on every
// master of a Cluster. Deleting ratekit's libraries (FUNCTION DELETE) is
// safe: they are loaded again when next called. Arithmetic is in whole microseconds and exact: the scripts keep
// every number an integer below 2^53, where float64 sums, products and
// floored quotients are exact, so nothing is lost to float64.
//
// # Layered limits
//
// [NewLayered] enforces several policies on one request, such as 10 per
// second and 1,000 per day on the same key: a request passes only if every
// layer passes, and one denied by any layer counts nothing in any layer.
// All the layers are checked and written by one script, in one round trip,
// and decide exactly as a [core.Layered] of [core.Memory] layers would.
// The [Layered] limiter is a [core.LayeredLimiter]: HTTP middleware writes
// one RateLimit member per layer, and so it does through a
// [core.Failover], whose fallback may be a [core.Layered] of local limits:
//
//	burst := core.Policy{Name: "burst", Limit: 10, Window: time.Second}
//	daily := core.Policy{Name: "daily", Limit: 1000, Window: 24 * time.Hour}
//	remote, err := redisstore.NewLayered(client, []core.Policy{burst, daily})
//
// Each layer keeps its state where a [Limiter] of its policy would, so a
// Limiter and a Layered with the same prefix share counts.
//
// # Batching
//
// Concurrent decisions of one limiter share round trips, by default: a
// decision made while two of the limiter's round trips are in flight waits
// for one to end and is then sent with the others that waited, as one
// pipeline: on a single node (or Sentinel's master) one call of a batch
// script that makes each decision in turn exactly as the policy's script
// would, on a Cluster one such call per hash slot, so Redis pays a
// script call's cost once for many decisions. An idle limiter sends each
// decision at once, alone. Under concurrency it multiplies the decisions
// per second a client and a server can make; [WithBatching] bounds a
// batch, or turns batching off, and says what it changes about timeouts.
//
// # Keys and expiry
//
// A key's state lives under
//
//	<prefix>:<policy>:{<key>}
//
// (one string, for every algorithm). <prefix> is "ratekit" unless [WithPrefix] says otherwise.
// <policy> is "<name>/<algorithm>" for a named policy, whose state then
// records the numbers it was written under, so that the same policy with
// other numbers carries its usage over (see Changing a policy); and
// "<algorithm>/<limit>/<window>[/<burst>][/<period>@<zone>]" for an
// unnamed one (the period and zone of calendar windows, "month@Europe/Berlin"),
// whose only identity is its numbers, so two unnamed policies never share
// state. The
// caller's key is the Cluster hash tag, with '{', '}' and '%' escaped, so every limit of
// one caller lands on one slot and no caller can pick a slot or break out of
// the tag. Every write sets the key's expiry to the decision's ResetAfter
// (a refund's: the ResetAfter of the state it leaves) plus a margin
// ([WithExpiryMargin]), or keeps the later expiry the key had (a refund of
// a sliding log): no key exists without one, and a key that has expired
// decides exactly as a new one. A denied request, a Peek,
// and a Reset or a refund of an unknown key write nothing (but for the
// conversion below).
//
// # Rule sets
//
// [NewRuleStore] is a rules.Store: [rules.NewStoreLimiter] over it enforces
// a rule file on Redis, each rule's limits under the prefix
// "<prefix>:<rule>", decided all or nothing by one [Layered] script with a
// key and a cost per layer ([Layered.AllowCosts]), slot by slot on a
// Cluster, each limit's failure policy applied by a [core.Failover] when
// Redis cannot answer (see [RuleStore]). Reloads and overrides keep each
// key's usage, as described next.
//
// # Requests in flight
//
// [NewInFlight] is an [inflight.Limiter]: at most N requests per key in
// flight across every server, each holding a lease that expires after
// [WithLeaseTTL] unless released, so a server that dies leaks nothing past
// its leases' TTL. A key's leases are one sorted set (prefix:inflight:{key},
// one Cluster slot), taken and dropped by one script of their own.
//
// # Changing a policy
//
// [Limiter.SetPolicy] and [Layered.SetPolicies] change a named policy's
// numbers while the limiter runs, and a limiter built with new numbers
// (a restart, another server) finds the same keys: each key keeps its
// usage, converted as [core.Memory.SetPolicy] converts it, by its first
// call under the new numbers, which writes the converted state back.
// A key's conversion is as of the time the limiter took the policy, or
// of the key's last write if later. A key not called between two changes
// is converted from the numbers it was written under, skipping the
// policy between; a key whose state expired under its old numbers starts
// afresh. A named fixed window's state records its windows too, epoch or
// calendar ([core.Calendar]): a change of Window, period or zone, between
// epoch and calendar windows too, moves the count of the window that held
// the change to the new window that holds it, as core's does.
//
// # Time
//
// By default the scripts read the Redis server's TIME, so servers whose
// clocks disagree still share one notion of now. [WithClock] reads a
// [core.Clock] in the client instead, rounded down to the microsecond, as
// the memory store does; the conformance suite drives it with a
// [core.ManualClock].
//
// Calendar windows ([core.Calendar]) are exact on the server's TIME too:
// the client computes the period that holds its own reading of the time
// and the next, where the zone database is, and the script counts in the
// one that holds the server's now; when neither does (clocks apart, or a
// period just ended), it answers with its time and the client calls once
// more with the periods around it. Such a limiter is not batched
// ([WithBatching]; one given a calendar policy by [Limiter.SetPolicy]
// sends its calendar decisions one by one), and [NewLayered] and
// [Layered.SetPolicies] refuse a calendar policy.
//
// # Client settings
//
// A limiter's decision must be counted at most once. Give the limiter a
// client (or a [redis.Options]) with:
//
//   - MaxRetries: -1. go-redis retries a command after a read timeout by
//     default; the first EVALSHA may already have run on the server, so a
//     retry would count the request twice.
//   - ContextTimeoutEnabled: true, so the deadline of the request's context
//     and [WithTimeout] bound the wait for Redis. Without it go-redis waits
//     for its ReadTimeout (3 s by default) whatever the context says.
//   - A ReadTimeout and DialTimeout in the tens or hundreds of milliseconds,
//     and a PoolSize at least the number of requests in flight you expect,
//     so a slow Redis fails fast instead of queueing every request.
//
// A request that times out has an unknown outcome: the script may or may
// not have run. The limiter returns the error and never retries it, alone
// or batched; the units may have been counted once, never twice. (A
// Cluster client resends a command or pipeline after a network error up to
// its MaxRedirects times while the context has not ended; give a Cluster
// client a context deadline no later than its ReadTimeout, or MaxRedirects:
// -1 at the cost of failing, not following, MOVED during resharding.)
// After an error that says a Cluster's slots may have moved (a dead or
// unreachable node, MOVED, CLUSTERDOWN), a limiter on a Cluster client asks
// it to reload its slot map, at most every 250 ms, so that it follows a
// failover as soon as the replica is promoted; nothing is sent again.
//
// # When Redis is down
//
// Every method returns an error wrapping the client's. Wrap the limiter
// with [core.NewFailover] to decide such requests by a local fallback
// limiter, or to fail open or closed, with a circuit breaker that stops
// waiting on a dead Redis after a few failures and probes it again later.
package redisstore
