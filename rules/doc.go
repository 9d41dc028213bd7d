// Package rules holds limits as configuration: a rule set, read from a YAML
// or JSON file or built in Go, that says for each request which limits it is
// held to, and a [Source] that reloads the file while the server runs.
//
// A set is an ordered list of rules. [Set.Match] returns the first rule
// whose match holds for a request, or nil when none does (the request is not
// limited by the set). A rule with no match holds for every request, so "POST
// /login: 5 per minute per account; everything else: 100 per minute per IP"
// is two rules, the catch-all last. A matched request is held to all of its
// rule's limits at once, all or nothing: [Rule.Policies] and [Rule.Keys] are
// the layers and keys of one core.MultiKeyLimiter decision.
//
// # The file
//
//	# The proxies whose X-Forwarded-For the "ip" key reads: CIDR prefixes,
//	# addresses, or "private" for keyfunc.PrivateNetworks.
//	trusted_proxies: [10.0.0.0/8]
//
//	defaults:
//	  algorithm: sliding-window # of a limit that names none; default token-bucket
//	  failure: open             # open, closed or fallback; default open
//	  instances: 4              # servers sharing a limit, for fallback; default 1
//
//	rules:
//	  - name: login
//	    match:
//	      routes: [/login]
//	      methods: [POST]
//	    limits:
//	      - name: per-account
//	        rate: 5/1m algorithm=sliding-log
//	        key: email:username
//	        failure: closed
//	      - name: per-ip
//	        limit: 20
//	        window: 1m
//	        key: ip
//
//	  - name: api-paid
//	    match:
//	      routes: [/api/*]
//	      plans: [pro, enterprise]
//	    limits:
//	      - name: per-tenant
//	        rate: 1000/1m algorithm=token-bucket burst=200
//	        key: context:tenant
//	      - name: per-tenant-route
//	        rate: 20000/1d
//	        key: [context:tenant, route-method]
//	        cost: 2
//	        shadow: true
//
//	  - name: everything-else
//	    limits:
//	      - name: per-ip
//	        rate: 100/1m
//	        key: ip
//
//	overrides:
//	  - limit: api-paid/per-tenant
//	    key: acme
//	    rate: 20000/1m algorithm=token-bucket
//
// A rule has a name (unique; 1 to 64 letters, digits, '-', '_' or '.', as
// core's policy names), a match and 1 to 16 limits. Every condition of a
// match must hold, and each is a list that holds when one of its entries
// does (a single value may stand for a list of one):
//
//   - routes: route patterns as the router reports them (keyfunc.Request's
//     Route), compared exactly, a parameter in either syntax ("/items/{id}"
//     matches gin's "/items/:id" too); "/api/*" matches every route
//     beginning with "/api/". A request whose route is not known where
//     the limiter runs (in front of the router, fiber's app.Use) is an error
//     when it reaches a rule with routes (see [Set.Match]), never passed on
//     to a laxer rule.
//   - methods: GET, POST, PUT, PATCH, DELETE, OPTIONS, CONNECT, TRACE, in any
//     case. A HEAD request matches GET, a request's method is compared
//     without regard to case (a client respelling "POST" as "post" gets
//     the POST rule), and any other method matches none.
//   - headers: a header name (in any case) and its values; the header's
//     first line, trimmed of spaces and tabs, must be one of them exactly, or
//     any non-empty value for "*". A client writes its own headers: match on
//     one your proxy sets, or order the rules so that no header buys a
//     laxer rule.
//   - plans: the plan that the function given with [WithPlan] returns for
//     the request, asked only when a rule with plans is reached.
//
// A limit has a name (unique in its rule), a policy, a key and optionally a
// cost (units per request, default 1, at most the policy's capacity),
// a failure policy (open, closed or fallback: core.FailOpen,
// core.FailClosed, core.FallbackShare over defaults.instances) and shadow
// (decide and report, never refuse). The policy is either rate, in
// core.ParsePolicy's form ("100/1m", "10/s burst=20 algorithm=leaky-bucket",
// or a calendar window, "1000/1mo tz=Europe/Berlin", always a fixed window),
// or limit, window, and optionally algorithm and burst; one way, not both.
// The key is a key spec or a list of them, keyed together (keyfunc.Join):
//
//   - ip: the client address (keyfunc.ClientIP), through trusted_proxies
//     and [WithIPOptions];
//   - peer: the socket peer (keyfunc.PeerIP);
//   - route, route-method: keyfunc.Route, keyfunc.RouteMethod;
//   - header:<Name>: a header, hashed (keyfunc.Header, [WithHeaderSecret]);
//   - email:<field>: a normalized email from a body or query field
//     (keyfunc.Email);
//   - context:<name>: a context value registered with [WithContextKey];
//   - a name registered with [WithKeyFunc].
//
// An override gives one key of one limit ("<rule>/<limit>") a rate of its
// own, in the same form; without algorithm= it keeps the limit's.
// [WithOverride] finds keys' policies at run time instead, cached.
// [Limit.PolicyFor] resolves a key's policy: the file, then the function,
// then the limit's.
//
// # Validation
//
// [Parse] is strict: an unknown field, a duplicate name or key, a bad rate,
// a policy given both ways, an unknown key spec, an override naming no limit
// are errors, and each names the file, line, column and field:
//
//	rules: rules.yaml:12:15: rules[1].limits[0].rate: core: parse policy "100/1x": ...
//
// [New] validates a [Config] built in Go alike, naming fields by the same
// paths. A file is operator input, bounded: at most [MaxFileBytes],
// [MaxRules] rules, [MaxLimits] limits per rule, [MaxOverrides] overrides,
// 1,024 routes, 16 methods, 32 headers of 64 values and 256 plans per match,
// 8 key parts, one document, nesting 32 deep and 256 keys per mapping; no
// anchors, aliases, tags or directives.
//
// # Reloads and identity
//
// A limit's identity is [Limit.ID], "<rule>/<limit>", never its numbers, so
// that a reload that changes a limit's rate changes the same limit.
// [Compare] says which limits of two sets are unchanged, changed (policy,
// key spec or overrides), added or removed. A [Source] holds the running
// set; a reload that validates replaces it atomically and tells the
// functions given to [Source.OnReload], which is where a limiter carries its
// keys' state over; one that does not is reported and changes nothing.
//
// # Enforcing
//
// A [Limiter] enforces a set, or a Source's running set, in memory:
// [Limiter.Decide] matches the rule and decides its limits as one
// all-or-nothing core.Layered decision (shadow limits apart, reported
// only), and follows reloads keeping every key's usage as [Compare]
// allows. Keys with an override get a limiter of their own, their usage
// moved in and out as they gain and lose it. [NewObservedLimiter] also
// reports every limit's decision to an observe.Observer (metrics, logs),
// named by its rule and limit names. docs/config.md, "Enforcing", says
// what a reload keeps.
//
// [NewStoreLimiter] enforces a set on a [Store] instead, such as Redis
// (redisstore.NewRuleStore), so that several servers share its counts:
// the Limiter matches, keys, costs and finds overrides as in memory, and
// the Store's [Enforcer] decides each rule's limits all or nothing, by
// their failure policies when the store cannot answer. docs/config.md,
// "On Redis", says what it keeps.
package rules
