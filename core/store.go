package core

import (
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
)

// A store keeps one state per key for one algorithm: the memory limiter's
// table.
//
// Keys are placed by a seeded hash in shards (64, fewer for a small
// maximum, see shardCount), each an open-addressing hash table behind its
// own mutex. A slot holds the key's 128-bit hash and the algorithm's state
// inline, and holds no pointer: a decision on a known key reads and writes
// one slot, in one cache line unless the slot straddles two (24-byte slots
// do one time in four; 16-byte states make 32-byte slots, never split),
// and the garbage collector never scans the table. The sliding log's
// variable-length log lives out of line (see logArena); its slot holds an
// index.
//
// # Keys
//
// A key is kept as two independent 64-bit maphash sums of it, h and check,
// never as the caller's string. The top 6 bits of h pick the shard and its
// low bits the home slot; a slot keeps the low 58 bits of h (the other 6
// say which shard it is in, when there are 64) beside check, and both are
// compared on every lookup. Two keys with the same 58 bits of h (a 64-bit
// index collision, odds 2^-58 per pair in a shard) are told apart by check:
// the newer takes the slot and the older's state is counted as a removal
// (fresh or lossy), as an eviction would be. Two keys sharing the whole
// 128-bit hash, the only way two callers could share a state, is below
// 10^-26 for a million live keys. (With fewer than 64 shards, for fewer
// than 4,096 keys, up to 6 of the bits that pick the shard are not implied
// by it: 122 bits at the least, below 10^-29 for those keys.)
//
// # Probing and growth
//
// Linear probing from the home slot; a removal shifts the entries behind
// it back (no tombstones), so a lookup stops at the first empty slot. A
// shard's slots double when they would pass three quarters full, up to the
// smallest power of two that holds the shard's share of MaxKeys at three
// quarters: a new key allocates only when its shard grows, and a shard
// never grows past its bound. Growing rehashes every entry and drops the
// ones fresh for s.idle on the way (see makeRoom). At 1e6 keys in a store
// of 1,048,576 or 1,250,000 (64 shards of 32,768 slots), the slots are
// half full: a lookup reads 1.5 slots on average, the token bucket's
// 24-byte slots cost 50 bytes per key and the windows' 32-byte ones 67.
//
// # Recency and eviction (CLOCK)
//
// Each slot has a reference bit, set by every counted request for its key
// (a hit moves nothing, and writes the bit only when it is clear), and a
// new bit, set when the key is added. A hand goes round the shard's slots;
// passing an entry clears both. New keys are placed where their hash says,
// so unlike an LRU list the hand's order is not the order of use: the bits
// protect a key in use, or just added, and what an entry holds decides the
// rest.
//
// A new key sweeps, from the hand, up to two entries that have been fresh
// for s.idle (they decide as new keys would, so nothing is lost), in a
// shard with room looking at no more than sweepSlots slots. In a full
// shard it takes the place of the first fresh entry the hand finds within
// handReach looks (plus up to maxSecondChances referenced and maxNewPasses
// new entries it passes); failing that, it evicts the entry looked at that
// holds the fewest units, counted as lossy (see makeRoom).
//
// What this costs, in time and bytes a key, is measured in docs/benchmarks.md
// (BenchmarkManyKeys, BenchmarkNewKeys, BenchmarkMemoryPerKey).
type store[S any, A algorithm[S]] struct {
	alg          A
	idle         int64  // µs an entry must have been fresh before a new key sweeps it away
	mask         uint64 // shard count - 1
	seed1, seed2 maphash.Seed
	shards       []keyShard[S]
}

// A keyShard is one shard of a store: its slots and what its hand knows,
// guarded by mu.
//
// calm is a time (Unix µs) before which no entry of the shard can be fresh.
// Inserts lower it (store.track), and requests only delay an entry's fresh
// time, so it stays a bound; each time the hand has gone round every slot
// (a lap), it is raised to the earliest fresh time the hand passed, or saw
// inserted or moved behind it, in that lap (lapMin).
type keyShard[S any] struct {
	mu      sync.Mutex
	slots   []entry[S] // a power of two of them
	n       int        // entries held
	limit   int        // at most this many entries
	grow    int        // n at which the slots double
	maxLen  int        // the slots never pass this many
	hand    int        // the slot the hand looks at next
	lapLeft int        // slots the hand has yet to pass in this lap
	calm    int64      // no entry is fresh before this time
	lapMin  int64      // the earliest fresh time passed, inserted or moved in this lap
	fresh   uint64     // fresh entries dropped
	lossy   uint64     // entries evicted while holding usage
	_       [64]byte
}

// An entry is one slot: tag is 0 for an empty slot, else tagUsed, the
// reference and new bits, and the low 58 bits of the key's h; check is the
// key's second hash.
type entry[S any] struct {
	tag   uint64
	check uint64
	state S
}

const (
	tagUsed  = 1 << 63
	tagRef   = 1 << 62 // requested since the hand last passed it
	tagNew   = 1 << 61 // added since the hand last passed it
	tagBits  = tagRef | tagNew
	tagHash  = 1<<58 - 1
	tagShard = 58 // h >> tagShard picks the shard
)

// shardCount returns the number of shards for maxKeys: 64, or the largest
// power of two below it that leaves at least 64 keys to each shard.
//
// Many more shards than CPUs: at a million keys a decision spends most of
// its time in cache misses with its shard locked, and with 8 shards on 2
// CPUs the other CPU waited for that lock often enough to cost about a fifth
// of the time (BenchmarkManyKeys in benchmarks/, 290 against 217-233 ns
// with 64 or 256 shards, on the earlier LRU store). Not many more: each
// shard holds at most its share of the maximum, and the more shards, the
// sooner the fullest one evicts while the store as a whole has room. And
// 64 is what a slot's tag leaves room for (tagShard).
func shardCount(maxKeys int) int {
	n := maxShards
	for n > 1 && maxKeys/n < 64 {
		n /= 2
	}
	return n
}

const maxShards = 1 << (64 - tagShard)

// minSlots is how many slots a shard starts with.
const minSlots = 8

// newStore returns a store of at most maxKeys keys. idle is how long, in
// microseconds, a fresh entry is kept while its shard has room (see
// makeRoom).
func newStore[S any, A algorithm[S]](alg A, maxKeys int, idle int64) *store[S, A] {
	n := shardCount(maxKeys)
	s := &store[S, A]{
		alg: alg, idle: idle, mask: uint64(n - 1),
		seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(),
		shards: make([]keyShard[S], n),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.limit = maxKeys / n
		if i < maxKeys%n {
			sh.limit++
		}
		// The smallest power of two of which limit is at most 3/4.
		sh.maxLen = max(2, 1<<bits.Len(uint(4*sh.limit-1)/3))
		sh.resize(min(minSlots, sh.maxLen))
		sh.calm, sh.lapMin = math.MaxInt64, math.MaxInt64
	}
	return s
}

// resize gives sh n empty slots; the caller puts the entries back.
func (sh *keyShard[S]) resize(n int) {
	sh.slots = make([]entry[S], n)
	sh.grow = n / 4 * 3
	if n == sh.maxLen {
		sh.grow = math.MaxInt
	}
	sh.hand, sh.lapLeft = 0, n
}

// locate returns key's shard and its two hashes.
func (s *store[S, A]) locate(key string) (sh *keyShard[S], h, check uint64) {
	h = maphash.Comparable(s.seed1, key)
	return &s.shards[h>>tagShard&s.mask], h, maphash.Comparable(s.seed2, key)
}

// Results of find.
const (
	missing  = iota // an empty slot, where the key would go
	found           // the key's slot
	collided        // the slot of another key with the same tag
)

// find returns the slot of the key whose tag (without the reference and new
// bits) and check are given, or of another key with the same tag, or else the
// empty slot where it would go.
func (sh *keyShard[S]) find(tag, check uint64) (int, int) {
	slots := sh.slots
	m := uint64(len(slots) - 1)
	for i := tag & m; ; i = (i + 1) & m {
		e := &slots[i]
		switch e.tag &^ tagBits {
		case tag:
			if e.check == check {
				return int(i), found
			}
			return int(i), collided
		case 0:
			return int(i), missing
		}
	}
}

// decide runs the algorithm for key under its shard's lock (see
// decideIn).
func (s *store[S, A]) decide(key string, now, n int64, commit bool) verdict {
	sh, h, check := s.locate(key)
	sh.mu.Lock()
	v := s.decideIn(sh, h, check, now, n, commit)
	sh.mu.Unlock()
	return v
}

// keyRef is where a key lives in a store: its shard (index and mutex) and
// its two hashes. A [Layered] limiter locks the shards of every layer's key
// itself, in a fixed order, and then decides under those locks with
// decideLocked.
type keyRef struct {
	mu       *sync.Mutex
	shard    int
	h, check uint64
}

// ref returns where key lives, taking no lock.
func (s *store[S, A]) ref(key string) keyRef {
	sh, h, check := s.locate(key)
	return keyRef{mu: &sh.mu, shard: int(h >> tagShard & s.mask), h: h, check: check}
}

// decideLocked is decide for a key whose shard's mutex (r.mu) the caller
// holds.
func (s *store[S, A]) decideLocked(r keyRef, now, n int64, commit bool) verdict {
	return s.decideIn(&s.shards[r.shard], r.h, r.check, now, n, commit)
}

// decideIn runs the algorithm for the key whose hashes are h and check, in
// sh, whose lock the caller holds, and, when commit is set, counts the
// request: it sets the key's reference bit and, if the request is allowed,
// stores the new state (adding the key if it is new).
func (s *store[S, A]) decideIn(sh *keyShard[S], h, check uint64, now, n int64, commit bool) verdict {
	tag := h&tagHash | tagUsed
	i, res := sh.find(tag, check)
	if res == found {
		e := &sh.slots[i]
		v, next := s.alg.decide(e.state, now, n, commit)
		if commit {
			// Written only when it changes: a denied request then
			// leaves the slot's cache line clean, and at a million keys
			// a line written back to memory costs as much as the miss
			// that brought it.
			if e.tag&tagRef == 0 {
				e.tag |= tagRef
			}
			if v.allowed() {
				e.state = next
			}
		}
		return v
	}
	v, next := s.alg.decide(s.alg.empty(now), now, n, commit)
	if commit && v.allowed() {
		s.insert(sh, i, res, tag, check, next, now)
	}
	return v
}

// insert adds a new key with state next at slot i, which find returned
// with res. If another key held the slot (a 64-bit index collision), that
// key's state is replaced in place and counted. Replacing or evicting a
// key that was not fresh is counted as lossy.
func (s *store[S, A]) insert(sh *keyShard[S], i, res int, tag, check uint64, next S, now int64) {
	if res == collided {
		e := &sh.slots[i]
		s.count(sh, e.state, now)
		s.alg.release(e.state)
		*e = entry[S]{tag: tag | tagNew, check: check, state: next}
	} else {
		moved := s.makeRoom(sh, now)
		if sh.n >= sh.grow {
			s.rehash(sh, now)
			moved = true
		}
		if moved {
			i, _ = sh.find(tag, check)
		}
		sh.slots[i] = entry[S]{tag: tag | tagNew, check: check, state: next}
		sh.n++
	}
	// After makeRoom, which may end the hand's lap: the new key counts in
	// the next one.
	s.track(sh, next, now)
}

// track lowers the shard's bound on when an entry can become fresh (see
// keyShard.calm) to when st, written at now, does. Every write that may
// make a state fresh sooner than the bound says must call it: a new key's
// first state, a collided key's, a refund's. A request that counts units
// only delays its key's fresh time, and needs not.
func (s *store[S, A]) track(sh *keyShard[S], st S, now int64) {
	_, until := s.alg.holds(st, now)
	sh.calm = min(sh.calm, now+until)
	sh.lapMin = min(sh.lapMin, now+until)
}

// rehash doubles sh's slots and puts its entries back, dropping those that
// have been fresh for s.idle on the way: every entry is read anyway, so
// calm is set to the exact earliest fresh time, and a lap begins at slot 0.
func (s *store[S, A]) rehash(sh *keyShard[S], now int64) {
	old := sh.slots
	sh.resize(2 * len(old))
	slots, m := sh.slots, len(sh.slots)-1
	sh.calm, sh.lapMin = math.MaxInt64, math.MaxInt64
	for _, e := range old {
		if e.tag == 0 {
			continue
		}
		if s.alg.fresh(e.state, now-s.idle) {
			s.alg.release(e.state)
			sh.n--
			sh.fresh++
			continue
		}
		e.tag &^= tagNew
		_, until := s.alg.holds(e.state, now)
		sh.calm = min(sh.calm, now+until)
		i := int(e.tag) & m
		for slots[i].tag != 0 {
			i = (i + 1) & m
		}
		slots[i] = e
	}
}

// remove empties slot i of sh, releasing its state, and shifts the entries
// after it that probed past it back towards their home slots. At most one
// of them can move from the hand (or past it) to a slot the hand has
// passed; the hand then goes back to it, the lap growing by as many slots,
// so that the hand still looks at it in this lap.
func (s *store[S, A]) remove(sh *keyShard[S], i int) {
	slots := sh.slots
	m := len(slots) - 1
	s.alg.release(slots[i].state)
	for j := (i + 1) & m; slots[j].tag != 0; j = (j + 1) & m {
		home := int(slots[j].tag) & m
		if (j-home)&m < (j-i)&m {
			continue // i is not between its home and j
		}
		if d := (sh.hand - i) & m; d > 0 && d <= (j-i)&m {
			sh.hand = i
			sh.lapLeft += d
		}
		slots[i] = slots[j]
		i = j
	}
	slots[i] = entry[S]{}
	sh.n--
}

// advance moves the hand to the next slot, ending the lap after the last.
func (sh *keyShard[S]) advance() {
	sh.hand = (sh.hand + 1) & (len(sh.slots) - 1)
	if sh.lapLeft--; sh.lapLeft <= 0 {
		sh.calm, sh.lapMin, sh.lapLeft = sh.lapMin, math.MaxInt64, len(sh.slots)
	}
}

// makeRoom makes room in sh for a new key, from the hand, and reports
// whether it removed an entry (which may move others).
//
// It first sweeps up to two entries that have been fresh for at least
// s.idle (they decide as new keys would, so nothing is lost). In a shard
// with room, the hand looks at no more than sweepSlots slots for them and
// stops, leaving the reference bits of the entries it passes as they are
// (it clears their new bits).
//
// In a full shard the new key takes the place of the first fresh entry the
// hand finds (fresh at now: a full bucket, an empty window). The hand looks
// at up to handReach entries, passing all but the last (clearing its
// reference and new bits), and on top of them passes up to
// maxSecondChances referenced ones and up to maxNewPasses new ones (added
// since the hand last passed them, and not requested again). When none is
// fresh, it evicts the entry that holds the fewest units (the most a
// dropped state can let its key spend again early); of entries that hold
// as many, one passed for its reference or new bit goes last, and
// otherwise the first looked at goes first. That eviction is counted as
// lossy. The new bit gives a key added where the hand is about to look
// what an LRU gives a key added at its front: one pass of the hand to be
// requested again, so a key in steady use is not evicted between its
// first request and its second by a flood of keys that make one each. A key that has used up its limit therefore outlives
// every key within the hand's reach that holds less, such as an attacker's
// keys minted one request at a time (or two, to set their bits): minting
// keys cannot reset it while they fill its shard. Units decide, not the
// time until fresh: a sliding log's minted key is fresh later than an
// older used-up key, and every fixed window ends at once.
//
// One rule shortens the search: calm is a time before which no entry of
// the shard can be fresh. Before it, there is no fresh entry to find, so
// the hand looks at calmReach entries instead, and an entry holding one
// unit and not passed for its bit, which nothing can better, is evicted at
// once: a flood of one-unit keys through a full shard costs one look per
// key.
//
// The sweep keeps memory near the keys in use when the population of keys
// turns over (client IPs do), without a background goroutine. Waiting
// s.idle (one window) before sweeping keeps it from dropping keys that are
// only briefly fresh, such as a token bucket 600 ms after one request at
// 100/1m, only to allocate them again on their next request; a full shard
// drops them anyway, before anything that holds usage.
func (s *store[S, A]) makeRoom(sh *keyShard[S], now int64) (removed bool) {
	swept, visited := 0, 0
	v := victimSearch{reach: handReach, victim: -1}
	for sh.n > 0 {
		full := sh.n >= sh.limit
		if !full {
			if visited == sweepSlots {
				return removed
			}
			visited++
		}
		e := &sh.slots[sh.hand]
		if e.tag == 0 {
			sh.advance()
			continue
		}
		st := e.state
		if s.alg.fresh(st, now) {
			if swept < 2 && s.alg.fresh(st, now-s.idle) {
				s.remove(sh, sh.hand)
				sh.fresh++
				removed, v.victim, v.seen = true, -1, 0
				if swept++; swept < 2 {
					continue
				}
				return true
			}
			if full {
				s.remove(sh, sh.hand)
				sh.fresh++
				return true
			}
		}
		units, until := s.alg.holds(st, now)
		if full {
			// The hand clears the reference bits of the entries it
			// passes only when the shard is full: with room, they are
			// left for when it is. New bits it clears in any case.
			calm := now < sh.calm
			if v.seen == 0 && calm {
				v.reach = calmReach
			}
			chance, spare := v.chances(e.tag)
			kept := chance || spare
			if v.weigh(sh.hand, units, kept) && units == 1 && !kept && calm {
				s.remove(sh, sh.hand)
				sh.lossy++
				return true
			}
			if v.pass(chance, spare, sh.n) {
				break
			}
			e.tag &^= tagRef
		}
		e.tag &^= tagNew
		sh.lapMin = min(sh.lapMin, now+until)
		sh.advance()
	}
	if v.victim < 0 {
		return removed
	}
	s.remove(sh, v.victim)
	sh.lossy++
	return true
}

// victimSearch is makeRoom's search of a full shard for the entry to evict
// when none is fresh: of the entries the hand looks at, the one that holds
// the fewest units. Its methods are small enough to be inlined, which
// keeps makeRoom as fast as one function (BenchmarkNewKeys).
type victimSearch struct {
	passed, spared int   // entries passed for their reference bit, their new bit
	seen, looked   int   // entries weighed; of them, those passed for neither bit
	reach          int   // looked stops at reach: handReach, or calmReach when calm
	victim         int   // the slot to evict, or -1
	least          int64 // units the victim holds
	leastKept      bool  // the victim was passed for a bit
}

// chances reports whether the entry with tag is passed for its reference
// bit (chance) or its new bit (spare). A referenced entry is passed, its
// bit counting in its favour, up to maxSecondChances times, and a new one
// (not requested since it was added) up to maxNewPasses times; past that,
// the bits no longer count.
func (v *victimSearch) chances(tag uint64) (chance, spare bool) {
	ref := tag&tagRef != 0
	return ref && v.passed < maxSecondChances, tag&tagNew != 0 && !ref && v.spared < maxNewPasses
}

// weigh makes the entry in slot i, which holds units and is passed for a
// bit if kept, the victim when it is the first weighed or holds fewer
// units than the victim (or as many, the victim kept and it not), and
// reports whether it did.
func (v *victimSearch) weigh(i int, units int64, kept bool) bool {
	if v.seen++; v.seen == 1 || units < v.least || units == v.least && v.leastKept && !kept {
		v.victim, v.least, v.leastKept = i, units, kept
		return true
	}
	return false
}

// pass counts the entry weighed as passed for its reference bit (chance),
// its new bit (spare) or neither, and reports whether the search is over:
// reach entries passed for neither, or every one of the shard's n entries
// weighed.
func (v *victimSearch) pass(chance, spare bool, n int) (done bool) {
	switch {
	case chance:
		v.passed++
	case spare:
		v.spared++
	default:
		v.looked++
	}
	return v.looked == v.reach || v.seen == n
}

// handReach bounds how many entries one insertion into a full shard looks
// at from the hand, for a fresh one and, failing that, for the one that
// holds the fewest units; referenced entries passed as second chances (up
// to maxSecondChances) come on top. calmReach replaces it while no entry
// of the shard can be fresh (now before calm), when only the second search
// is left. One insertion thus looks at no more than handReach +
// maxSecondChances + maxNewPasses + 2 entries (the 2 being swept), and in a
// shard with room at no more than sweepSlots slots.
//
// Why 16: the hand's entries are consecutive slots, read in order (the
// LRU store this table replaced paid three dependent cache misses per look,
// about 300 ns on a 2-CPU VM). In return, a shard whose entries are a
// fifth fresh, scattered at random, hides all of them from 16 looks 2.8%
// of the time (0.8^16), a third fresh 0.15%. The hand goes on from where it
// stopped, so a fresh entry it did not reach is looked at within limit/15
// of the insertions that find none.
//
// Why 4: with nothing fresh to find, the hand need only set each entry it
// would evict beside others: a used-up key goes only if the three others
// hold as much, which no flood's keys do unless they spend as much. A
// flood of one-unit keys costs one look per key (see makeRoom); of dearer
// keys, four rather than 16.
//
// Why 32 slots: at least half of them are entries once a shard has grown
// (it is more than 3/8 full), so a shard with room looks at about 16 for
// idle ones, in four to six cache lines, and its new key pays that much.
const (
	handReach  = 16
	calmReach  = 4
	sweepSlots = 32
)

// maxSecondChances bounds how many referenced entries one insertion into a
// full shard passes as second chances, on top of handReach, and
// maxNewPasses how many new ones. Two bounds, not one: keys that keep
// asking (and are denied, holding as much as a minted key) are never
// crowded out of their chances by a flood of new keys.
const (
	maxSecondChances = 8
	maxNewPasses     = 16
)

// count records the removal of a state to make room for another key's (a
// collided key's).
func (s *store[S, A]) count(sh *keyShard[S], old S, now int64) {
	if s.alg.fresh(old, now) {
		sh.fresh++
	} else {
		sh.lossy++
	}
}

func (s *store[S, A]) reset(key string) {
	sh, h, check := s.locate(key)
	sh.mu.Lock()
	if i, res := sh.find(h&tagHash|tagUsed, check); res == found {
		s.remove(sh, i)
	}
	sh.mu.Unlock()
}

func (s *store[S, A]) stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.n
		st.FreshDrops += sh.fresh
		st.LossyEvictions += sh.lossy
		sh.mu.Unlock()
	}
	return st
}
