package rules

import (
	"fmt"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/memmove"
)

// What a Limiter holds for one set, and how a reload carries it to the
// next (apply).
//
// An enforcer is built once per set and never changes: a Decide loads the
// Limiter's pointer to it once, so a request finishes under the set it
// started with. What enforcers share across reloads is each limit's shared
// core.Memory (kept as it is when the limit is unchanged, converted by
// SetPolicy when only its policy changed, within one algorithm) and its
// override table.
//
// Override keys. A key whose PolicyFor is not the limit's policy is
// decided by a core.Memory of its own (one key, that policy), kept in the
// limit's override table, an LRU of at most MaxOverrideKeys. Its state
// moves in from the shared limiter when the key is first seen with its own
// policy, and back when it loses it (a reload, an OverrideFunc's new
// answer) or is evicted from the table, by memmove: converted as SetPolicy
// converts. An entry's RWMutex is held for reading while a decision uses
// its limiter, and for writing while its state moves out, so no decision
// counts in a limiter that has handed its state over. Decisions take those
// read locks in the rule's limit order and a change takes the write lock of
// one entry of one limit while holding that limit's table lock only, so
// they cannot deadlock.

// move is memmove.Move, typed.
var move = memmove.Move.(func(from, to *core.Memory, key string) error)

// enforcer is what a Limiter holds for one set.
type enforcer struct {
	// A Decide holds rw for reading from the moment it loads the
	// enforcer to its end; a reload that replaced it takes rw once for
	// writing, so that no request is left deciding under the old set
	// when keys' states move between limiters (see apply).
	rw sync.RWMutex

	set    *Set
	st     Enforcer      // on a Store: what decides; nil in memory
	limits []*limitState // by Limit.index
	rules  []ruleState   // by Rule.index
}

// ruleState is one rule's limits, split.
type ruleState struct {
	rule     *Rule
	enforced []*limitState
	shadow   []*limitState
	layered  *core.Layered // over the enforced limits' shared limiters; nil if none
}

// limitState is one limit's limiters.
type limitState struct {
	limit *Limit
	mem   *core.Memory // the shared limiter, of the limit's policy
	ov    *overrides   // nil when the limit has no overrides

	// On a Store, for a limit with overrides: the policy each key with
	// one of its own was last decided by.
	last *lru.Cache[string, core.Policy]
}

// apply makes set the one in force, carrying each limit's limiters over
// from the set in force as its Diff allows. Nothing changes when it fails.
// The caller holds l.mu.
func (l *Limiter) apply(set *Set) error {
	if l.store != nil {
		return l.applyStore(set)
	}
	old := l.cur.Load()
	var oldSet *Set
	if old != nil {
		if old.set == set {
			return nil
		}
		oldSet = old.set
	}
	diff := Compare(oldSet, set)
	changed := make(map[string]Change, len(diff.Changed))
	for _, c := range diff.Changed {
		changed[c.ID] = c
	}
	e := &enforcer{set: set, limits: make([]*limitState, len(set.limits)), rules: make([]ruleState, len(set.rules))}

	// Every limiter that can fail to build is built before anything
	// shared changes.
	type retune struct {
		m *core.Memory
		p core.Policy
	}
	var retunes []retune
	for i, nl := range set.limits {
		var prev *limitState
		if old != nil {
			if ol := oldSet.byID[nl.id]; ol != nil {
				prev = old.limits[ol.index]
			}
		}
		c, isChanged := changed[nl.id]
		ls := &limitState{limit: nl}
		switch {
		case prev != nil && !isChanged:
			ls.mem, ls.ov = prev.mem, prev.ov
		case prev != nil && !c.Key && c.Old.policy.Algorithm == nl.policy.Algorithm:
			ls.mem, ls.ov = prev.mem, prev.ov
			if c.Policy {
				retunes = append(retunes, retune{prev.mem, nl.policy})
			}
		default:
			m, err := core.New(nl.policy, l.opts...)
			if err != nil {
				return fmt.Errorf("%s: %w", nl.id, err)
			}
			ls.mem = m
		}
		e.limits[i] = ls
	}
	for i, r := range set.rules {
		rs := ruleState{rule: r}
		var mems []*core.Memory
		for _, lim := range r.limits {
			ls := e.limits[lim.index]
			if lim.shadow {
				rs.shadow = append(rs.shadow, ls)
				continue
			}
			rs.enforced = append(rs.enforced, ls)
			mems = append(mems, ls.mem)
		}
		if len(mems) > 0 {
			lay, err := core.NewLayered(mems...)
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			rs.layered = lay
		}
		e.rules[i] = rs
	}
	for _, r := range retunes {
		if err := r.m.SetPolicy(r.p); err != nil {
			// Not reached: the policy is valid, of the limiter's algorithm.
			return fmt.Errorf("%s: %w", r.p.Name, err)
		}
	}
	// Override tables. One whose shared limiter is new is dropped (its
	// keys' usage meant the old key spec or algorithm); one that may still
	// hold keys stays, even if the limit has no overrides now, so that
	// every request for such a key finds its state until it has moved
	// back; a limit with overrides that had none gets a new table.
	type adoption struct {
		o   *overrides
		lim *Limit
	}
	var adopt []adoption
	for i, ls := range e.limits {
		if ls.ov != nil && ls.ov.base != ls.mem {
			ls.ov = nil
		}
		if ls.ov != nil && oldSet != nil && !ls.limit.HasOverrides() {
			if ol := oldSet.byID[ls.limit.id]; ol != nil && !ol.HasOverrides() && ls.ov.lru.Len() == 0 {
				ls.ov = nil // empty, and nothing adds to it
			}
		}
		if ls.ov == nil && ls.limit.HasOverrides() {
			ov, err := newOverrides(ls, l.opts)
			if err != nil {
				return fmt.Errorf("%s: %w", ls.limit.id, err)
			}
			ls.ov = ov
		}
		if ls.ov != nil {
			adopt = append(adopt, adoption{ls.ov, set.limits[i]})
		}
	}
	// From here until they adopt the new set, the tables change nothing
	// (see overrides.settle), under either set: a request decides a key
	// where it is held.
	for _, a := range adopt {
		a.o.freeze()
	}
	l.cur.Store(e)
	// Requests under the old set finish. Then the tables' keys' policies
	// under the new set are asked for (an OverrideFunc may take its
	// time), and the tables adopt them while no request decides at all,
	// so that no state moves while a request may still count where it
	// was.
	if old != nil {
		old.rw.Lock()
		//lint:ignore SA2001 an empty critical section: a barrier
		old.rw.Unlock()
	}
	if len(adopt) == 0 {
		return nil
	}
	plans := make([]map[string]core.Policy, len(adopt))
	for i, a := range adopt {
		plans[i] = a.o.plan(a.lim)
	}
	e.rw.Lock()
	for i, a := range adopt {
		a.o.adopt(a.lim, plans[i])
	}
	e.rw.Unlock()
	return nil
}

// memFor returns the limiter that decides key: the key's own, held for
// reading (the caller releases held), or the limit's shared one. err is
// an override lookup's; the key is then decided where it is held now.
func (ls *limitState) memFor(key string) (m *core.Memory, held *ovEntry, err error) {
	if ls.ov == nil {
		return ls.mem, nil, nil
	}
	p, err := ls.limit.PolicyFor(key)
	o := ls.ov
	e, ok := o.lru.Get(key)
	switch {
	case !ok && (err != nil || p == ls.limit.policy):
		return ls.mem, nil, err
	case ok:
		e.mu.RLock()
		if !e.dead && (err != nil || e.policy == p) {
			return e.mem, e, err
		}
		e.mu.RUnlock()
	}
	m, held = o.settle(ls.limit, key, p, err != nil)
	return m, held, err
}

// overrides is one limit's table of keys with a limiter of their own.
type overrides struct {
	base *core.Memory  // the limit's shared limiter
	opts []core.Option // for the keys' own limiters
	lru  *lru.Cache[string, *ovEntry]

	mu    sync.Mutex // serializes changes of the table and its entries
	limit *Limit     // of the set the table follows; nil until the first
}

// ovEntry is a key's own limiter.
type ovEntry struct {
	mu     sync.RWMutex // read: deciding by mem; write: changing it
	dead   bool         // its state has gone back to base
	policy core.Policy
	mem    *core.Memory
}

func newOverrides(ls *limitState, opts []core.Option) (*overrides, error) {
	o := &overrides{base: ls.mem, opts: append(opts[:len(opts):len(opts)], core.WithMaxKeys(1))}
	c, err := lru.NewWithEvict(MaxOverrideKeys, o.evicted)
	if err != nil {
		return nil, err
	}
	o.lru = c
	return o, nil
}

// evicted moves an entry's state back to the shared limiter, once. It runs
// under o.mu: the table changes only there.
func (o *overrides) evicted(key string, e *ovEntry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return
	}
	e.dead = true
	if e.policy.Algorithm == o.base.Policy().Algorithm {
		_ = move(e.mem, o.base, key) // fails only for arguments it cannot be given here
	}
}

// settle brings key's entry in line with p, its policy under lim, and
// returns the limiter that decides it, as memFor does. A decision under a
// set that a reload has replaced, or whose lookup failed (stay), changes
// nothing: it takes the key where it is held.
func (o *overrides) settle(lim *Limit, key string, p core.Policy, stay bool) (*core.Memory, *ovEntry) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if lim == o.limit && !stay {
		o.change(key, p)
	}
	if e, ok := o.lru.Peek(key); ok {
		e.mu.RLock()
		if !e.dead {
			return e.mem, e
		}
		e.mu.RUnlock()
	}
	return o.base, nil
}

// change makes key's entry hold p: none when p is the limit's policy (the
// state goes back to base), converted when the algorithm stays, a new
// limiter otherwise. The caller holds o.mu.
func (o *overrides) change(key string, p core.Policy) {
	e, ok := o.lru.Peek(key)
	switch {
	case p == o.limit.policy:
		if ok {
			// Moved back before it leaves the table: a request that
			// missed it would decide by the shared limiter before its
			// state had arrived there.
			o.evicted(key, e)
			o.lru.Remove(key)
		}
	case ok && e.policy == p:
	case ok:
		e.mu.Lock()
		if e.policy.Algorithm != p.Algorithm || e.mem.SetPolicy(p) != nil {
			// Another algorithm: the key starts empty under it.
			if m, err := core.New(p, o.opts...); err == nil {
				e.mem = m
			}
		}
		e.policy = p
		e.mu.Unlock()
	default:
		m, err := core.New(p, o.opts...)
		if err != nil {
			return // not reached: PolicyFor returns valid policies
		}
		if p.Algorithm == o.base.Policy().Algorithm {
			_ = move(o.base, m, key)
		}
		o.lru.Add(key, &ovEntry{policy: p, mem: m})
	}
}

// freeze makes the table change nothing until adopt.
func (o *overrides) freeze() {
	o.mu.Lock()
	o.limit = nil
	o.mu.Unlock()
}

// plan returns the policy under lim of every key in the table; a key
// whose lookup fails is left out, and stays as it is until an answer
// comes.
func (o *overrides) plan(lim *Limit) map[string]core.Policy {
	keys := o.lru.Keys()
	ps := make(map[string]core.Policy, len(keys))
	for _, key := range keys {
		if p, err := lim.PolicyFor(key); err == nil {
			ps[key] = p
		}
	}
	return ps
}

// adopt makes lim, of a new set, the table's limit, and settles its keys
// by ps (see plan).
func (o *overrides) adopt(lim *Limit, ps map[string]core.Policy) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.limit = lim
	for key, p := range ps {
		o.change(key, p)
	}
}
