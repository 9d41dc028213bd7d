package core

import (
	"fmt"

	"github.com/ratekit/ratekit/internal/memmove"
)

func init() {
	memmove.Move = moveKey
}

// moveKey moves key's state from from to to: see package memmove. The
// conversion is the algorithm's carry, the one retune (SetPolicy) uses.
func moveKey(from, to *Memory, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("core: move: %w", ErrEmptyKey)
	case from == nil || to == nil:
		return fmt.Errorf("core: move: a nil limiter")
	case from == to:
		return fmt.Errorf("core: move: the same limiter twice")
	}
	// The algorithm never changes, so reading it unlocked is safe.
	if a, b := from.Policy().Algorithm, to.Policy().Algorithm; a != b {
		return fmt.Errorf("core: move: from %v to %v: a state moves between limiters of one algorithm", a, b)
	}
	fr, tr := from.eng.ref(key), to.eng.ref(key)
	first, second := fr.mu, tr.mu
	if to.id < from.id {
		first, second = second, first
	}
	first.Lock()
	second.Lock()
	from.eng.moveLocked(fr, to.eng, tr, to.now())
	second.Unlock()
	first.Unlock()
	return nil
}

// moveLocked moves the state of the key at r (under s's lock) to the store
// dst (its key at dr, under dst's lock), converted to dst's settings, at
// now. dst is a store of the same state and algorithm types: moveKey makes
// sure of it.
func (s *store[S, A]) moveLocked(r keyRef, dst engine, dr keyRef, now int64) {
	d := dst.(*store[S, A])
	sh := &s.shards[r.shard]
	i, res := sh.find(r.h&tagHash|tagUsed, r.check)
	if res != found {
		return
	}
	var st S
	if s.atom != nil {
		st = s.atom.take(&sh.slots[i].state)
	} else {
		st = sh.slots[i].state
	}
	st = s.alg.carry(st, now, d.set.Load())
	// The sliding log's entries live in its limiter's arena: they go to
	// dst's, and the slot left in s's arena is the empty log dst handed
	// out, which removing the key then releases.
	if from, ok := any(s.alg).(*slidingLog); ok {
		to := any(d.alg).(*slidingLog)
		ref := any(st).(logRef)
		if ref != 0 {
			moved := to.logs.alloc()
			p, q := from.logs.at(ref), to.logs.at(moved)
			*p, *q = *q, *p
			st = any(moved).(S)
		}
	}
	s.remove(sh, i)

	dsh := &d.shards[dr.shard]
	tag := dr.h&tagHash | tagUsed
	j, dres := dsh.find(tag, dr.check)
	if dres == found {
		e := &dsh.slots[j]
		held := d.load(&e.state)
		if u, _ := d.alg.holds(held, now); u >= unitsOf(d.alg, st, now) {
			d.alg.release(st)
			return
		}
		if d.atom != nil {
			d.alg.release(d.atom.take(&e.state))
			d.atom.put(&e.state, st)
		} else {
			d.alg.release(e.state)
			e.state = st
		}
		d.track(dsh, st, now)
		return
	}
	if d.alg.fresh(st, now) {
		d.alg.release(st)
		return
	}
	d.insert(dsh, j, dres, tag, dr.check, st, now)
}

// unitsOf returns what st holds at now under alg.
func unitsOf[S any, A algorithm[S]](alg A, st S, now int64) int64 {
	u, _ := alg.holds(st, now)
	return u
}
