package httplimit

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/ratekit/ratekit/core"
)

// WithSettle makes a served request's cost settled after its handler ran:
// the request is counted before the handler at its estimate ([WithCost],
// or 1), as always, and the handler reports its actual cost with
// [SetCost], such as the tokens an AI model used or the rows an export
// wrote. After the handler returns, the middleware settles the difference
// with the limiter's [core.Settler.Settle]: a lower cost gives the rest
// back, as a refund does; a higher one is charged at once, whatever room
// is left, and the key may go into debt, so that its next requests are
// denied until the debt is repaid as the policy's algorithm defines it
// (docs/expensive.md). A handler that reports nothing, or panics, is
// settled at its estimate: nothing changes, and a panic goes on up the
// stack. An error from Settle (a negative cost) reaches the
// [WithErrorHook] hook.
//
// The rate headers are written before the handler runs, so they describe
// the key with the estimate counted: the next request sees the debt. A
// request that is not counted (a [WithDryRun] denial served, a limiter
// failure served by [core.FailOpen], one given back by [WithCountIf]) is
// not settled.
//
// The limiter, and the fallback limiter of a [core.Fallback] error policy,
// must be a [core.Settler] (the memory store's limiters are; the wrappers
// do not pass it on yet): [New] fails otherwise, and with a
// [RequestLimiter]. [Middleware], [Engine.Handler] and every ratekit
// adapter pass the reporting context to the handler: the request's
// context (gin's c.Request, echo's c.Request()), fiber's c.UserContext(),
// fiber v3's c.Context(). An adapter of your own passes [Result.Context].
//
// Default: off; a request costs its estimate.
func WithSettle() Option { return func(c *config) { c.settle = true } }

// SetCost reports n as the actual cost of the request whose context is
// ctx (its [net/http.Request.Context], or one derived from it), to every
// limit around its handler that settles after it ran ([WithSettle]). The
// last call before the handler returns counts; it may be made from any
// goroutine. 0 gives back the whole estimate; a negative n is reported to
// the [WithErrorHook] hook when the request is settled, and changes
// nothing. It reports whether a limit settles the request: false when
// none does, and n is then ignored.
func SetCost(ctx context.Context, n int64) bool {
	a, _ := ctx.Value(actualKey{}).(*actualCost)
	for o := a; o != nil; o = o.outer {
		o.n.Store(n)
		o.set.Store(true)
	}
	return a != nil
}

// actualKey is the context key of a request's actualCost.
type actualKey struct{}

// actualCost is what the handler reported through [SetCost] for one limit
// around it, and the limit around that one that settles too.
type actualCost struct {
	n     atomic.Int64
	set   atomic.Bool
	outer *actualCost
}

// Settling reports whether the request's cost is settled after its
// handler ran ([WithSettle]): it is served and counted. An adapter then
// passes the handler the context [Result.Context] returns, and calls
// [Result.Done] after it.
func (r *Result) Settling() bool { return r.settle && r.counted }

// Context returns ctx to pass to the handler: when the request is settled
// after it ran ([Result.Settling]), a context derived from ctx through
// which the handler reports its cost with [SetCost]; otherwise ctx
// itself. ratekit's adapters call it when the request is settling; an
// adapter of your own calls it once, after [Engine.Check], with the
// request's context.
func (r *Result) Context(ctx context.Context) context.Context {
	if !r.Settling() {
		return ctx
	}
	if r.actual == nil {
		r.actual = new(actualCost)
		r.actual.outer, _ = ctx.Value(actualKey{}).(*actualCost)
	}
	return context.WithValue(ctx, actualKey{}, r.actual)
}

// checkSettle checks that, with [WithSettle], l and f's fallback limiter
// can settle, and keeps them as Settlers.
func (e *Engine) checkSettle(l core.Limiter) error {
	if !e.cfg.settle {
		return nil
	}
	if e.rl != nil {
		return fmt.Errorf("httplimit: New: WithSettle with a RequestLimiter, whose limits settle nothing yet")
	}
	var ok bool
	if e.settler, ok = core.As[core.Settler](l); !ok {
		return fmt.Errorf("httplimit: WithSettle: %T cannot settle a cost after the handler (core.Settler)", l)
	}
	if e.local = localOf(e.f); e.local != nil {
		if e.localSettler, ok = core.As[core.Settler](e.local); !ok {
			return fmt.Errorf("httplimit: WithSettle: the fallback limiter %T cannot settle a cost after the handler (core.Settler)", e.local)
		}
	}
	return nil
}

// settleCost settles r, counted and served, at the cost its handler
// reported, if any.
func (r *Result) settleCost() {
	a := r.actual
	if a == nil || !a.set.Load() {
		return // settled at the estimate
	}
	n := a.n.Load()
	if n == r.cost {
		return
	}
	s := r.e.settler
	if r.lim == r.e.local {
		s = r.e.localSettler
	}
	ctx := context.WithoutCancel(r.req.Context())
	if err := s.Settle(ctx, r.key, r.cost, n, r.e.since(r.start)); err != nil {
		r.e.report(r.req, fmt.Errorf("httplimit: settle the cost after the handler: %w", err))
	}
}
