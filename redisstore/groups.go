package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
)

// decideGroups decides a request whose layers are split into n groups,
// each group one all-or-nothing decision of its own (one script, or one
// Failover), in order, all or nothing across the groups. decide(g, commit)
// decides group g, counting when commit is set, and records its layers'
// decisions; once a group refuses, the later ones are only peeked, and
// once one fails, none after it is decided. When a group refused or
// failed, the groups that counted before it give their units back:
// refund(g, elapsed, failed) for each, elapsed measured on clock since
// the first decision, failed set when a group failed (not refused). It
// returns whether every group allowed, and the error of the one that
// failed. It never admits more than one script over every layer would;
// meanwhile a concurrent request may see the earlier groups' units taken,
// and be refused for it, never admitted for it.
func decideGroups(clock core.Clock, n int, commit bool,
	decide func(g int, commit bool) (allowed bool, err error),
	refund func(g int, elapsed time.Duration, failed bool),
) (bool, error) {
	start := clock.Now()
	done := 0 // the groups that counted
	refused := false
	var failed error
	for g := range n {
		ok, err := decide(g, commit && !refused)
		if err != nil {
			failed = err
			break
		}
		if !ok {
			refused = true
		} else if commit && !refused {
			done = g + 1
		}
	}
	if (refused || failed != nil) && done > 0 {
		elapsed := max(clock.Now().Sub(start), 0)
		for g := range done {
			refund(g, elapsed, failed != nil)
		}
	}
	return !refused && failed == nil, failed
}

// maxSubs bounds the sub-limiters a [Layered] keeps for deciding its
// layers slot by slot; past it, a request builds its own.
const maxSubs = 256

// subs are the Layereds over subsets of a Layered's layers that decide
// them slot by slot, for one layeredConf.
type subs struct {
	mu sync.Mutex
	m  map[string]*Layered // by the layers' indexes
}

// sub returns the Layered over the layers idx of l under c: the same
// client, prefixes, clock and margin, and c's policies taken when c's
// were, so that each layer decides and counts as it does in l.
func (l *Layered) sub(c *layeredConf, idx []int) *Layered {
	var buf [64]byte
	key := buf[:0]
	for _, i := range idx {
		key = binary.AppendUvarint(key, uint64(i))
	}
	c.subs.mu.Lock()
	s := c.subs.m[string(key)]
	c.subs.mu.Unlock()
	if s != nil {
		return s
	}
	s = &Layered{run: l.run, layers: make([]*Limiter, len(idx)), margin: l.margin, slots: l.slots, same: l.same}
	ps := make([]core.Policy, len(idx))
	for j, i := range idx {
		s.layers[j], ps[j] = l.layers[i], c.policies[i]
	}
	sc := s.confOf(ps)
	sc.since = c.since
	s.cur.Store(sc)
	c.subs.mu.Lock()
	defer c.subs.mu.Unlock()
	if prev := c.subs.m[string(key)]; prev != nil {
		return prev
	}
	if len(c.subs.m) < maxSubs {
		if c.subs.m == nil {
			c.subs.m = make(map[string]*Layered)
		}
		c.subs.m[string(key)] = s
	}
	return s
}

// slotGroups splits the layers of keys (one per layer, or one for all)
// into the groups that one script each can decide: one on a single node
// or Sentinel, or when every layer has the same key; on a Cluster one per
// slot, on a Ring one per key, in the order of their first layers.
func (l *Layered) slotGroups(keys []string) [][]int {
	all := func() [][]int {
		idx := make([]int, len(l.layers))
		for i := range idx {
			idx[i] = i
		}
		return [][]int{idx}
	}
	if !(l.slots || l.same) || len(keys) == 1 {
		return all()
	}
	var gs [][]int
	var tags []int // each group's slot, or its first layer's index on a Ring
outer:
	for i := range l.layers {
		tag := i
		if l.slots {
			k := l.layers[i].key(keys[i])
			tag = keySlot(k[len(l.layers[i].prefix) : len(k)-1])
		} else {
			for j := range i {
				if keys[j] == keys[i] {
					tag = j
					break
				}
			}
		}
		for g := range gs {
			if tags[g] == tag {
				gs[g] = append(gs[g], i)
				continue outer
			}
		}
		gs = append(gs, []int{i})
		tags = append(tags, tag)
	}
	return gs
}

// AllowCostsBySlot is [Layered.AllowCosts] for keys that may lie in
// different Cluster slots (or, on a [redis.Ring], differ). On a single
// node or Sentinel, or when the keys share a slot, it is AllowCosts: one
// atomic script. Otherwise the layers are decided slot by slot, in the
// order of their first layers, each slot's layers in one script; when one
// slot refuses, the slots decided before it give their units back (as
// [Layered.RefundCosts] does) and the slots after it are only peeked.
// That never admits more than one script over every layer would, and
// nothing stays counted for a refused request; meanwhile a concurrent
// request may see the units of the earlier slots taken, and be refused
// for it, never admitted for it. A refused request's Layers report each
// layer's state as it is once given back, as memory's do.
//
// When it returns an error from Redis, the slots decided before the one
// that failed have given their units back (as far as Redis answered),
// and that slot's units may have been counted, as for AllowCosts.
func (l *Layered) AllowCostsBySlot(ctx context.Context, keys []string, costs []int64, dst []core.Decision) (core.LayeredDecision, error) {
	return l.bySlot(ctx, keys, costs, true, dst)
}

// PeekCostsBySlot reports what [Layered.AllowCostsBySlot] would decide
// now, counting nothing: one script per slot.
func (l *Layered) PeekCostsBySlot(ctx context.Context, keys []string, costs []int64, dst []core.Decision) (core.LayeredDecision, error) {
	return l.bySlot(ctx, keys, costs, false, dst)
}

func (l *Layered) bySlot(ctx context.Context, keys []string, costs []int64, commit bool, dst []core.Decision) (core.LayeredDecision, error) {
	if err := l.checkCosts(costs); err != nil {
		return core.LayeredDecision{Layer: -1}, err
	}
	if err := l.checkKeys(keys); err != nil {
		return core.LayeredDecision{Layer: -1}, err
	}
	gs := l.slotGroups(keys)
	if len(gs) == 1 {
		return l.decideAt(ctx, keys, costs, nil, commit, dst)
	}
	c := l.cur.Load()
	for i, p := range c.policies {
		// Checked before any slot is sent, as one script would.
		if err := checkCost(layerKey(keys, i), costs[i], c.costs[i], i); err != nil {
			return core.LayeredDecision{Decision: core.Decision{Limit: p.Limit, Policy: p}, Layer: i}, err
		}
	}
	ds := append(dst[:0], make([]core.Decision, len(l.layers))...)
	subKeys := make([]string, 0, len(l.layers))
	subCosts := make([]int64, 0, len(l.layers))
	sub := func(g int) (*Layered, []string, []int64) {
		subKeys, subCosts = subKeys[:0], subCosts[:0]
		for _, i := range gs[g] {
			subKeys, subCosts = append(subKeys, layerKey(keys, i)), append(subCosts, costs[i])
		}
		return l.sub(c, gs[g]), subKeys, subCosts
	}
	decide := func(g int, commit bool) (bool, error) {
		s, ks, cs := sub(g)
		gd, err := s.decideAt(ctx, ks, cs, nil, commit, nil)
		if err != nil {
			return false, err
		}
		for j, i := range gs[g] {
			ds[i] = gd.Layers[j]
		}
		return gd.Allowed, nil
	}
	refund := func(g int, elapsed time.Duration, failed bool) {
		s, ks, cs := sub(g)
		if s.refundAt(ctx, ks, cs, nil, elapsed) != nil || failed {
			return
		}
		// Given back: the request counts nowhere, and its layers report
		// their state as it is, as memory's do.
		if gd, err := s.decideAt(ctx, ks, cs, nil, false, nil); err == nil {
			for j, i := range gs[g] {
				ds[i] = gd.Layers[j]
			}
		}
	}
	if _, err := decideGroups(l.clock(), len(gs), commit, decide, refund); err != nil {
		return core.LayeredDecision{Layer: -1}, err
	}
	return core.MostRestrictive(ds), nil
}

// RefundCostsBySlot is [Layered.RefundCosts] for keys that may lie in
// different Cluster slots, as for [Layered.AllowCostsBySlot]: one script
// per slot, each atomic. It fails, giving back nothing, for the arguments
// RefundCosts rejects; when Redis fails for a slot, the others are still
// given back, and the errors are joined.
func (l *Layered) RefundCostsBySlot(ctx context.Context, keys []string, costs []int64, elapsed time.Duration) error {
	if err := l.checkCosts(costs); err != nil {
		return err
	}
	if err := l.checkKeys(keys); err != nil {
		return err
	}
	gs := l.slotGroups(keys)
	if len(gs) == 1 {
		return l.refundAt(ctx, keys, costs, nil, elapsed)
	}
	c := l.cur.Load()
	for i := range l.layers {
		if err := checkCost(layerKey(keys, i), costs[i], c.costs[i], i); err != nil {
			return err
		}
		if err := checkElapsed(elapsed); err != nil {
			return err
		}
	}
	var errs []error
	for _, g := range gs {
		ks := make([]string, len(g))
		cs := make([]int64, len(g))
		for j, i := range g {
			ks[j], cs[j] = layerKey(keys, i), costs[i]
		}
		if err := l.sub(c, g).refundAt(ctx, ks, cs, nil, elapsed); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// clock returns the clock that measures the time between a slot's
// decision and its refund: WithClock's, or the system clock.
func (l *Layered) clock() core.Clock {
	if l.run.clock != nil {
		return l.run.clock
	}
	return core.SystemClock{}
}
