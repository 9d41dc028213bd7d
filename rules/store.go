package rules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/observe"
)

// A Store keeps a rule set's counts somewhere other than the process's
// memory, such as Redis (redisstore.NewRuleStore), so that several servers
// enforce one rule set together. A [Limiter] made by [NewStoreLimiter]
// matches requests, finds their keys, costs and policies (overrides
// included), and has the Store decide them.
type Store interface {
	// Enforce returns what decides set's limits from now on. The Limiter
	// calls it when it is made and at each reload, one call at a time;
	// when it fails, the set in force stays (the Limiter's Err reports
	// why). An Enforcer returned earlier must keep deciding the requests
	// that started under its set. Each key's usage must carry over from
	// one set to the next as [Limiter] documents for memory.
	Enforce(set *Set) (Enforcer, error)

	// Clock returns the clock the Store decides by, which the Limiter
	// reads to time refunds ([Decision.Refund]).
	Clock() core.Clock
}

// An Enforcer decides the limits of one [Set] on a [Store]. Its methods
// are safe for concurrent use.
type Enforcer interface {
	// Decide decides layers, the limits of one rule for one request (a
	// rule's enforced limits, or one shadow limit), all or nothing: with
	// commit, each layer's Cost is counted for its Key under its Policy
	// in every layer, or in none when one refuses; without, it reports
	// what it would decide, counting nothing. It returns the layers'
	// Decisions appended to dst[:0], combined as core.MostRestrictive
	// combines them. When the store cannot answer, each limit's failure
	// policy ([Limit.ErrorPolicy]) decides: the error is then that of a
	// core.Failover, a *core.UnavailableError when one refuses.
	Decide(ctx context.Context, layers []Layer, commit bool, dst []core.Decision) (core.LayeredDecision, error)

	// Refund gives back what a Decide of layers with commit that allowed
	// them counted, elapsed ago (see core.Refunder).
	Refund(ctx context.Context, layers []Layer, elapsed time.Duration) error

	// Reset forgets layer's Key in its Limit.
	Reset(ctx context.Context, layer Layer) error
}

// A Layer is one limit's part in a request that an [Enforcer] decides.
type Layer struct {
	// Limit is the limit, of the Enforcer's set.
	Limit *Limit
	// Key is the request's key in it, as its key function returned it.
	Key string
	// Cost is what the request costs in it: [Limit.Cost].
	Cost int64
	// Policy is the key's policy: [Limit.PolicyFor]'s answer, or when the
	// lookup failed, the policy the Limiter last decided the key by.
	Policy core.Policy
}

// NewStoreLimiter returns a Limiter that enforces the set src holds on
// store, and follows src's reloads when src is a [*Source], as
// [NewLimiter] does in memory: the same matching, keys, costs, overrides,
// shadow limits and all-or-nothing decisions, with each limit's failure
// policy answering the store's errors (see the Store's documentation, such
// as redisstore.NewRuleStore's, for where its behaviour differs from
// memory's). It fails for a nil src, set or store, or when the store
// cannot enforce the set.
func NewStoreLimiter(src Loader, store Store) (*Limiter, error) {
	return newStoreLimiter("NewStoreLimiter", src, store, nil)
}

// NewObservedStoreLimiter is [NewStoreLimiter] with every decision of every
// limit reported to obs, as [NewObservedLimiter] reports them. It fails as
// NewStoreLimiter does, or for a nil obs.
func NewObservedStoreLimiter(src Loader, store Store, obs observe.Observer) (*Limiter, error) {
	if obs == nil {
		return nil, errors.New("rules: NewObservedStoreLimiter: the observer is nil")
	}
	return newStoreLimiter("NewObservedStoreLimiter", src, store, obs)
}

func newStoreLimiter(name string, src Loader, store Store, obs observe.Observer) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("rules: " + name + ": the store is nil")
	}
	l := &Limiter{store: store, obs: obs}
	return l.start(name, src)
}

// applyStore makes set the one in force on the store. The caller holds
// l.mu.
func (l *Limiter) applyStore(set *Set) error {
	old := l.cur.Load()
	if old != nil && old.set == set {
		return nil
	}
	st, err := l.store.Enforce(set)
	if err != nil {
		return err
	}
	if st == nil {
		return errors.New("the store's Enforce returned no Enforcer")
	}
	e := &enforcer{set: set, st: st, limits: make([]*limitState, len(set.limits)), rules: make([]ruleState, len(set.rules))}
	for i, nl := range set.limits {
		ls := &limitState{limit: nl}
		if nl.HasOverrides() {
			// The last policy of each key with one of its own, kept
			// across reloads while the limit is the same limit.
			if old != nil {
				if ol := old.set.byID[nl.id]; ol != nil {
					if prev := old.limits[ol.index]; prev.last != nil && sameKeys(ol, nl) {
						ls.last = prev.last
					}
				}
			}
			if ls.last == nil {
				c, err := lru.New[string, core.Policy](MaxOverrideKeys)
				if err != nil {
					return err
				}
				ls.last = c
			}
		}
		e.limits[i] = ls
	}
	for i, r := range set.rules {
		rs := ruleState{rule: r}
		for _, lim := range r.limits {
			ls := e.limits[lim.index]
			if lim.shadow {
				rs.shadow = append(rs.shadow, ls)
			} else {
				rs.enforced = append(rs.enforced, ls)
			}
		}
		e.rules[i] = rs
	}
	l.cur.Store(e)
	return nil
}

// sameKeys reports whether a and b, one limit in two sets, mean the same
// thing by a key: the same key spec and algorithm.
func sameKeys(a, b *Limit) bool {
	return slices.Equal(a.keySpec, b.keySpec) && a.policy.Algorithm == b.policy.Algorithm
}

// layerFor returns the Layer of key in ls's limit, and an override
// lookup's error: the key is then decided by the policy it was last
// decided by, or else the limit's.
func (ls *limitState) layerFor(key string) (Layer, error) {
	lim := ls.limit
	ly := Layer{Limit: lim, Key: key, Cost: lim.cost, Policy: lim.policy}
	if ls.last == nil {
		return ly, nil
	}
	p, err := lim.PolicyFor(key)
	switch {
	case err != nil:
		if q, ok := ls.last.Get(key); ok {
			p = q
		}
	case p == lim.policy:
		ls.last.Remove(key)
	default:
		ls.last.Add(key, p)
	}
	ly.Policy = p
	return ly, err
}

// decideStore is decide for a Limiter on a Store, under the enforcer e.
func (l *Limiter) decideStore(ctx context.Context, req keyfunc.Request, e *enforcer, d *Decision) error {
	rule, err := e.set.Match(req)
	if err != nil || rule == nil {
		d.Allowed = err == nil
		return err
	}
	d.Rule = rule
	rs := &e.rules[rule.index]
	clock := l.store.Clock()
	if len(rs.enforced) == 0 {
		d.Allowed = true
	} else {
		for _, ls := range rs.enforced {
			k, err := ls.limit.key(req)
			if err != nil {
				d.keyErr = ls.limit
				return fmt.Errorf("rules: %w", &httplimit.KeyError{Limit: ls.limit.id, Err: err})
			}
			ly, err := ls.layerFor(k)
			if err != nil && d.OverrideErr == nil {
				d.OverrideErr = err
			}
			d.Limits = append(d.Limits, ls.limit)
			d.Keys = append(d.Keys, k)
			d.Costs = append(d.Costs, ls.limit.cost)
			d.layers = append(d.layers, ly)
		}
		d.start = clock.Now()
		ld, err := e.st.Decide(ctx, d.layers, true, d.Layers[:0])
		if l.obs != nil {
			d.took = int64(clock.Now().Sub(d.start))
		}
		if err != nil {
			return fmt.Errorf("rules: %s: %w", rule.name, err)
		}
		d.LayeredDecision = ld
		d.st = e.st
		d.counted = ld.Allowed
	}
	for _, ls := range rs.shadow {
		s := ShadowDecision{Limit: ls.limit}
		k, err := ls.limit.key(req)
		if err != nil {
			s.Err = fmt.Errorf("rules: %s: key: %w", ls.limit.id, err)
			d.Shadow = append(d.Shadow, s)
			continue
		}
		s.Key = k
		ly, err := ls.layerFor(k)
		if err != nil && d.OverrideErr == nil {
			d.OverrideErr = err
		}
		if d.start.IsZero() {
			d.start = clock.Now()
		}
		one := [1]Layer{ly}
		var buf [1]core.Decision
		sd, err := e.st.Decide(ctx, one[:], d.Allowed, buf[:0])
		s.Decision, s.Err = sd.Decision, err
		if err != nil {
			s.Err = fmt.Errorf("rules: %s: %w", ls.limit.id, err)
		}
		s.counted = err == nil && d.Allowed && sd.Allowed
		s.layer, s.st = ly, e.st
		d.counted = d.counted || s.counted
		d.Shadow = append(d.Shadow, s)
	}
	return nil
}

// resetStore is Reset for a Limiter on a Store.
func (l *Limiter) resetStore(ctx context.Context, e *enforcer, key string) error {
	var errs []error
	for _, ls := range e.limits {
		ly, _ := ls.layerFor(key)
		err := e.st.Reset(ctx, ly)
		if err != nil {
			err = fmt.Errorf("%s: %w", ls.limit.id, err)
			errs = append(errs, err)
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
