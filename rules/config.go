package rules

import (
	"net/netip"
	"time"
)

// Config is a rule set as it is written, in a file or in Go: the input of
// [New]. [Parse] reads a file into a Config and builds it with New, so the
// two are validated alike. Field paths in errors use the file's names
// ("rules[1].limits[0].rate"), whichever way the Config was made.
type Config struct {
	// TrustedProxies are the reverse proxies and load balancers whose
	// forwarding headers the "ip" key reads (keyfunc.TrustProxies). File:
	// trusted_proxies, a list of CIDR prefixes, addresses, or "private"
	// for keyfunc.PrivateNetworks.
	TrustedProxies []netip.Prefix
	// Defaults apply to every limit that does not say otherwise.
	Defaults Defaults
	// Rules are matched in order; the first whose Match holds applies.
	Rules []RuleConfig
	// Overrides give single keys of a limit policies of their own.
	Overrides []OverrideConfig
}

// Defaults are the values a limit takes when it does not give its own.
type Defaults struct {
	// Algorithm is the algorithm of a limit that names none, as
	// core.ParseAlgorithm reads it. Default: token-bucket.
	Algorithm string
	// Failure is the failure policy of a limit that names none: "open",
	// "closed" or "fallback" (see [Failure]). Default: open.
	Failure string
	// Instances is the number of servers sharing each limit, which the
	// "fallback" failure policy divides a limit by while the store is out
	// (core.FallbackShare). Default: 1.
	Instances int
}

// RuleConfig is one rule: which requests it applies to and the limits
// they are all held to.
type RuleConfig struct {
	// Name identifies the rule: unique in the set, 1 to 64 letters, digits,
	// '-', '_' or '.'. It is half of each of its limits' identity
	// ([Limit.ID]): renaming a rule starts its limits afresh.
	Name string
	// Match says which requests the rule applies to. The zero Match
	// matches every request.
	Match MatchConfig
	// Limits are the policies a matched request is held to, all or
	// nothing: 1 to 16 of them.
	Limits []LimitConfig
}

// MatchConfig says which requests a rule applies to. Every condition given
// must hold; each list holds when any of its entries does; an empty list is
// no condition.
type MatchConfig struct {
	// Routes are route patterns as the router reports them
	// (keyfunc.Request's Route, such as "/items/{id}"), compared exactly;
	// an entry ending in "/*" matches every route that begins with what
	// precedes the "*" ("/api/*" matches "/api/items/{id}", not "/api").
	// A request whose route is unknown matches no Routes.
	Routes []string
	// Methods are request methods, written in any case: GET, POST, PUT,
	// PATCH, DELETE, OPTIONS, CONNECT or TRACE. A HEAD request matches GET
	// (HEAD itself is refused here), a request's method is compared
	// without regard to case, and a method outside that list never matches.
	Methods []string
	// Headers maps a header name (in any case) to the values one of which
	// its first line must hold, without surrounding spaces and tabs,
	// compared exactly; the value "*" matches any non-empty value.
	Headers map[string][]string
	// Plans are plan names, one of which the request's plan (the function
	// given with [WithPlan]) must be.
	Plans []string
}

// LimitConfig is one limit of a rule: a policy, what it counts per, and
// how it behaves.
//
// The policy is given either as Rate, in core.ParsePolicy's form
// ("100/1m", "10/s burst=20 algorithm=token-bucket"), or as Limit, Window
// and optionally Algorithm and Burst: one way, never both.
type LimitConfig struct {
	// Name identifies the limit in its rule: unique there, 1 to 64 letters,
	// digits, '-', '_' or '.'. It is the policy's Name, and the other half
	// of the limit's identity ([Limit.ID]).
	Name string
	// Rate is the policy in core.ParsePolicy's form, without name=.
	Rate string
	// Limit is the number of units per Window.
	Limit int64
	// Window is the period Limit applies to. File: a duration such as
	// "1m", "1h30m" or "7d".
	Window time.Duration
	// Algorithm is the algorithm's name. Default: Defaults.Algorithm.
	Algorithm string
	// Burst is the buckets' capacity. Default: Limit.
	Burst int64
	// Key says what the limit counts per: one key spec, or several meaning
	// their keyfunc.Join. See the package documentation for the specs.
	Key []string
	// Cost is the units each request takes, at least 1. Default: 1.
	Cost int64
	// Failure is the failure policy: "open", "closed" or "fallback".
	// Default: Defaults.Failure.
	Failure string
	// Shadow makes the limit decide and report, but never refuse.
	Shadow bool
}

// OverrideConfig gives one key of one limit a policy of its own, such as a
// customer's contract.
type OverrideConfig struct {
	// Limit names the limit: "<rule>/<limit>", as [Limit.ID] spells it.
	Limit string
	// Key is the key exactly as the limit's key function returns it, such
	// as a tenant ID read by a "context:" key.
	Key string
	// Rate is the key's policy in core.ParsePolicy's form, without name=.
	// Without algorithm=, it takes the limit's algorithm.
	Rate string
}
