// Package guard protects a login, or any other check of a secret, against
// password guessing.
//
// A [Guard] counts failed attempts only, under limits it checks on every
// attempt:
//
//   - per account ([DefaultAccountPolicy]: 5 failures in any 15 minutes),
//     against many passwords tried on one account from many addresses;
//   - per client IP ([DefaultIPPolicy]: 50 failures in any 15 minutes),
//     against one password tried on many accounts from one address;
//   - optionally per account and IP together ([WithAccountIPPolicy]);
//   - optionally a lock that grows while an account keeps failing
//     ([WithLockout]).
//
// The options given to [New] set them ([Option]): [WithAccountPolicy] and
// [WithIPPolicy] replace the defaults, [WithAccountIPPolicy] and
// [WithLockout] add their limits, and [WithClock] sets the clock the Guard
// measures attempts with.
//
// An attempt is counted before its password is checked and given back if
// it succeeds, so that at most the account's Limit attempts are ever being
// checked at once or have failed, however many arrive in parallel. A
// success also clears the account's count, so a real user who mistypes a
// few times is not held back; an attacker is stopped by whichever limit it
// reaches first. A [Decision] says whether an attempt may proceed, and if
// not, which [Limit] blocked it and for how long.
//
// The flow of a login handler:
//
//	d, err := g.Check(ctx, account, ip) // counts the attempt
//	if !d.Allowed { /* 429, Retry-After: d.RetryAfter */ }
//	if !passwordOK { g.Fail(ctx, d); /* 401 */ }
//	g.Succeed(ctx, d) // gives the attempt back; 200
//
// The Guard never needs to know whether an account exists, and must not be
// told: call [Guard.Fail] for an unknown account exactly as for a wrong
// password, so that an unknown account is blocked exactly like a known one
// and the two cannot be told apart.
//
// The account must be normalized by the caller, or "Ana@Example.com" and
// "ana@example.com" would be counted apart: use
// [github.com/ratekit/ratekit/keyfunc.NormalizeEmail] (or keyfunc.Email on
// a request). Key the IP with [github.com/ratekit/ratekit/keyfunc.ClientIP]
// (keyfunc.PeerIP for a server clients reach directly), which groups an
// IPv6 client by its /64. Keys are namespaced by limit, so an account and
// an IP that are the same string never share a count.
//
// The counts live in the limiters that the function given to [New] builds,
// one per policy: [github.com/ratekit/ratekit/core.Memory] limiters in one
// process, Redis limiters
// ([github.com/ratekit/ratekit/redisstore.New]) shared by every server.
// Package [github.com/ratekit/ratekit/guard/guardtest] holds the scenarios
// every store a Guard runs on passes.
package guard
