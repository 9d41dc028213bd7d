package httplimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// RequestLimiter is a [core.Limiter] that decides whole requests: it finds
// the limits that apply to a request, each with its own key and cost, and
// decides them together, all or nothing, as a rule set does
// (rules.Limiter). An [Engine] over one, and so every adapter given one,
// asks DecideRequest for each request instead of running its key and cost
// functions and AllowN: [WithKey], [WithCost], [WithErrorPolicy] and a
// [FallbackKey] are the RequestLimiter's business, and [New] refuses them.
// [WithSkip], [WithDenied], [WithDryRun], [WithCountIf], [WithHeaders],
// [WithNoKey] and [WithInvalidKey] ([RefuseKey] or [SkipKey]) apply as
// with any limiter.
//
// The limiter's AllowN is what it decides for a key alone, if anything;
// the Engine never calls it.
type RequestLimiter interface {
	core.Limiter

	// DecideRequest decides req. Its Decision has one layer per limit
	// enforced on req; none means that no limit applies, and the request
	// is served, without rate headers. A request that has no key for one
	// of its limits is a *KeyError; a cost below 1 wraps
	// [core.ErrInvalidCost], one above what a limit can ever allow
	// [core.ErrCostTooHigh] (with the layers' state, counting nothing,
	// when it is known); a store that cannot answer is a
	// [*core.UnavailableError] or any other error, refused with 503.
	// Nothing is counted when it returns an error.
	DecideRequest(req keyfunc.Request) (RequestDecision, error)
}

// RequestDecision is what a [RequestLimiter] decided for one request.
type RequestDecision struct {
	// Decision is the layered decision over the limits enforced on the
	// request: Layers in the order of the limits, Layer the one that
	// decides (the denying layer of a denial, else the tightest), and its
	// Decision that layer's, as [core.LayeredLimiter] defines them.
	Decision core.LayeredDecision

	// Rule names the rule that matched the request, "" when none did.
	Rule string

	// Cost is what the request costs the deciding layer, for the problem
	// body of a cost above what it can ever allow.
	Cost int64

	// Undo gives back what the decision counted, for [WithCountIf] and
	// for a limit stacked inside this one that refuses the request; nil
	// when it counted nothing or cannot give back.
	Undo RequestUndoer
}

// RequestUndoer gives back what one [RequestDecision] counted: every layer
// its own units, as [core.Refunder] defines a refund, elapsed being the
// time since the decision. The Engine calls Undo at most once.
//
// An undoer that also has a method Release() is told when the request is
// over ([Result.Release]): from then on neither it nor the decision's
// Layers is used, and what they hold may be reused.
type RequestUndoer interface {
	Undo(ctx context.Context, elapsed time.Duration) error
}

// releaser is a RequestUndoer whose memory goes back to a pool.
type releaser interface{ Release() }

// Release tells the Result that its request is over, once the response is
// written and Done called, or when the handler panicked: the request's
// in-flight lease ([WithInFlight]) is given back, and what the Result holds
// for a [RequestLimiter] goes back to that limiter's pools. The Result, and
// every Result copied from it, is not used after; extra calls do nothing.
// ratekit's adapters call it, deferred so that a panicking handler's lease
// is given back too; an adapter of your own must call it with
// [WithInFlight] (without, the memory is collected instead).
func (r *Result) Release() {
	r.release()
	if rel, ok := r.undo.(releaser); ok {
		r.undo, r.layers = nil, nil
		rel.Release()
	}
}

// KeyError is the error of a [RequestLimiter] whose request has no valid
// key for one of its limits: the Engine answers it as [WithNoKey] says when
// Err wraps [keyfunc.ErrNoKey], and as [WithInvalidKey] says otherwise.
type KeyError struct {
	Limit string // the limit whose key could not be found; "" for the request's rule
	Err   error  // the key function's error
}

func (e *KeyError) Error() string {
	if e.Limit == "" {
		return fmt.Sprintf("no rule: %v", e.Err)
	}
	return fmt.Sprintf("limit %q: key: %v", e.Limit, e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }

// checkRequestLimiter refuses the options a [RequestLimiter] makes
// meaningless: they would be silently ignored.
func (c *config) checkRequestLimiter() error {
	var errs []error
	if c.keyGiven {
		errs = append(errs, errors.New("httplimit: New: WithKey with a RequestLimiter, whose limits have keys of their own"))
	}
	if c.cost != nil {
		errs = append(errs, errors.New("httplimit: New: WithCost with a RequestLimiter, whose limits have costs of their own"))
	}
	if c.inflight != nil {
		errs = append(errs, errors.New("httplimit: New: WithInFlight with a RequestLimiter, whose limits have keys of their own"))
	}
	if c.onErrorGiven {
		errs = append(errs, errors.New("httplimit: New: WithErrorPolicy with a RequestLimiter, whose limits have failure policies of their own"))
	}
	for _, p := range []KeyPolicy{c.noKey, c.badKey} {
		if p.kind == keyFallback {
			errs = append(errs, errors.New("httplimit: New: FallbackKey with a RequestLimiter: which limit's key it stands for is unknown"))
			break
		}
	}
	return errors.Join(errs...)
}

// decideRequest decides res by the RequestLimiter, as decide does by a
// limiter, and returns false when res is refused without a decision.
func (e *Engine) decideRequest(res *Result) bool {
	res.start = e.now()
	v, err := e.rl.DecideRequest(res.req)
	res.rule, res.cost = v.Rule, v.Cost
	if err == nil {
		if len(v.Decision.Layers) == 0 {
			res.serve = true // no limit applies
			return false
		}
		res.setLayers(v.Decision)
		res.lim, res.undo = e.rl, v.Undo
		return true
	}
	var ke *KeyError
	if errors.As(err, &ke) {
		p := e.cfg.badKey
		if errors.Is(err, keyfunc.ErrNoKey) {
			p = e.cfg.noKey
		}
		if p.kind == keySkip {
			e.report(res.req, fmt.Errorf("%w: served unlimited (SkipKey): %w", ErrKeyFallback, err))
			res.serve = true
			return false
		}
		e.report(res.req, fmt.Errorf("httplimit: %w", err))
		res.refuse(invalidKeyResponse())
		return false
	}
	e.report(res.req, err)
	if errors.Is(err, core.ErrCostTooHigh) {
		if len(v.Decision.Layers) > 0 {
			res.setLayers(v.Decision)
			res.rate = res.layersLimited()
		}
		res.refuse(costTooHighResponse(res.cost, res.d))
		return false
	}
	refuseError(res, res.req.Context(), err)
	return false
}

// setLayers records ld in res: the deciding layer's Decision, and every
// layer's.
func (res *Result) setLayers(ld core.LayeredDecision) {
	res.d, res.layers, res.layer = ld.Decision, nil, 0
	if ld.Layer >= 0 && ld.Layer < len(ld.Layers) {
		res.layers, res.layer = ld.Layers, ld.Layer
	}
}

// layersLimited reports whether every layer recorded has a limit to
// describe in the rate headers (true when there are none).
func (res *Result) layersLimited() bool {
	for _, l := range res.layers {
		if l.Limit <= 0 {
			return false
		}
	}
	return true
}

// Rule returns the name of the rule a [RequestLimiter] matched the request
// to, "" when none did or the limiter is none.
func (r *Result) Rule() string { return r.rule }
