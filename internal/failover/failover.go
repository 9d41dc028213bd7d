// Package failover gives ratekit's HTTP middleware what a core.Failover
// knows and its users need not: which limiter decided a request, and the
// store error a request was decided despite, so that the middleware
// reports it with the request. It lets the middleware build on the
// failover composition rather than apply the error policy a second time.
//
// Package core sets Check when it is initialized. Check is typed any
// because this package cannot name core's types: core imports it.
package failover

// Check is, once package core is initialized,
//
//	func(f *core.Failover, ctx context.Context, key string, n int64) (ld core.LayeredDecision, by core.Limiter, outage, err error)
//
// which decides one request as f.AllowLayers does, except that a limiter
// that is not layered gives its Decision alone (ld.Layers is nil), with no
// allocation. by is the limiter to give the request's units back to: f
// when its remote limiter decided, f's fallback limiter when that did, or nil when the error policy decided alone (failing
// open or closed). outage is the store error the request was decided
// despite, when err does not carry it; it has reached f's hook.
var Check any

// Local is, once package core is initialized,
//
//	func(f *core.Failover) core.Limiter
//
// which returns f's local fallback limiter, or nil when its error policy is
// not a fallback: the middleware checks, when it is built, that a count
// condition can give units back there too.
var Local any

// Closed is, once package core is initialized,
//
//	func(f *core.Failover) bool
//
// which reports whether f's error policy is FailClosed: the middleware
// refuses a request whose in-flight limiter fails then, and serves it
// otherwise (no fallback caps requests in flight).
var Closed any
