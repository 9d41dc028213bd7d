package core

import "reflect"

// The capabilities of a Limiter, and As that finds them: see the package
// doc's Capabilities section.

// PolicyReporter is a [Limiter] that knows the [Policy] it decides by:
// [Memory], the Redis store's limiters and every wrapper in ratekit over
// one of them. HTTP middleware reads it for the RateLimit-Policy header and
// the cost a request may never exceed, and a [FallbackShare] error policy
// for the policy it shares.
type PolicyReporter interface {
	Limiter

	// Policy returns the policy the limiter decides by. A wrapper that does
	// not know it (it wraps a limiter that is not a PolicyReporter) returns
	// the zero Policy, which [As] never hands out.
	Policy() Policy
}

// Wrapper is a [Limiter] that decides by passing requests to another
// limiter, as [Failover], hotkey.DenialCache, hotkey.Leased, observe.Limiter
// and observe.Shadow do. [As] follows Unwrap, as [errors.As] does for
// errors, so that a wrapper around a limiter without a capability does not
// claim it. A user's own wrapper takes part by implementing Unwrap and,
// for each capability it passes on, that capability's methods.
type Wrapper interface {
	Limiter

	// Unwrap returns the limiter this one passes requests to.
	Unwrap() Limiter
}

// As returns l as a T, a capability interface ([Refunder],
// [LayeredLimiter], [MultiKeyLimiter], [PartialLimiter], [Settler],
// [PolicyReporter]), and true when l has that capability: l implements T
// and, when l is a [Wrapper], so does every limiter along its Unwrap
// chain. A
// [PolicyReporter] must also report a valid Policy. It returns the zero T
// and false otherwise, and for a nil l.
//
//	if r, ok := core.As[core.Refunder](l); ok {
//		err = r.Refund(ctx, key, n, elapsed)
//	}
//
// Code that needs a capability should ask once, when it is built, and
// refuse a limiter without it rather than find out per request.
func As[T Limiter](l Limiter) (T, bool) {
	var zero T
	t, ok := l.(T)
	if !ok {
		return zero, false
	}
	for x := l; ; {
		w, ok := x.(Wrapper)
		if !ok {
			break
		}
		if x = w.Unwrap(); x == nil {
			return zero, false
		}
		if _, ok := x.(T); !ok {
			return zero, false
		}
	}
	if reflect.TypeFor[T]().Implements(policyReporterType) {
		if any(t).(PolicyReporter).Policy().Validate() != nil {
			return zero, false
		}
	}
	return t, true
}

var policyReporterType = reflect.TypeFor[PolicyReporter]()

// policyOf returns l's policy and whether it is known (see [As]).
func policyOf(l Limiter) (Policy, bool) {
	if p, ok := As[PolicyReporter](l); ok {
		return p.Policy(), true
	}
	return Policy{}, false
}

// refunderOf returns l as a Refunder if it can refund, else nil.
func refunderOf(l Limiter) Refunder {
	r, _ := As[Refunder](l)
	return r
}
