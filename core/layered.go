package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Layered is a [Limiter] made of several limits on one request, such as 10
// per second and 1,000 per day on the same key, or one limit per client IP
// and another per account. A request passes only if every layer passes, and
// a denied request counts nothing in any layer: all or nothing, atomically,
// so the layers never admit more than any one of them alone would.
//
// Each layer is a [Memory] limiter; layers on another store are not accepted
// (the Redis store has a layered limiter of its own). [Layered.AllowN]
// returns the most restrictive layer's Decision; [Layered.AllowKeys] and
// [Layered.AllowLayers] also return every layer's Decision, for headers that
// show each limit, and [Layered.AllowCosts] takes a key and a cost per
// layer.
//
// A Layered is safe for concurrent use, and Layered limiters sharing Memory
// limiters in any order cannot deadlock. Its methods ignore ctx, like
// [Memory]'s. Create one with [NewLayered].
type Layered struct {
	// A request locks the shard of its key in every layer, checks every layer,
	// and counts in every layer only if all pass, before it unlocks: no other
	// request for those keys can slip in between. Shards are locked in one
	// global order (Memory limiters are numbered when created), so layered
	// limiters sharing Memory limiters in any order cannot deadlock, and no
	// global lock is taken: requests whose keys lie in other shards proceed in
	// parallel. Layers on another store (Redis) are not accepted because checking
	// them one after the other could not be made atomic; the Redis store's
	// layered limiter checks every layer in one script and decides as this one
	// does.

	layers []*Memory
	order  []int // layer indexes by Memory id: the lock order
}

var _ MultiKeyLimiter = (*Layered)(nil)

// LayeredLimiter is a [Limiter] made of several layers that can report
// every layer's Decision, not only the most restrictive one: [Layered] in
// memory, the Redis store's layered limiter, and a ratekit wrapper around
// either (see [As]). HTTP middleware uses it to write one RateLimit member
// per layer.
//
// AllowLayers and PeekLayers decide exactly as AllowN and Peek, with the
// same key for every layer; the embedded Decision of their result is what
// AllowN and Peek return. Both are safe for concurrent use.
type LayeredLimiter interface {
	Limiter

	// AllowLayers is AllowN that also returns every layer's Decision, in
	// layer order (see [LayeredDecision]).
	AllowLayers(ctx context.Context, key string, n int64) (LayeredDecision, error)

	// PeekLayers reports what AllowLayers would decide now, counting
	// nothing.
	PeekLayers(ctx context.Context, key string, n int64) (LayeredDecision, error)
}

// MultiKeyLimiter is a [LayeredLimiter] that can key each layer apart, so
// that one request is decided against several keys at once, all or
// nothing: a client IP in one layer and an account in another. [Layered]
// and the Redis store's layered limiter implement it; wrappers do not pass
// it on, so call it on the layered limiter itself.
//
// In each method, keys[i] is layer i's key, or keys holds one key for
// every layer. Every method is safe for concurrent use.
type MultiKeyLimiter interface {
	LayeredLimiter
	Refunder

	// Policies returns the layers' policies, in layer order.
	Policies() []Policy

	// AllowKeys is AllowLayers with a key per layer.
	AllowKeys(ctx context.Context, keys []string, n int64) (LayeredDecision, error)

	// PeekKeys reports what AllowKeys would decide now, counting nothing.
	PeekKeys(ctx context.Context, keys []string, n int64) (LayeredDecision, error)

	// RefundKeys is Refund with a key per layer.
	RefundKeys(ctx context.Context, keys []string, n int64, elapsed time.Duration) error

	// ResetKeys forgets keys[i] in layer i.
	ResetKeys(ctx context.Context, keys []string) error
}

// LayeredDecision is what a [Layered] limiter decided for one request: the
// Decision of the most restrictive layer (see [Layered.AllowN]), embedded, and
// every layer's own.
type LayeredDecision struct {
	// Decision is the most restrictive layer's, as [Layered.AllowN]
	// returns it.
	Decision
	// Layer is the index of that layer in [NewLayered]'s arguments.
	Layer int
	// Layers holds every layer's Decision, in layer order. When AllowN
	// allowed the request, each describes that layer after counting it.
	// When it was denied, or for a Peek, nothing was counted anywhere and
	// each is what [Memory.Peek] reports for that layer: its state as it
	// is, Allowed for the layers that would have let it through.
	Layers []Decision
}

// NewLayered returns a limiter that lets a request through only when every
// layer does. It fails when given no layer, a nil one, or the same [Memory]
// twice (two layers must not share state: checking both before counting in
// either could then let through more than the limit).
func NewLayered(layers ...*Memory) (*Layered, error) {
	if len(layers) == 0 {
		return nil, errors.New("core: NewLayered: at least one layer is required")
	}
	l := &Layered{layers: slices.Clone(layers), order: make([]int, len(layers))}
	for i, m := range layers {
		if m == nil {
			return nil, fmt.Errorf("core: NewLayered: layer %d is nil", i)
		}
		for j := range i {
			if layers[j] == m {
				return nil, fmt.Errorf("core: NewLayered: layers %d and %d are the same Memory limiter", j, i)
			}
		}
		l.order[i] = i
	}
	slices.SortFunc(l.order, func(a, b int) int {
		return cmpUint64(layers[a].id, layers[b].id)
	})
	return l, nil
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Policies returns the policies of the layers, in layer order.
func (l *Layered) Policies() []Policy {
	ps := make([]Policy, len(l.layers))
	for i, m := range l.layers {
		ps[i] = m.Policy()
	}
	return ps
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Layered) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN reports whether n units may be spent for key now in every layer
// and, if so, counts them in every layer; a denied request counts nothing
// anywhere. A cost above any layer's capacity is [ErrCostTooHigh], with
// that layer's Limit and Policy in the Decision.
//
// The Decision is the most restrictive layer's ([MostRestrictive] makes the
// choice), with that layer's Limit, ResetAfter and Policy:
//
//   - when the request is denied, the denying layer with the largest
//     RetryAfter, the first of them in layer order on a tie. Its RetryAfter
//     is exact for the whole request: every layer allows it then, and not
//     1µs earlier, if nothing else arrives in between (a layer that allows
//     a request keeps allowing it while no other request is counted);
//   - when it is allowed, the layer with the smallest Remaining, the first
//     on a tie, so Remaining is what the key can still spend in every layer
//     at once. Its Delay is the largest Delay of all layers (leaky buckets
//     queue the request in each).
func (l *Layered) AllowN(_ context.Context, key string, n int64) (Decision, error) {
	var buf [4]Decision
	d, err := l.decide([]string{key}, []int64{n}, true, buf[:0])
	return d.Decision, err
}

// Peek reports what AllowN would decide now, counting nothing: the most
// restrictive layer's state as it is (see [Limiter]), chosen as AllowN
// chooses.
func (l *Layered) Peek(_ context.Context, key string, n int64) (Decision, error) {
	var buf [4]Decision
	d, err := l.decide([]string{key}, []int64{n}, false, buf[:0])
	return d.Decision, err
}

// AllowKeys is AllowN with a key per layer: keys[i] is layer i's key (such
// as the client IP for one layer and the account for another), or keys
// holds one key for every layer. It also returns every layer's Decision.
func (l *Layered) AllowKeys(_ context.Context, keys []string, n int64) (LayeredDecision, error) {
	return l.decide(keys, []int64{n}, true, make([]Decision, 0, len(l.layers)))
}

// PeekKeys reports what AllowKeys would decide now, counting nothing.
func (l *Layered) PeekKeys(_ context.Context, keys []string, n int64) (LayeredDecision, error) {
	return l.decide(keys, []int64{n}, false, make([]Decision, 0, len(l.layers)))
}

// AllowLayers is AllowKeys with key for every layer; see [LayeredLimiter].
func (l *Layered) AllowLayers(_ context.Context, key string, n int64) (LayeredDecision, error) {
	return l.decide([]string{key}, []int64{n}, true, make([]Decision, 0, len(l.layers)))
}

// PeekLayers reports what AllowLayers would decide now, counting nothing.
func (l *Layered) PeekLayers(_ context.Context, key string, n int64) (LayeredDecision, error) {
	return l.decide([]string{key}, []int64{n}, false, make([]Decision, 0, len(l.layers)))
}

// AllowCosts is AllowKeys with a cost per layer: costs[i] units are
// counted in layer i for keys[i] (keys holds one key per layer, or one for
// every layer), all or nothing, as [Layered.AllowN] decides. costs must
// hold exactly one cost per layer, each positive and at most its layer's
// capacity: otherwise it fails, counting nothing, with [ErrInvalidCost] or
// [ErrCostTooHigh] (that layer's Limit and Policy in the Decision, Layer
// its index). A layer that denies counts nothing in any layer.
//
// The layers' Decisions are appended to dst[:0], which the result's Layers
// then is: a caller that passes a dst with room for every layer decides
// without allocating.
func (l *Layered) AllowCosts(_ context.Context, keys []string, costs []int64, dst []Decision) (LayeredDecision, error) {
	if err := l.checkCosts(costs); err != nil {
		return LayeredDecision{Layer: -1}, err
	}
	return l.decide(keys, costs, true, dst[:0])
}

// PeekCosts reports what AllowCosts would decide now, counting nothing.
func (l *Layered) PeekCosts(_ context.Context, keys []string, costs []int64, dst []Decision) (LayeredDecision, error) {
	if err := l.checkCosts(costs); err != nil {
		return LayeredDecision{Layer: -1}, err
	}
	return l.decide(keys, costs, false, dst[:0])
}

// Reset forgets key in every layer. Each layer is reset in turn: a request
// running at the same time may see some layers reset and others not.
func (l *Layered) Reset(ctx context.Context, key string) error {
	return l.ResetKeys(ctx, []string{key})
}

// ResetKeys is Reset with a key per layer, as for [Layered.AllowKeys].
func (l *Layered) ResetKeys(ctx context.Context, keys []string) error {
	if err := l.checkKeys(keys); err != nil {
		return err
	}
	for i, m := range l.layers {
		if err := m.Reset(ctx, keys[min(i, len(keys)-1)]); err != nil {
			return err
		}
	}
	return nil
}

// Refund gives back n units that AllowN counted for key at most elapsed ago,
// in every layer; see [Refunder]. It fails, giving back nothing, for the
// arguments AllowN rejects (a cost above any layer's capacity included) and
// for a negative elapsed.
func (l *Layered) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	return l.RefundKeys(ctx, []string{key}, n, elapsed)
}

// RefundKeys is Refund with a key per layer, as for [Layered.AllowKeys].
//
// Each layer gives back in turn, under its own key's shard lock, rather
// than under the locks of every layer at once as a decision is made: a
// refund only ever frees room, each layer's by its own rule, so a request
// decided between two layers' refunds sees the earlier layers refunded and
// the later ones not yet, which is never more room than after the refund.
func (l *Layered) RefundKeys(_ context.Context, keys []string, n int64, elapsed time.Duration) error {
	return l.refund(keys, []int64{n}, elapsed)
}

// RefundCosts is RefundKeys with a cost per layer, as for
// [Layered.AllowCosts]: it gives back costs[i] units in layer i. It fails,
// giving back nothing, for the arguments AllowCosts rejects and for a
// negative elapsed.
func (l *Layered) RefundCosts(_ context.Context, keys []string, costs []int64, elapsed time.Duration) error {
	if err := l.checkCosts(costs); err != nil {
		return err
	}
	return l.refund(keys, costs, elapsed)
}

// refund is RefundCosts, with costs holding one cost per layer or one for
// every layer.
func (l *Layered) refund(keys []string, costs []int64, elapsed time.Duration) error {
	if err := l.checkKeys(keys); err != nil {
		return err
	}
	key := func(i int) string { return keys[min(i, len(keys)-1)] }
	cost := func(i int) int64 { return costs[min(i, len(costs)-1)] }
	for i, m := range l.layers {
		if err := checkRefund(key(i), cost(i), m.set.Load().cost, elapsed); err != nil {
			return err
		}
	}
	e := elapsedMicros(elapsed)
	for i, m := range l.layers {
		now := m.now()
		m.eng.refund(key(i), now, now-e, cost(i))
	}
	return nil
}

func (l *Layered) checkKeys(keys []string) error {
	if len(keys) != 1 && len(keys) != len(l.layers) {
		return fmt.Errorf("core: layered: %d keys for %d layers; want one, or one per layer", len(keys), len(l.layers))
	}
	return nil
}

func (l *Layered) checkCosts(costs []int64) error {
	if len(costs) != len(l.layers) {
		return fmt.Errorf("core: layered: %d costs for %d layers; want one per layer", len(costs), len(l.layers))
	}
	return nil
}

// layerRef is one layer's part of a request: where its key lives and the
// time read from its clock.
type layerRef struct {
	ref keyRef
	now int64
}

// decide checks every layer under the locks of their keys' shards and, when
// commit is set and all pass, counts in all: costs[i] units in layer i, or
// costs[0] in every layer when it holds one. out receives each layer's
// Decision. Every decision of a Layered goes through it.
func (l *Layered) decide(keys []string, costs []int64, commit bool, out []Decision) (LayeredDecision, error) {
	d, _, err := l.decideAtMost(keys, costs, commit, false, out)
	return d, err
}

// decideAtMost is decide, or with atMost, the decision of as many units of
// costs[0] as every layer has room for ([Layered.AllowAtMost]): it peeks
// one unit in every layer under the locks and, if all allow it, decides
// the smallest of costs[0] and every layer's Remaining and capacity, which
// every layer then allows. It returns the units counted.
func (l *Layered) decideAtMost(keys []string, costs []int64, commit, atMost bool, out []Decision) (LayeredDecision, int64, error) {
	if err := l.checkKeys(keys); err != nil {
		return LayeredDecision{}, 0, err
	}
	key := func(i int) string { return keys[min(i, len(keys)-1)] }
	cost := func(i int) int64 { return costs[min(i, len(costs)-1)] }
	refused := func(i int, m *Memory) (LayeredDecision, int64, error) {
		set := m.set.Load()
		d := Decision{Limit: set.policy.Limit, Policy: set.policy}
		return LayeredDecision{Decision: d, Layer: i}, 0, checkRequest(key(i), cost(i), set.cost)
	}
	for i, m := range l.layers {
		if n := cost(i); key(i) == "" || n <= 0 || (!atMost && n > m.set.Load().cost) {
			return refused(i, m)
		}
	}
	var buf [4]layerRef
	refs := buf[:0]
	for i, m := range l.layers {
		refs = append(refs, layerRef{ref: m.eng.ref(key(i)), now: m.now()})
	}
	for _, i := range l.order {
		refs[i].ref.mu.Lock()
	}
	unlock := func() {
		for j := range refs {
			refs[j].ref.mu.Unlock()
		}
	}
	// Each layer's policy stays as it is while one of its shards is
	// locked (Memory.SetPolicy holds them all); checked again, as a
	// change may have lowered a capacity since.
	for i, m := range l.layers {
		if !atMost && cost(i) > m.set.Load().cost {
			unlock()
			return refused(i, m)
		}
	}
	if atMost {
		g := costs[0]
		for i, m := range l.layers {
			d := m.decision(m.eng.decideLocked(refs[i].ref, refs[i].now, 1, false))
			out = append(out, d)
			g = min(g, d.Remaining, m.set.Load().cost)
		}
		if ld := MostRestrictive(out); !ld.Allowed || g <= 0 {
			unlock()
			return ld, 0, nil
		}
		costs, out = []int64{g}, out[:0]
	}
	// Check every layer but the last. If all pass, decide the last one for
	// real: it counts only if it passes too, and then so do the others,
	// whose check is repeated on the same state at the same time. A single
	// layer is thus decided exactly as by its Memory.
	last := len(l.layers) - 1
	pass := true
	for i, m := range l.layers[:last] {
		d := m.decision(m.eng.decideLocked(refs[i].ref, refs[i].now, cost(i), false))
		pass = pass && d.Allowed
		out = append(out, d)
	}
	m := l.layers[last]
	out = append(out, m.decision(m.eng.decideLocked(refs[last].ref, refs[last].now, cost(last), commit && pass)))
	pass = pass && out[last].Allowed
	if commit && pass {
		for i, m := range l.layers[:last] {
			out[i] = m.decision(m.eng.decideLocked(refs[i].ref, refs[i].now, cost(i), true))
		}
	}
	unlock()
	var granted int64
	if commit && pass {
		granted = cost(0)
	}
	return MostRestrictive(out), granted, nil
}

// MostRestrictive returns the [LayeredDecision] of a request that the
// layers decided as ds, in layer order: allowed only if every layer
// allowed it, its Decision that of the most restrictive layer as [Layered]
// defines it, and Layers ds itself (not a copy). Other implementations of
// [LayeredLimiter], such as the Redis store's, combine their layers with it
// so that every store picks the same layer. For no layers it returns the
// zero LayeredDecision with Layer -1.
func MostRestrictive(ds []Decision) LayeredDecision {
	if len(ds) == 0 {
		return LayeredDecision{Layer: -1}
	}
	pass := true
	for _, d := range ds {
		pass = pass && d.Allowed
	}
	best := -1
	var delay time.Duration
	for i, d := range ds {
		delay = max(delay, d.Delay)
		switch {
		case pass:
			if best < 0 || d.Remaining < ds[best].Remaining {
				best = i
			}
		case !d.Allowed:
			if best < 0 || d.RetryAfter > ds[best].RetryAfter {
				best = i
			}
		}
	}
	ld := LayeredDecision{Decision: ds[best], Layer: best, Layers: ds}
	if pass {
		ld.Delay = delay
	}
	return ld
}
