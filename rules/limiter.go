package rules

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/memtime"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/observe"
)

// A Loader holds the rule set a [Limiter] enforces: a [*Source], whose
// reloads the Limiter follows, or a [*Set], which never changes.
type Loader interface {
	// Load returns the set in force. It is safe for concurrent use.
	Load() *Set
}

// Load returns s: a Set is a [Loader] that never reloads.
func (s *Set) Load() *Set { return s }

// reloader is a Loader that tells of its replacements: [*Source].
type reloader interface {
	OnReload(fn func(old, new *Set)) (stop func())
}

// MaxOverrideKeys is the most keys, per limit, that a [Limiter] keeps a
// limiter of their own for (keys whose [Limit.PolicyFor] is an override).
// Past it, the least recently used key's usage goes back into the limit's
// shared limiter, converted to the limit's policy, and comes out again when
// the key is next seen.
const MaxOverrideKeys = 10_000

// ErrClosed is the error of [Limiter.Decide] after [Limiter.Close].
var ErrClosed = errors.New("rules: limiter closed")

// A Limiter enforces a rule set in memory ([NewLimiter]), or on a [Store]
// such as Redis ([NewStoreLimiter]): for each request, the first rule that
// matches ([Set.Match]), and all of that rule's limits at once. What
// follows describes memory; a Store decides alike and documents where it
// differs.
//
// [Limiter.Decide] decides every limit that is not in shadow mode as one
// all-or-nothing core.Layered decision, one layer per limit, each counting
// its own key ([Limit.Key]) and cost ([Limit.Cost]): a request refused by
// one limit counts in none. Shadow limits are decided after, apart, and
// only reported: they count the requests the enforced limits let through,
// and never refuse one. A key whose [Limit.PolicyFor] is an override is
// decided by a limiter of its own, holding that one key (at most
// [MaxOverrideKeys] such keys per limit).
//
// When the Loader is a [*Source], the Limiter follows its reloads (see
// [Source.OnReload]) and keeps each key's usage as [Compare] allows: an
// unchanged limit keeps its limiter as it is; a limit whose policy changed
// within one algorithm converts every key's usage, as core.Memory.SetPolicy
// does (a key that used 80 of 100 and is given 200 has 120 left); a limit
// whose key spec or algorithm changed, or that is new, starts empty. A key
// that gains or loses an override keeps its usage too, converted alike. A
// request finishes under the set it started with. A reload waits for the
// requests still deciding under the set it replaces (a memory decision's
// time) and, when limits have overrides, holds new requests while the
// keys with a limiter of their own follow the new set.
//
// A Limiter is safe for concurrent use. Create one with [NewLimiter]; the
// zero value is not usable.
type Limiter struct {
	opts   []core.Option
	store  Store            // nil: in memory
	obs    observe.Observer // nil: nothing reported
	cur    atomic.Pointer[enforcer]
	closed atomic.Bool

	mu   sync.Mutex // serializes reloads; guards stop and err
	stop func()
	err  error
}

// NewLimiter returns a Limiter that enforces the set src holds, with
// memory limiters built with opts (core.WithClock, core.WithMaxKeys: the
// most keys per limit), and follows src's reloads when src is a [*Source].
// It fails for a nil src or set, or options core.New rejects.
func NewLimiter(src Loader, opts ...core.Option) (*Limiter, error) {
	return newLimiter("NewLimiter", src, nil, opts)
}

// NewObservedLimiter is [NewLimiter] with every decision of every limit
// reported to obs, such as a ratekitprom or ratekitotel Metrics (see
// [Limiter.Decide]). It fails as NewLimiter does, or for a nil obs.
func NewObservedLimiter(src Loader, obs observe.Observer, opts ...core.Option) (*Limiter, error) {
	if obs == nil {
		return nil, errors.New("rules: NewObservedLimiter: the observer is nil")
	}
	return newLimiter("NewObservedLimiter", src, obs, opts)
}

func newLimiter(name string, src Loader, obs observe.Observer, opts []core.Option) (*Limiter, error) {
	l := &Limiter{opts: opts, obs: obs}
	return l.start(name, src)
}

// start subscribes l to src's reloads and applies its set.
func (l *Limiter) start(name string, src Loader) (*Limiter, error) {
	if src == nil {
		return nil, errors.New("rules: " + name + ": the loader is nil")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Subscribed first, so that no replacement goes unseen: one made
	// meanwhile waits for l.mu, and then finds its set in force.
	if r, ok := src.(reloader); ok {
		l.stop = r.OnReload(func(_, set *Set) { l.reload(set) })
	}
	set := src.Load()
	if set == nil {
		l.unsubscribe()
		return nil, errors.New("rules: " + name + ": the loader holds no set")
	}
	if err := l.apply(set); err != nil {
		l.unsubscribe()
		return nil, fmt.Errorf("rules: %s: %w", name, err)
	}
	return l, nil
}

func (l *Limiter) unsubscribe() {
	if l.stop != nil {
		l.stop()
		l.stop = nil
	}
}

// reload enforces set from now on, or keeps the set in force and records
// the error.
func (l *Limiter) reload(set *Set) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return
	}
	l.err = nil
	if err := l.apply(set); err != nil {
		l.err = fmt.Errorf("rules: reload: %w", err)
	}
}

// Set returns the set in force: the one a Decide starting now uses.
func (l *Limiter) Set() *Set { return l.cur.Load().set }

// Err returns the error of the last reload, or nil if it succeeded (or
// none happened). A reload that fails keeps the set in force.
func (l *Limiter) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close stops following the Loader's reloads; Decide then returns
// [ErrClosed]. It is safe to call more than once.
func (l *Limiter) Close() error {
	l.closed.Store(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unsubscribe()
	return nil
}

// A Decision is what [Limiter.Decide] decided for one request. Pass the
// same Decision to Decide again, from one goroutine at a time, to reuse its
// slices: a Decide on known keys then allocates nothing of its own (a key
// with a limiter of its own costs a Layered per request).
type Decision struct {
	// LayeredDecision is the decision of the rule's enforced limits, one
	// layer per limit, in the order of Limits: Allowed, and the most
	// restrictive layer's figures (see core.Layered). When no rule
	// matched, or the rule's limits are all in shadow mode, it is allowed,
	// with Layer -1 and no Layers.
	core.LayeredDecision
	// Rule is the rule matched, or nil when none did (the set does not
	// limit the request).
	Rule *Rule
	// Limits are the rule's enforced limits, one per layer.
	Limits []*Limit
	// Keys and Costs are each layer's key and cost.
	Keys  []string
	Costs []int64
	// Shadow holds the decisions of the rule's shadow limits, which never
	// refuse the request.
	Shadow []ShadowDecision
	// OverrideErr is the first error of an override lookup
	// ([Limit.PolicyFor]); the key was decided where it was last held
	// (its own limiter, or else the limit's).
	OverrideErr error

	layered *core.Layered // what decided the enforced limits
	clock   *core.Memory  // whose clock at was read from
	at      int64         // the clock reading before deciding, ns
	took    int64         // the enforced limits' decision's time, ns, when observed
	counted bool          // units were counted and not yet refunded
	obs     observe.Observer
	keyErr  *Limit // the enforced limit whose key function failed
	mems    []*core.Memory
	held    []*ovEntry

	// On a Store: what decided, the layers it decided, when, by what clock.
	st     Enforcer
	layers []Layer
	start  time.Time
	sclock core.Clock
}

// A ShadowDecision is the decision of one shadow limit: what it would have
// decided, counting the request only when the enforced limits let it
// through.
type ShadowDecision struct {
	// Limit is the shadow limit.
	Limit *Limit
	// Key is the request's key in it; empty when Err is set.
	Key string
	// Decision is the limit's decision: counted when the request was let
	// through, else what it reports without counting.
	Decision core.Decision
	// Err is the limit's error (a key function's), which refuses nothing.
	Err error

	mem     *core.Memory
	counted bool
	layer   Layer    // on a Store: what was decided
	st      Enforcer // and by what
}

// reset empties d, keeping its slices' room.
func (d *Decision) reset() {
	*d = Decision{
		LayeredDecision: core.LayeredDecision{Layer: -1, Layers: d.Layers[:0]},
		Limits:          d.Limits[:0],
		Keys:            d.Keys[:0],
		Costs:           d.Costs[:0],
		Shadow:          d.Shadow[:0],
		mems:            d.mems[:0],
		held:            d.held[:0],
		layers:          d.layers[:0],
	}
}

var memNow = memtime.Now.(func(*core.Memory) int64)

// Decide decides req under the set in force and fills d: the rule matched,
// its enforced limits decided all or nothing, its shadow limits decided
// apart (see [Limiter]). A request no rule matches is allowed. A denial is
// d.Allowed false, not an error. Errors are the plan function's
// ([WithPlan]), an enforced limit's key function's (wrapped with the
// limit's ID; errors.Is finds keyfunc.ErrNoKey or keyfunc.ErrInvalidKey),
// a decision's, and [ErrClosed]: d then counts nothing.
//
// A Limiter made by [NewObservedLimiter] reports, when a rule matched, one
// [observe.Event] per limit the request reached, with the rule's name in
// Rule and the limit's in Policy, after the decision and before Decide
// returns: an enforced limit's is an OpAllow with its own layer's Decision
// (a limit that would have allowed a request another refused reports it
// allowed: it counted nothing) and the time the enforced limits took to
// decide, or with Err, the error that left it undecided (its key
// function's, which stops the limits after it, or the decision's); a
// shadow limit's has Shadow set and is an OpAllow when the request was let
// through, an OpPeek when not. [Decision.Refund] reports an OpRefund per
// limit it gives units back to, and [Limiter.Reset] an OpReset per limit.
// A request no rule matches, and Decide's other errors, are not reported.
func (l *Limiter) Decide(ctx context.Context, req keyfunc.Request, d *Decision) error {
	d.reset()
	if l.closed.Load() {
		return ErrClosed
	}
	e := l.hold()
	var err error
	if l.store != nil {
		d.sclock = l.store.Clock()
		err = l.decideStore(ctx, req, e, d)
	} else {
		err = l.decide(ctx, req, e, d)
	}
	e.rw.RUnlock()
	if l.obs != nil && d.Rule != nil {
		d.obs = l.obs
		d.report(ctx, err)
	}
	return err
}

// report tells d.obs about each limit of d's rule that the request
// reached; err is Decide's.
func (d *Decision) report(ctx context.Context, err error) {
	rule := d.Rule.name
	switch {
	case d.keyErr != nil:
		d.obs.Observe(ctx, observe.Event{Op: observe.OpAllow, Rule: rule, Policy: d.keyErr.name, Cost: d.keyErr.cost, Err: err})
	case err != nil:
		for _, lim := range d.Limits {
			d.obs.Observe(ctx, observe.Event{Op: observe.OpAllow, Rule: rule, Policy: lim.name, Cost: lim.cost, Err: err})
		}
	default:
		took := time.Duration(max(d.took, 0))
		for i, lim := range d.Limits {
			if i < len(d.Layers) {
				d.obs.Observe(ctx, observe.Event{Op: observe.OpAllow, Rule: rule, Policy: lim.name, Cost: lim.cost, Decision: d.Layers[i], Latency: took})
			}
		}
	}
	op := observe.OpAllow
	if !d.Allowed {
		op = observe.OpPeek
	}
	for i := range d.Shadow {
		s := &d.Shadow[i]
		d.obs.Observe(ctx, observe.Event{Op: op, Rule: rule, Policy: s.Limit.name, Cost: s.Limit.cost, Decision: s.Decision, Err: s.Err, Shadow: true})
	}
}

// hold returns the enforcer in force, held for reading: the caller
// releases e.rw.
func (l *Limiter) hold() *enforcer {
	e := l.cur.Load()
	for {
		e.rw.RLock()
		n := l.cur.Load()
		if n == e {
			return e
		}
		e.rw.RUnlock() // replaced meanwhile: take the new one
		e = n
	}
}

// decide is Decide under the enforcer e.
func (l *Limiter) decide(ctx context.Context, req keyfunc.Request, e *enforcer, d *Decision) error {
	rule, err := e.set.Match(req)
	if err != nil || rule == nil {
		d.Allowed = err == nil
		return err
	}
	d.Rule = rule
	rs := &e.rules[rule.index]
	err = l.decideEnforced(ctx, req, rs, d)
	d.release()
	if err != nil {
		return err
	}
	l.decideShadow(ctx, req, rs, d)
	return nil
}

// decideEnforced decides rs's enforced limits as one Layered decision.
// The override entries it decided by are left held for reading in d.held.
func (l *Limiter) decideEnforced(ctx context.Context, req keyfunc.Request, rs *ruleState, d *Decision) error {
	if len(rs.enforced) == 0 {
		d.Allowed = true
		return nil
	}
	own := false
	for _, ls := range rs.enforced {
		k, err := ls.limit.key(req)
		if err != nil {
			d.keyErr = ls.limit
			return fmt.Errorf("rules: %w", &httplimit.KeyError{Limit: ls.limit.id, Err: err})
		}
		m, held, err := ls.memFor(k)
		if err != nil && d.OverrideErr == nil {
			d.OverrideErr = err
		}
		if held != nil {
			d.held = append(d.held, held)
		}
		own = own || m != ls.mem
		d.Limits = append(d.Limits, ls.limit)
		d.Keys = append(d.Keys, k)
		d.Costs = append(d.Costs, ls.limit.cost)
		d.mems = append(d.mems, m)
	}
	layered := rs.layered
	if own {
		// A key with a limiter of its own: layers for this request only.
		var err error
		if layered, err = core.NewLayered(d.mems...); err != nil {
			return fmt.Errorf("rules: %s: %w", rs.rule.name, err)
		}
	}
	d.clock = d.mems[0]
	d.at = memNow(d.clock)
	ld, err := layered.AllowCosts(ctx, d.Keys, d.Costs, d.Layers[:0])
	if err != nil {
		return fmt.Errorf("rules: %s: %w", rs.rule.name, err)
	}
	if l.obs != nil {
		d.took = memNow(d.clock) - d.at
	}
	d.LayeredDecision = ld
	d.layered = layered
	d.counted = ld.Allowed
	return nil
}

// decideShadow decides rs's shadow limits one by one: counted when d was
// allowed, peeked otherwise.
func (l *Limiter) decideShadow(ctx context.Context, req keyfunc.Request, rs *ruleState, d *Decision) {
	for _, ls := range rs.shadow {
		s := ShadowDecision{Limit: ls.limit}
		k, err := ls.limit.key(req)
		if err != nil {
			s.Err = fmt.Errorf("rules: %s: key: %w", ls.limit.id, err)
			d.Shadow = append(d.Shadow, s)
			continue
		}
		s.Key = k
		m, held, err := ls.memFor(k)
		if err != nil && d.OverrideErr == nil {
			d.OverrideErr = err
		}
		if d.clock == nil {
			d.clock, d.at = m, memNow(m)
		}
		if d.Allowed {
			s.Decision, s.Err = m.AllowN(ctx, k, ls.limit.cost)
			s.counted = s.Err == nil && s.Decision.Allowed
			d.counted = d.counted || s.counted
		} else {
			s.Decision, s.Err = m.Peek(ctx, k, ls.limit.cost)
		}
		if held != nil {
			held.mu.RUnlock()
		}
		s.mem = m
		d.Shadow = append(d.Shadow, s)
	}
}

// release lets go of the override entries d decided by.
func (d *Decision) release() {
	for i, e := range d.held {
		e.mu.RUnlock()
		d.held[i] = nil
	}
	d.held = d.held[:0]
}

// Refund gives back what Decide counted for d: the enforced limits' units
// if the request was allowed, and the shadow limits' that counted it (see
// core.Refunder: never more room than if the request had not been made).
// Call it when the outcome should not count, such as a request that failed
// on the server's side. A second call, or one for a Decision that counted
// nothing, gives back nothing. A Decision of a Limiter made by
// [NewObservedLimiter] reports an observe.OpRefund per limit given back to.
func (d *Decision) Refund(ctx context.Context) error {
	if !d.counted {
		return nil
	}
	d.counted = false
	var elapsed time.Duration
	if d.sclock != nil {
		elapsed = max(d.sclock.Now().Sub(d.start), 0)
	} else {
		elapsed = time.Duration(max(memNow(d.clock)-d.at, 0))
	}
	var errs []error
	if d.Allowed && (d.layered != nil || d.st != nil) {
		var err error
		if d.st != nil {
			err = d.st.Refund(ctx, d.layers, elapsed)
		} else {
			err = d.layered.RefundCosts(ctx, d.Keys, d.Costs, elapsed)
		}
		if err != nil {
			err = fmt.Errorf("rules: refund: %w", err)
			errs = append(errs, err)
		}
		if d.obs != nil {
			for _, lim := range d.Limits {
				d.obs.Observe(ctx, observe.Event{Op: observe.OpRefund, Rule: d.Rule.name, Policy: lim.name, Cost: lim.cost, Err: err})
			}
		}
	}
	for i := range d.Shadow {
		s := &d.Shadow[i]
		if !s.counted {
			continue
		}
		s.counted = false
		var err error
		if s.st != nil {
			err = s.st.Refund(ctx, []Layer{s.layer}, elapsed)
		} else {
			err = s.mem.Refund(ctx, s.Key, s.Limit.cost, elapsed)
		}
		if err != nil {
			err = fmt.Errorf("rules: refund: %s: %w", s.Limit.id, err)
			errs = append(errs, err)
		}
		if d.obs != nil {
			d.obs.Observe(ctx, observe.Event{Op: observe.OpRefund, Rule: d.Rule.name, Policy: s.Limit.name, Cost: s.Limit.cost, Err: err, Shadow: true})
		}
	}
	return errors.Join(errs...)
}
