package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
	"github.com/redis/go-redis/v9"
)

// RuleStore enforces a rule set on Redis: it is the [rules.Store] of a
// [rules.NewStoreLimiter], so that every server that loads one rule file
// shares each limit's counts.
//
// Keys. Limit L of rule R keeps key k at
// "<prefix>:<R>:<L>/<algorithm>:{k}", as a [Limiter] of L's policy with
// the prefix "<prefix>:<R>" does: the rule's name keeps two rules' limits
// of one name apart, and no number is in the key, so that a key keeps its
// usage through a reload that changes its limit, and through an override
// gained or lost, converted as [Limiter.SetPolicy] converts it, as of the
// reload (or of the key's last write after it). A limit whose algorithm
// changes finds other keys and starts empty, as in memory; one whose key
// spec changes starts empty too, but for the keys both specs produce.
//
// All or nothing. A rule's enforced limits are decided by one [Layered]
// script, a key and a cost per layer, whose decisions are those of memory's
// core.Layered, field for field. On a Cluster, layers whose keys lie in
// different slots cannot share a script: they are decided slot by slot,
// in layer order, each slot's layers in one script; when one refuses, the
// slots decided before it give their units back (a refund, as
// core.Refunder defines it) and the slots after it are only peeked. That
// never admits more than memory would, and nothing stays counted for a
// refused request; meanwhile a concurrent request may see the units of the
// earlier slots taken, and be refused for it (never admitted for it). The
// Layers of such a refusal report the earlier slots as they decided before
// giving back. A calendar limit ([core.Calendar]) is decided alone in the
// same way, its own "slot".
//
// Failure. When Redis cannot answer, or while a limit's circuit breaker is
// open, each limit of the request is decided by a [core.Failover] over a
// [Limiter] of its key's policy, with the limit's failure policy
// ([rules.Limit.ErrorPolicy]: open, closed, or a fallback to a memory
// share of the policy among the set's instances), in layer order, the
// units of the earlier ones given back when a later one refuses. A
// Failover's breaker opens after its outages in a row (core's default, or
// [WithFailover]'s options), and then no request waits on Redis for it.
//
// A RuleStore is safe for concurrent use. Create one with [NewRuleStore].
type RuleStore struct {
	client redis.UniversalClient
	opts   []Option              // for every limiter it builds, before the rule's prefix
	prefix string                // the keys' first segment
	clock  core.Clock            // WithClock's, or the system clock
	fo     []core.FailoverOption // WithFailover's
	slots  bool                  // a Cluster client
	same   bool                  // a Ring client

	mu     sync.Mutex        // serializes Enforce
	last   *rules.Set        // the set Enforce was last given
	sinces map[string]string // by limit ID: since when it counts as in last, Unix µs
}

var _ rules.Store = (*RuleStore)(nil)

// WithFailover gives options to the [core.Failover] a [RuleStore] decides
// each limit by when Redis cannot answer, such as core.WithBreaker,
// core.WithErrorHook or core.WithTimeout; the error policy is the limit's
// own. Only [NewRuleStore] takes it; [New] and [NewLayered] fail when
// given it. Default: core's.
func WithFailover(opts ...core.FailoverOption) Option {
	return func(o *options) { o.failover = append(o.failover, opts...); o.failoverSet = true }
}

// NewRuleStore returns a store that enforces rule sets on Redis through
// client, for [rules.NewStoreLimiter]. The options are [New]'s, applied
// to every limit ([WithPrefix]: the keys' first segment, before the rule's
// name), and [WithFailover]. It fails for a nil client or an invalid
// option. Give each [rules.Limiter] a store of its own: a store follows
// the reloads of the set it enforces.
func NewRuleStore(client redis.UniversalClient, opts ...Option) (*RuleStore, error) {
	if client == nil {
		return nil, errors.New("redisstore: NewRuleStore: a client is required")
	}
	o, err := applyOptions("NewRuleStore", opts)
	if err != nil {
		return nil, err
	}
	s := &RuleStore{client: client, opts: append([]Option(nil), opts...), prefix: o.prefix, clock: o.clock, fo: o.failover}
	if s.clock == nil {
		s.clock = core.SystemClock{}
	}
	switch client.(type) {
	case *redis.ClusterClient:
		s.slots = true
	case *redis.Ring:
		s.same = true
	}
	return s, nil
}

// Clock returns the clock the store decides by: [WithClock]'s, or the
// system clock on the server's TIME.
func (s *RuleStore) Clock() core.Clock { return s.clock }

// rulePrefix returns the key prefix of rule's limits.
func (s *RuleStore) rulePrefix(rule string) string { return s.prefix + ":" + rule }

// Enforce returns the enforcer of set's limits: a [Layered] per rule over
// its enforced limits, and limiters for the rest, built as requests need
// them. It fails for a rule whose limits Redis cannot enforce together
// (two of one name: not reached for a valid set).
func (s *RuleStore) Enforce(set *rules.Set) (rules.Enforcer, error) {
	now := unixMicro(s.clock.Now())
	if _, ok := s.clock.(core.SystemClock); ok {
		now = unixMicro(time.Now())
	}
	nowArg := strconv.FormatInt(now, 10)
	// A limit that counts as it did keeps the time it took its numbers:
	// a key not called since then is converted as of that time, as
	// memory's SetPolicy converts it, whatever reloads came between.
	s.mu.Lock()
	defer s.mu.Unlock()
	sinces := make(map[string]string, len(set.Limits()))
	for _, id := range rules.Compare(s.last, set).Unchanged {
		if v, ok := s.sinces[id]; ok {
			sinces[id] = v
		}
	}
	e := &ruleEnforcer{s: s, since: make(map[*rules.Limit]any, len(set.Limits())), cache: make(map[string]any)}
	for _, lim := range set.Limits() {
		if _, ok := sinces[lim.ID()]; !ok {
			sinces[lim.ID()] = nowArg
		}
		e.since[lim] = sinces[lim.ID()]
	}
	for _, r := range set.Rules() {
		var base []rules.Layer
		for _, lim := range r.Limits() {
			if !lim.Shadow() && lim.Policy().Calendar == 0 {
				base = append(base, rules.Layer{Limit: lim, Policy: lim.Policy()})
			}
		}
		if len(base) > 0 {
			if _, err := e.layered(base); err != nil {
				return nil, fmt.Errorf("redisstore: rule %s: %w", r.Name(), err)
			}
		}
	}
	s.last, s.sinces = set, sinces
	return e, nil
}

// ruleEnforcer decides one set's limits.
type ruleEnforcer struct {
	s     *RuleStore
	since map[*rules.Limit]any // since when each limit counts as it does, Unix µs (a string, boxed once)
	mu    sync.RWMutex
	cache map[string]any // by kind, layers and policies (cacheKey): *Layered, *Limiter, *core.Failover
}

// maxCached bounds an enforcer's limiters: past it, the cache starts over
// (the limiters hold no counts, Redis does; a Failover's breaker and
// fallback start over too).
const maxCached = 4096

// cacheKey appends to b the identity of a limiter of kind over layers:
// their limits and policies.
func cacheKey(b []byte, kind byte, layers []rules.Layer) []byte {
	b = append(b, kind)
	for _, ly := range layers {
		p := ly.Policy
		b = append(b, ly.Limit.ID()...)
		for _, v := range [...]int64{int64(p.Algorithm), p.Limit, int64(p.Window), p.Burst, int64(p.Calendar)} {
			b = append(b, '|')
			b = strconv.AppendInt(b, v, 10)
		}
		if p.Calendar != 0 {
			b = append(b, '@')
			b = append(b, zoneName(p)...)
		}
		b = append(b, ';')
	}
	return b
}

// cached returns the limiter of kind over layers, built by build the first
// time.
func (e *ruleEnforcer) cached(kind byte, layers []rules.Layer, build func() (any, error)) (any, error) {
	var buf [160]byte
	key := cacheKey(buf[:0], kind, layers)
	e.mu.RLock()
	v, ok := e.cache[string(key)]
	e.mu.RUnlock()
	if ok {
		return v, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.cache[string(key)]; ok {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return nil, err
	}
	if len(e.cache) >= maxCached {
		clear(e.cache)
	}
	e.cache[string(key)] = v
	return v, nil
}

// layered returns the Layered of layers' limits and policies, one rule's.
func (e *ruleEnforcer) layered(layers []rules.Layer) (*Layered, error) {
	v, err := e.cached('L', layers, func() (any, error) {
		ps := make([]core.Policy, len(layers))
		for i, ly := range layers {
			ps[i] = ly.Policy
		}
		return e.s.newLayered(ps, layers[0].Limit.Rule())
	})
	if err != nil {
		return nil, err
	}
	return v.(*Layered), nil
}

// single returns the Limiter of ly's limit and policy.
func (e *ruleEnforcer) single(ly rules.Layer) (*Limiter, error) {
	v, err := e.cached('S', []rules.Layer{ly}, func() (any, error) {
		return e.s.newLimiter(ly.Policy, ly.Limit.Rule())
	})
	if err != nil {
		return nil, err
	}
	return v.(*Limiter), nil
}

// failover returns the Failover that decides ly when Redis cannot.
func (e *ruleEnforcer) failover(ly rules.Layer) (*core.Failover, error) {
	v, err := e.cached('F', []rules.Layer{ly}, func() (any, error) {
		remote, err := e.s.newLimiter(ly.Policy, ly.Limit.Rule())
		if err != nil {
			return nil, err
		}
		opts := append([]core.FailoverOption{core.WithClock(e.s.clock)}, e.s.fo...)
		opts = append(opts, core.WithErrorPolicy(ly.Limit.ErrorPolicy()))
		return core.NewFailover(remote, opts...)
	})
	if err != nil {
		return nil, err
	}
	return v.(*core.Failover), nil
}

// newLayered is NewLayered of ps under rule's prefix, its script loaded
// by its first call (EVAL once on NOSCRIPT), so that building one never
// waits on Redis.
func (s *RuleStore) newLayered(ps []core.Policy, rule string) (*Layered, error) {
	opts := append(append([]Option(nil), s.opts...), WithPrefix(s.rulePrefix(rule)))
	return buildLayered("NewRuleStore", s.client, ps, opts)
}

// newLimiter is a Limiter of p under rule's prefix, unbatched (a rule's
// decisions are layered scripts), its script loaded by its first call.
func (s *RuleStore) newLimiter(p core.Policy, rule string) (*Limiter, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	opts := append(append([]Option(nil), s.opts...), WithPrefix(s.rulePrefix(rule)))
	o, err := applyOptions("NewRuleStore", opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		client:  s.client,
		margin:  int64((o.margin + time.Millisecond - 1) / time.Millisecond),
		prefix:  o.prefix + ":" + policySegment(p) + ":{",
		clock:   o.clock,
		timeout: o.timeout,
	}
	c, err := l.confOf(p)
	if err != nil {
		return nil, fmt.Errorf("redisstore: NewRuleStore: %w", err)
	}
	l.cur.Store(c)
	return l, nil
}

// tagOf returns the hash tag of key in the store's keys.
func tagOf(key string) string {
	k := (&Limiter{}).key(key)
	return k[:len(k)-1]
}

// slotGroup is the layers of one request that one script decides.
type slotGroup struct {
	idx []int // the layers' indexes in the request
	cal bool  // one calendar layer, decided by a Limiter
}

// groups splits layers into the groups that one script each can decide:
// one on a single node, unless a layer has calendar windows; on a Cluster
// one per slot, on a Ring one per key, in the order of their first layers.
func (e *ruleEnforcer) groups(layers []rules.Layer, buf []slotGroup) []slotGroup {
	gs := buf[:0]
	var tags []int // each group's slot, or its key's first layer index on a Ring
outer:
	for i, ly := range layers {
		if ly.Policy.Calendar != 0 {
			gs = append(gs, slotGroup{idx: []int{i}, cal: true})
			tags = append(tags, -1)
			continue
		}
		tag := 0
		switch {
		case e.s.slots:
			tag = keySlot(tagOf(ly.Key))
		case e.s.same:
			tag = i
			for j := range i {
				if layers[j].Key == ly.Key {
					tag = j
					break
				}
			}
		}
		for g := range gs {
			if !gs[g].cal && tags[g] == tag {
				gs[g].idx = append(gs[g].idx, i)
				continue outer
			}
		}
		gs = append(gs, slotGroup{idx: []int{i}})
		tags = append(tags, tag)
	}
	return gs
}

// Decide decides layers, all or nothing, on Redis or, when it cannot
// answer, by each limit's failure policy (see [RuleStore]).
func (e *ruleEnforcer) Decide(ctx context.Context, layers []rules.Layer, commit bool, dst []core.Decision) (core.LayeredDecision, error) {
	if len(layers) == 0 {
		return core.LayeredDecision{Layer: -1}, errors.New("redisstore: no layers")
	}
	for _, ly := range layers {
		fo, err := e.failover(ly)
		if err != nil {
			return core.LayeredDecision{Layer: -1}, err
		}
		if fo.BreakerOpen() {
			return e.decideFailover(ctx, layers, commit, dst)
		}
	}
	ld, err := e.decideRedis(ctx, layers, commit, dst)
	if err == nil || core.CallerError(ctx, err) {
		return ld, err
	}
	return e.decideFailover(ctx, layers, commit, dst)
}

// decideRedis decides layers on Redis, group by group.
func (e *ruleEnforcer) decideRedis(ctx context.Context, layers []rules.Layer, commit bool, dst []core.Decision) (core.LayeredDecision, error) {
	var gbuf [4]slotGroup
	gs := e.groups(layers, gbuf[:0])
	if len(gs) == 1 && !gs[0].cal {
		return e.decideGroup(ctx, layers, gs[0], commit, dst)
	}
	ds := append(dst[:0], make([]core.Decision, len(layers))...)
	decide := func(g int, commit bool) (bool, error) {
		gd, err := e.decideGroup(ctx, layers, gs[g], commit, nil)
		if err != nil {
			return false, err
		}
		for j, i := range gs[g].idx {
			ds[i] = gd.Layers[j]
		}
		return gd.Allowed, nil
	}
	refund := func(g int, elapsed time.Duration, failed bool) {
		gr := gs[g]
		if e.refundGroup(ctx, layers, gr, elapsed) != nil || failed {
			return
		}
		// Given back: the request counts nowhere. A refused request's
		// layers then report their state as it is, as memory's do.
		if gd, err := e.decideGroup(ctx, layers, gr, false, nil); err == nil {
			for j, i := range gr.idx {
				ds[i] = gd.Layers[j]
			}
		}
	}
	if _, err := decideGroups(e.s.clock, len(gs), commit, decide, refund); err != nil {
		return core.LayeredDecision{Layer: -1}, err
	}
	return core.MostRestrictive(ds), nil
}

// decideGroup decides the layers of gr in one script.
func (e *ruleEnforcer) decideGroup(ctx context.Context, layers []rules.Layer, gr slotGroup, commit bool, dst []core.Decision) (core.LayeredDecision, error) {
	if gr.cal {
		ly := layers[gr.idx[0]]
		l, err := e.single(ly)
		if err != nil {
			return core.LayeredDecision{Layer: -1}, err
		}
		var d core.Decision
		if commit {
			d, err = l.AllowN(ctx, ly.Key, ly.Cost)
		} else {
			d, err = l.Peek(ctx, ly.Key, ly.Cost)
		}
		return core.MostRestrictive(append(dst[:0], d)), err
	}
	sub := make([]rules.Layer, len(gr.idx))
	keys := make([]string, len(gr.idx))
	costs := make([]int64, len(gr.idx))
	sinces := make([]any, len(gr.idx))
	for j, i := range gr.idx {
		sub[j], keys[j], costs[j], sinces[j] = layers[i], layers[i].Key, layers[i].Cost, e.since[layers[i].Limit]
	}
	lay, err := e.layered(sub)
	if err != nil {
		return core.LayeredDecision{Layer: -1}, err
	}
	return lay.decideAt(ctx, keys, costs, sinces, commit, dst)
}

// refundGroup gives back the layers of gr in one script.
func (e *ruleEnforcer) refundGroup(ctx context.Context, layers []rules.Layer, gr slotGroup, elapsed time.Duration) error {
	if gr.cal {
		ly := layers[gr.idx[0]]
		l, err := e.single(ly)
		if err != nil {
			return err
		}
		return l.Refund(ctx, ly.Key, ly.Cost, elapsed)
	}
	sub := make([]rules.Layer, len(gr.idx))
	keys := make([]string, len(gr.idx))
	costs := make([]int64, len(gr.idx))
	sinces := make([]any, len(gr.idx))
	for j, i := range gr.idx {
		sub[j], keys[j], costs[j], sinces[j] = layers[i], layers[i].Key, layers[i].Cost, e.since[layers[i].Limit]
	}
	lay, err := e.layered(sub)
	if err != nil {
		return err
	}
	return lay.refundAt(ctx, keys, costs, sinces, elapsed)
}

// decideFailover decides layers one by one by their Failovers, giving
// back what the earlier ones counted when a later one refuses.
func (e *ruleEnforcer) decideFailover(ctx context.Context, layers []rules.Layer, commit bool, dst []core.Decision) (core.LayeredDecision, error) {
	ds := dst[:0]
	decide := func(i int, commit bool) (bool, error) {
		ly := layers[i]
		fo, err := e.failover(ly)
		if err != nil {
			return false, err
		}
		var d core.Decision
		if commit {
			d, err = fo.AllowN(ctx, ly.Key, ly.Cost)
		} else {
			d, err = fo.Peek(ctx, ly.Key, ly.Cost)
		}
		ds = append(ds, d)
		return d.Allowed, err
	}
	refund := func(i int, elapsed time.Duration, _ bool) {
		ly := layers[i]
		if fo, err := e.failover(ly); err == nil {
			_ = fo.Refund(ctx, ly.Key, ly.Cost, elapsed)
		}
	}
	if _, err := decideGroups(e.s.clock, len(layers), commit, decide, refund); err != nil {
		ld := core.LayeredDecision{Layer: len(ds) - 1, Layers: ds}
		if len(ds) > 0 {
			ld.Decision = ds[len(ds)-1]
		}
		return ld, err
	}
	return core.MostRestrictive(ds), nil
}

// Refund gives back what an allowed Decide of layers counted: on Redis,
// group by group, or by the limits' Failovers for the groups Redis could
// not refund (see [core.Failover.Refund]).
func (e *ruleEnforcer) Refund(ctx context.Context, layers []rules.Layer, elapsed time.Duration) error {
	var gbuf [4]slotGroup
	gs := e.groups(layers, gbuf[:0])
	var errs []error
	for g, gr := range gs {
		err := e.refundGroup(ctx, layers, gr, elapsed)
		if err == nil {
			continue
		}
		if core.CallerError(ctx, err) {
			return err
		}
		for _, gr := range gs[g:] {
			for _, i := range gr.idx {
				fo, err := e.failover(layers[i])
				if err == nil {
					err = fo.Refund(ctx, layers[i].Key, layers[i].Cost, elapsed)
				}
				if err != nil {
					errs = append(errs, err)
				}
			}
		}
		break
	}
	return errors.Join(errs...)
}

// Reset forgets ly's key in its limit: one DEL.
func (e *ruleEnforcer) Reset(ctx context.Context, ly rules.Layer) error {
	l, err := e.single(ly)
	if err != nil {
		return err
	}
	return l.Reset(ctx, ly.Key)
}
