package rules

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/observe"
)

// A Limiter is an [httplimit.RequestLimiter]: every adapter over httplimit
// (ginlimit, echolimit, chilimit, fiberlimit, httplimit.Middleware...) and
// the gRPC and Connect interceptors take one where they take a limiter,
// and decide each request by the rule it matches; so does clientlimit's
// WithLimiter, for outgoing requests:
//
//	lim, err := rules.NewLimiter(src)
//	...
//	r.Use(ginlimit.New(lim))
var _ httplimit.RequestLimiter = (*Limiter)(nil)

// ErrRequestsOnly is the error of the Limiter's AllowN and Peek: a rule
// set decides requests, whose rule says which keys its limits count, not
// a key alone.
var ErrRequestsOnly = fmt.Errorf("rules: a rule set decides requests, not keys: use Decide, or give the Limiter to an adapter: %w", errors.ErrUnsupported)

// AllowN returns [ErrRequestsOnly]; it is there so that the Limiter is a
// core.Limiter, which adapters take.
func (l *Limiter) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, ErrRequestsOnly
}

// Peek returns [ErrRequestsOnly], as AllowN does.
func (l *Limiter) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, ErrRequestsOnly
}

// Reset forgets key, as the limits count it ([Decision.Keys]: a header's
// value is digested), in every limit of the set in force, shadow limits
// and keys with a limiter of their own included: its next request in any
// rule is treated as its first (after a successful login, say).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if l.closed.Load() {
		return ErrClosed
	}
	e := l.hold()
	defer e.rw.RUnlock()
	if l.store != nil {
		return l.resetStore(ctx, e, key)
	}
	var errs []error
	for _, ls := range e.limits {
		m, held, _ := ls.memFor(key)
		err := m.Reset(ctx, key)
		if err != nil {
			err = fmt.Errorf("%s: %w", ls.limit.id, err)
			errs = append(errs, err)
		}
		if held != nil {
			held.mu.RUnlock()
		}
		if l.obs != nil {
			l.obs.Observe(ctx, observe.Event{Op: observe.OpReset, Rule: ls.limit.rule, Policy: ls.limit.name, Err: err, Shadow: ls.limit.shadow})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rules: reset: %w", err)
	}
	return nil
}

// DecideRequest decides req for an adapter ([httplimit.RequestLimiter]):
// [Limiter.Decide] with the request's context, its enforced limits as the
// layers of the verdict, the rule's name, and an Undo that refunds as
// [Decision.Refund] does. An error finding a key (a limit's key function,
// or the plan function) is an [*httplimit.KeyError], which the adapter
// answers as its WithNoKey and WithInvalidKey options say.
//
// The Decision it decides into comes from a pool, with room for a rule of
// up to four limits, and goes back when the adapter releases the request
// ([httplimit.Result.Release]): no allocation per request then.
func (l *Limiter) DecideRequest(req keyfunc.Request) (httplimit.RequestDecision, error) {
	rd := decisionPool.Get().(*requestDecision)
	d := &rd.d
	err := l.Decide(req.Context(), req, d)
	v := httplimit.RequestDecision{Decision: d.LayeredDecision}
	if d.Rule != nil {
		v.Rule = d.Rule.name
	}
	if len(d.Costs) > 0 && d.Layer >= 0 && d.Layer < len(d.Costs) {
		v.Cost = d.Costs[d.Layer]
	}
	if err != nil {
		var ke *httplimit.KeyError
		if d.Rule == nil && !errors.Is(err, ErrClosed) && !errors.As(err, &ke) {
			// Match's error: the request's route or plan is unknown.
			err = &httplimit.KeyError{Err: err}
		}
	}
	// Undo is set even when nothing was counted (an Undo then gives
	// back nothing), so that the adapter's Release returns rd.
	v.Undo = rd
	return v, err
}

var decisionPool = sync.Pool{New: func() any { return newRequestDecision() }}

func newRequestDecision() *requestDecision {
	rd := new(requestDecision)
	d := &rd.d
	d.Layers, d.Limits, d.Keys, d.Costs = rd.layers[:0], rd.limits[:0], rd.keys[:0], rd.costs[:0]
	d.mems = rd.mems[:0]
	d.layers = rd.slayers[:0]
	return rd
}

// requestDecision is the Decision of one DecideRequest, with room for the
// slices of a rule of up to four limits.
type requestDecision struct {
	d       Decision
	layers  [4]core.Decision
	limits  [4]*Limit
	keys    [4]string
	costs   [4]int64
	mems    [4]*core.Memory
	slayers [4]Layer
}

// Undo refunds what the decision counted ([Decision.Refund]); the
// Decision's own clock measures the time since, so elapsed is not used.
func (rd *requestDecision) Undo(ctx context.Context, _ time.Duration) error {
	return rd.d.Refund(ctx)
}

// Release puts rd back in the pool, emptied, its slices' room kept: the
// adapter is done with the request ([httplimit.Result.Release]).
func (rd *requestDecision) Release() {
	rd.d.reset()
	clear(rd.keys[:])
	clear(rd.limits[:])
	clear(rd.mems[:])
	clear(rd.slayers[:])
	decisionPool.Put(rd)
}
