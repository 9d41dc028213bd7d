package core

// algorithm is one counting rule over a per-key state S. Implementations are
// pure functions of (state, now, n): they read no clock and take no lock; the
// store serializes calls per key and supplies the time, in microseconds since
// the Unix epoch, measured monotonically.
//
// Time is counted in whole microseconds, the resolution of Redis's TIME: a
// store on Redis runs the same integer arithmetic and so makes the same
// decisions, field for field.
type algorithm[S any] interface {
	// empty returns the state of a key that has never been seen.
	empty(now int64) S
	// decide returns what a request for n units decides at now against s
	// and, when it is allowed and commit is set, the state after counting
	// it, which the verdict then describes. Otherwise (denied, or commit
	// unset: a Peek) the verdict describes s as it is at now, with nothing
	// counted, and the returned state is s, unchanged; a Peek's verdict
	// still allows exactly when the request would be allowed.
	decide(s S, now, n int64, commit bool) (verdict, S)
	// fresh reports whether s carries no information at now: a key in that
	// state decides exactly as a new one, so dropping it changes nothing.
	fresh(s S, now int64) bool
	// holds returns what s still counts at now: the units it holds against
	// its key (what dropping it could let the key spend again) and the
	// microseconds until it is fresh, if nothing is written to it. Both
	// are 0 exactly when s is fresh. The memory store evicts the entry
	// that holds the fewest units, and keeps a lower bound on when any of
	// a shard's entries can become fresh.
	holds(s S, now int64) (units, until int64)
	// refund returns s at now after giving back n units counted at since
	// or later (since <= now), as refund.go describes: never more than n
	// units, never past fresh, never more room than if the units had not
	// been counted. It may reuse s.
	refund(s S, now, since, n int64) S
	// charge returns s at now after counting n more units at now,
	// unconditionally, for a settle that cost more than its estimate
	// (settle.go): the key may go into debt, past the limit, by at most
	// one capacity (the algorithm's bound, so that nothing overflows). It
	// may reuse s.
	charge(s S, now, n int64) S
	// carry returns s, a state at now under the algorithm's parameters,
	// converted to those of to, for [Memory.SetPolicy]: what it counts
	// carries over as the algorithm defines it (docs/algorithms.md,
	// "Changing a policy"), rounded towards less room. It may reuse s.
	carry(s S, now int64, to *settings) S
	// adopt makes the algorithm decide by to from now on. The store calls
	// it under every one of its shards' locks, after carrying every state.
	adopt(to *settings)
	// release is called when the store drops a key's state s for good
	// (evicted, swept, replaced or reset), so that what s refers to out
	// of line can be reused. States held inline release nothing.
	release(s S)
}

// verdict is a Decision without the fields every algorithm shares.
// Durations are microseconds. A verdict denies exactly when retryAfter is
// positive: a denied request always has to wait, an allowed one never
// does, and [deny] makes sure of the first.
//
// Four fields, not five with a bool: Go keeps a struct of at most four
// fields in registers, and the fifth made every decision spill it to the
// stack and copy it back, a store-forwarding stall of about 4 ns on a hot
// key (BenchmarkHotKey).
type verdict struct {
	remaining  int64
	retryAfter int64
	resetAfter int64
	delay      int64
}

// allowed reports whether the verdict allows the request.
func (v verdict) allowed() bool { return v.retryAfter == 0 }

// deny returns the verdict that denies a request, with retryAfter at least
// 1 µs.
func deny(remaining, retryAfter, resetAfter int64) verdict {
	return verdict{remaining: remaining, retryAfter: max(retryAfter, 1), resetAfter: resetAfter}
}

// atomicState is implemented by an algorithm whose state is one word that
// the memory store's lock-free readers update by compare-and-swap (the
// token and leaky buckets): every access to a slot's state then goes
// through it, under the shard's lock or not. Algorithms without it (the
// windows and the sliding log, whose states are two or three words) are
// decided under the shard's lock only. See store.go, "Lock-free decisions".
type atomicState[S any] interface {
	// load returns the state at p.
	load(p *S) S
	// cas stores new at p if it holds old, and reports whether it did.
	cas(p *S, old, new S) bool
	// take replaces the state at p with the taken sentinel, which no live
	// state equals, and returns what p held.
	take(p *S) S
	// kill replaces the state at p with the taken sentinel if it holds
	// old, and reports whether it did.
	kill(p *S, old S) bool
	// put stores v at p.
	put(p *S, v S)
}
