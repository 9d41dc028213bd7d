package httplimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

// After records that outer is the Result of the limit checked just before
// this one on the same request: middleware stacked on one request, such as
// a limit on the whole app, then one on a group, then one on a route. When
// this limit refuses the request (429, 400, 503), the units that outer and
// every limit before it counted are given back at once, so that a request
// refused by one limit is counted by none, and an app-wide quota is not
// spent by requests a route's limit turns away; their in-flight leases
// ([WithInFlight]) go back too. The headers of every limit
// stay on the response, an outer limit's as it was with the request
// counted.
//
// The limits decide one after the other, so for the moment between an
// outer limit counting a request and an inner one refusing it, the outer
// key holds those units: a parallel request of that key can be refused
// then, never let through beyond its limit. The units go back as
// [core.Refunder] defines it; a limiter that cannot give units back keeps
// them and its [WithErrorHook] hook is told.
//
// ratekit's adapters call After; an adapter of your own calls it right
// after [Engine.Check] with the Result of the nearest limit around this
// one, found the way its framework carries per-request state (nil: none).
func (r *Result) After(outer *Result) {
	r.outer = outer
	if r.serve {
		return
	}
	for o := outer; o != nil; o = o.outer {
		o.giveBack()
		o.release()
	}
}

// giveBack gives back the units r counted, once: a limit checked after r
// refused the request.
func (r *Result) giveBack() {
	if !r.counted {
		return
	}
	r.counted, r.charge = false, false
	elapsed := r.e.since(r.start)
	if err := r.refund(context.WithoutCancel(r.req.Context()), elapsed); err != nil {
		r.e.report(r.req, fmt.Errorf("httplimit: give back a request a later limit refused: %w", err))
	}
}

// refund gives back what r counted: by its RequestUndoer, or as its
// limiter's Refund, which must be one ([core.ErrNoRefund] otherwise).
func (r *Result) refund(ctx context.Context, elapsed time.Duration) error {
	if r.e.rl != nil {
		if r.undo == nil || r.undone {
			return fmt.Errorf("%T: %w", r.lim, core.ErrNoRefund)
		}
		r.undone = true
		return r.undo.Undo(ctx, elapsed)
	}
	ref, ok := core.As[core.Refunder](r.lim)
	if !ok {
		return fmt.Errorf("%T: %w", r.lim, core.ErrNoRefund)
	}
	return ref.Refund(ctx, r.key, r.cost, elapsed)
}
