// Package httplimit is the HTTP behaviour of ratekit's middleware, written
// once for every framework: which requests are limited and by what key, what
// they cost, the rate headers, the 429 and its problem+json body, what
// happens when the limiter fails, dry runs, and giving back the requests
// whose responses are not counted.
//
// [Middleware] is the plain net/http middleware, for the standard
// [net/http.ServeMux] or any handler chain:
//
//	mux.Handle("/api/", httplimit.Middleware(limiter)(api))
//
// The framework adapters (ginlimit, echolimit, echo5limit, chilimit,
// fiberlimit, fiber3limit) are glue around an [Engine]: they build a
// [keyfunc.Request] view of the request,
// call [Engine.Check], write the [Result] the framework's way, call the
// handler, and report its status to [Result.Done]. They all take the same
// [Option] values, so a configuration reads the same in every framework:
//
//	r.Use(ginlimit.New(limiter,
//		httplimit.WithKey(clientIP),
//		httplimit.WithSkip(isHealthCheck),
//		httplimit.WithErrorPolicy(core.FailClosed()),
//	))
//
// # Defaults
//
// Without options a request is keyed by its socket peer's address
// ([keyfunc.PeerIP]; no forwarding header is trusted), costs 1, gets the IETF
// RateLimit-Policy and RateLimit headers, and is served unlimited if the
// limiter fails ([core.FailOpen]). A request's own faults (no key, a bad cost, a
// body over [WithMaxBodyBytes]) are refused with 400, whatever the error
// policy. See [Engine] for the responses.
//
// # Options
//
// Who is limited: [WithKey], and [WithNoKey] and [WithInvalidKey] with a
// [KeyPolicy] ([RefuseKey], [FallbackKey], [SkipKey]; a request served
// without its own key is reported as [ErrKeyFallback]). What it costs:
// [WithCost], [WithMaxBodyBytes]. Which requests: [WithSkip], and
// [WithCountIf] ([Failures]) to keep counted only some outcomes, and
// [WithSettle] with [SetCost] to settle a cost known only after the
// handler ran (docs/expensive.md). How many at once: [WithInFlight]. After
// a violation: [WithBlock]. Failures:
// [WithErrorPolicy], [WithErrorHook]. Rollout: [WithDryRun]. Output:
// [WithHeaders], a [HeaderStyle], and [WithDenied]. Time: [WithClock].
//
// # Responses
//
// A refusal is a [Response]: a status, headers and an RFC 9457 problem body
// ([Problem], of [ContentTypeProblem]) whose type is one of the Problem
// constants, such as [ProblemRateLimited]. Headers and bodies name a policy
// by [PolicyName]. A handler that decides without the middleware, such as a
// login handler, answers a denial with [WriteDenied] or builds it with
// [DeniedResponse]; [RetryAfterSeconds] is the Retry-After of a wait. A
// user's own adapter writes headers through a [HeaderWriter], or a
// [HeaderReader] to expose them to a browser's script.
//
// # Browsers (CORS)
//
// Put the CORS middleware in front of the limit: it answers preflights
// before they are counted, and its Access-Control-Allow-Origin is on every
// answer, a 429 included, to which the limit adds its fields' names to
// Access-Control-Expose-Headers so that a script reads Retry-After. With
// the CORS middleware behind the limit, [WithSkip]([Preflight]) leaves
// preflights uncounted.
package httplimit
