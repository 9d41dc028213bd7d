package core

import (
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
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
// it back (no tombstones; with lock-free decisions, a dead slot instead,
// until the next rebuild: see below), so a lookup stops at the first empty
// slot. A
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
// # Lock-free decisions
//
// For the token and leaky buckets (an algorithm with atomicState: one
// int64, the GCRA's TAT, per key) a decision on a key already held takes
// no lock: it reads the shard's published slots (tab), probes for the key,
// and decides with one compare-and-swap of the slot's state (none when it
// denies), in Memory.decideInto (bucketpath.go). Anything else (a new key, a collision, a state a writer has
// taken) falls back to the locked path, which decides as before. The lock
// stays for inserts, evictions, the sweep, rehash, refunds, resets and
// [Layered]. The windows and the sliding log keep the lock for every
// decision: their states are two or three words, which one CAS cannot
// update together.
//
// Why a lock-free reader never loses an admitted request, beyond what a
// lossy eviction or a Reset loses by design:
//
//   - Every word shared with readers (a slot's tag, check and state, and
//     tab) is read and written with sync/atomic, under the lock too.
//   - A slot of a table is given to at most one key in that table's life:
//     a removal (sweep, eviction, Reset, collision) does not shift the
//     entries behind it back, it kills the slot: the state is swapped to
//     gcraTaken, then check is set to deadCheck and tag to 0. A dead slot
//     is never reused; lookups pass over it (tag 0 but check not 0), as do
//     the hand and rehash. Rehash, which runs when live and dead slots
//     together reach three quarters of the table, copies the live entries
//     into a new table and publishes it (tab), after swapping every old
//     state to gcraTaken; the old table's slots are never written again.
//   - An insert writes state, then check, then tag, into an empty slot. So
//     a reader that loads a tag equal to its key's, then the same check,
//     has found the only slot its key ever has in that table; the state it
//     then loads is that key's, or gcraTaken. Its CAS succeeds only if the
//     state is still the value it read, which gcraTaken never is and which
//     no other key's state can be in that slot: there is no ABA, whatever
//     the values of two keys' TATs.
//   - Every locked writer that removes, moves or rewrites a live state
//     takes it first with an atomic swap (or, to drop a state it found
//     fresh, a CAS from the value it judged, retrying if a reader changed
//     it). A reader's CAS therefore lands before the swap, and the writer
//     carries its result (into the new table, into the count of a lossy
//     eviction, or into the freshness test of a sweep, which then keeps the
//     key), or fails, and the reader decides again under the lock, where
//     the key is found in the current table or is new. A denial writes
//     nothing; it decides on a value the key's state held at the load.
//   - Locked decisions on a held key (a fallback, [Layered]) update the
//     state by the same CAS loop; refunds too. A Layered decision takes the
//     state of each of its keys for the time it holds the shards' locks
//     (keyShard.Lock and Unlock), so that no reader slips between its check
//     and its count.
//   - The reference bit is set by a CAS on the tag that succeeds only while
//     the tag is still the key's (never on a killed slot); the hand clears
//     bits with atomic And. A bit set in a table that a rehash is retiring
//     may be lost: recency is a hint, and no unit is.
//   - calm stays a bound: a lock-free request only delays its key's fresh
//     time.
//   - A change of policy (retune, [Memory.SetPolicy]) takes a shard's live
//     states, publishes the shard's new settings (keyShard.set), and puts
//     the converted states back, all under every shard's lock; a reader
//     loads the state, then the settings, so it never decides a converted
//     state by the old ones (Memory.decideInto says why, ABA included).
//     calm and lapMin are then recomputed from the converted states.
//
// Dead slots cost room: a table with a quarter of dead slots or more is
// rebuilt (doubled while live entries fill five eighths of it and it may
// grow, the same size otherwise), so a shard of a store with lock-free
// decisions allocates when keys are removed as well as when it grows, and
// its bound on slots holds MaxKeys' share at five eighths (see newStore).
//
// What this costs, in time and bytes a key, is measured in docs/benchmarks.md
// (BenchmarkManyKeys, BenchmarkNewKeys, BenchmarkMemoryPerKey).
type store[S any, A algorithm[S]] struct {
	alg          A
	atom         atomicState[S]            // alg, if decisions on held keys take no lock; else nil
	idle         int64                     // µs an entry must have been fresh before a new key sweeps it away
	set          *atomic.Pointer[settings] // the Memory's settings
	mask         uint64                    // shard count - 1
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
	slots   []entry[S]                 // a power of two of them
	tab     atomic.Pointer[[]entry[S]] // slots, for lock-free readers
	set     atomic.Pointer[settings]   // the settings of the states of slots, for lock-free readers
	n       int                        // entries held
	used    int                        // entries held and dead slots (lock-free stores)
	limit   int                        // at most this many entries
	grow    int                        // n (lock-free stores: used) at which the slots are rebuilt
	maxLen  int                        // the slots never pass this many
	hand    int                        // the slot the hand looks at next
	lapLeft int                        // slots the hand has yet to pass in this lap
	calm    int64                      // no entry is fresh before this time
	lapMin  int64                      // the earliest fresh time passed, inserted or moved in this lap
	fresh   uint64                     // fresh entries dropped
	lossy   uint64                     // entries evicted while holding usage

	// A Layered decision holds the state of its key in this shard, taken
	// from slot held (or -1), until Unlock puts it back.
	atom      atomicState[S]
	held      int
	heldState S
	_         [64]byte
}

// An entry is one slot: tag is 0 for an empty slot, else tagUsed, the
// reference and new bits, and the low 58 bits of the key's h; check is the
// key's second hash. A dead slot (see "Lock-free decisions") has tag 0 and
// check deadCheck; an empty one, tag 0 and check 0.
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

	deadCheck = 1 // the check of a dead slot, whose tag is 0
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

// newStore returns a store of at most maxKeys keys, deciding by the
// settings at set. Their idle is how long, in microseconds, a fresh entry
// is kept while its shard has room (see makeRoom).
func newStore[S any, A algorithm[S]](alg A, maxKeys int, set *atomic.Pointer[settings]) *store[S, A] {
	n := shardCount(maxKeys)
	s := &store[S, A]{
		alg: alg, idle: set.Load().idle, set: set, mask: uint64(n - 1),
		seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(),
		shards: make([]keyShard[S], n),
	}
	s.atom, _ = any(alg).(atomicState[S])
	for i := range s.shards {
		sh := &s.shards[i]
		sh.limit = maxKeys / n
		if i < maxKeys%n {
			sh.limit++
		}
		// The smallest power of two of which limit is at most 3/4; with
		// lock-free decisions, at most 5/8, which leaves dead slots an
		// eighth of a full shard before it is rebuilt.
		sh.maxLen = max(2, 1<<bits.Len(uint(4*sh.limit-1)/3))
		if s.atom != nil {
			sh.maxLen = max(2, 1<<bits.Len(uint(8*sh.limit-1)/5))
		}
		sh.atom, sh.held = s.atom, -1
		sh.set.Store(set.Load())
		sh.resize(make([]entry[S], min(minSlots, sh.maxLen)))
		sh.calm, sh.lapMin = math.MaxInt64, math.MaxInt64
	}
	return s
}

// resize gives sh the slots, empty or already filled by the caller, and
// publishes them to lock-free readers.
func (sh *keyShard[S]) resize(slots []entry[S]) {
	n := len(slots)
	sh.slots = slots
	sh.tab.Store(&slots)
	sh.grow = n / 4 * 3
	switch {
	case sh.atom != nil:
		// Rebuilt, not grown, at the largest size: see rehash.
		sh.grow = n * 3 / 4
	case n == sh.maxLen:
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
		switch atomic.LoadUint64(&e.tag) &^ tagBits {
		case tag:
			if e.check == check {
				return int(i), found
			}
			return int(i), collided
		case 0:
			if e.check == 0 {
				return int(i), missing
			}
			// A dead slot: probe on.
		}
	}
}

// decide runs the algorithm for key under its shard's lock (see decideIn).
// The token and leaky buckets decide on a held key without it first
// (Memory.decideInto, in bucketpath.go), and come here for the rest.
//
// It returns the settings it decided by, and decides nothing for a cost
// above their capacity (tooCostly, see Memory.decideInto).
func (s *store[S, A]) decide(key string, now, n int64, commit bool) (verdict, *settings) {
	sh, h, check := s.locate(key)
	return s.decideHeld(sh, h, check, now, n, commit)
}

// decideHeld is decide for the key whose hashes are h and check, in sh.
func (s *store[S, A]) decideHeld(sh *keyShard[S], h, check uint64, now, n int64, commit bool) (verdict, *settings) {
	sh.mu.Lock()
	set := sh.set.Load() // under the lock, the same as s.set, and nearer at hand
	if n > set.cost {
		sh.mu.Unlock()
		return tooCostly(n), set
	}
	v := s.decideIn(sh, h, check, now, n, commit, false)
	sh.mu.Unlock()
	return v, set
}

// setRef sets the reference bit of entry e, whose tag was t, while its tag
// is still the same key's: never on a slot killed meanwhile. Lock-free
// readers and the locked path share it.
func setRef[S any](e *entry[S], t uint64) {
	for t&tagRef == 0 {
		if atomic.CompareAndSwapUint64(&e.tag, t, t|tagRef) {
			return
		}
		if n := atomic.LoadUint64(&e.tag); n&^tagBits == t&^tagBits {
			t = n
			continue
		}
		return
	}
}

// clearBits clears bits of e's tag (the hand passing it), atomically when
// lock-free readers may set the reference bit at the same time.
func (s *store[S, A]) clearBits(e *entry[S], bits uint64) {
	if s.atom == nil {
		e.tag &^= bits
		return
	}
	if atomic.LoadUint64(&e.tag)&bits != 0 {
		atomic.AndUint64(&e.tag, ^bits)
	}
}

// load returns the state at p, atomically when lock-free readers may
// change it.
func (s *store[S, A]) load(p *S) S {
	if s.atom != nil {
		return s.atom.load(p)
	}
	return *p
}

// keyRef is where a key lives in a store: its shard (index and lock) and
// its two hashes. A [Layered] limiter locks the shards of every layer's key
// itself, in a fixed order, and then decides under those locks with
// decideLocked.
type keyRef struct {
	mu       sync.Locker // the shard: keyShard.Lock and Unlock
	shard    int
	h, check uint64
}

// ref returns where key lives, taking no lock.
func (s *store[S, A]) ref(key string) keyRef {
	sh, h, check := s.locate(key)
	return keyRef{mu: sh, shard: int(h >> tagShard & s.mask), h: h, check: check}
}

// Lock locks sh for a [Layered] decision (see decideLocked).
func (sh *keyShard[S]) Lock() { sh.mu.Lock() }

// Unlock puts back the state a Layered decision held, if any, and unlocks
// sh.
func (sh *keyShard[S]) Unlock() {
	if sh.held >= 0 {
		sh.atom.put(&sh.slots[sh.held].state, sh.heldState)
		sh.held = -1
	}
	sh.mu.Unlock()
}

// decideLocked is decide for a key whose shard the caller has locked with
// r.mu. With lock-free decisions, the key's state is taken from its slot at
// the first decision and held until r.mu.Unlock, so that a Layered check
// and count are one step for lock-free readers too.
func (s *store[S, A]) decideLocked(r keyRef, now, n int64, commit bool) verdict {
	return s.decideIn(&s.shards[r.shard], r.h, r.check, now, n, commit, s.atom != nil)
}

// decideIn runs the algorithm for the key whose hashes are h and check, in
// sh, whose lock the caller holds, and, when commit is set, counts the
// request: it sets the key's reference bit and, if the request is allowed,
// stores the new state (adding the key if it is new). With hold (lock-free
// decisions only) it decides on the state held for a Layered decision.
func (s *store[S, A]) decideIn(sh *keyShard[S], h, check uint64, now, n int64, commit, hold bool) verdict {
	tag := h&tagHash | tagUsed
	i, res := sh.find(tag, check)
	if res == found && s.atom != nil {
		e := &sh.slots[i]
		var v verdict
		switch {
		case hold:
			if sh.held != i {
				sh.held, sh.heldState = i, s.atom.take(&e.state)
			}
			var next S
			v, next = s.alg.decide(sh.heldState, now, n, commit)
			if commit && v.allowed() {
				sh.heldState = next
			}
		default:
			// Lock-free readers may change the state meanwhile. (A live
			// state of the current table is never taken while its lock is
			// held by another; if it were, gcraTaken reads as a backlog
			// beyond the capacity, and denies.)
			for {
				st := s.atom.load(&e.state)
				var next S
				v, next = s.alg.decide(st, now, n, commit)
				if !commit || !v.allowed() || s.atom.cas(&e.state, st, next) {
					break
				}
			}
		}
		if commit {
			setRef(e, atomic.LoadUint64(&e.tag))
		}
		return v
	}
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

// decideAtMost counts as many units of n, at most the capacity, as key has
// room for at now, and returns the verdict, how many it counted and the
// settings it decided by ([Memory.AllowAtMost]). It takes the shard's lock,
// whatever the algorithm; the buckets' lock-free readers go on meanwhile,
// and a unit one of them takes between the look and the count is seen by
// the next look. When not even one unit fits, the verdict is the denial of
// one unit.
func (s *store[S, A]) decideAtMost(key string, now, n int64) (verdict, int64, *settings) {
	sh, h, check := s.locate(key)
	sh.mu.Lock()
	set := sh.set.Load() // under the lock, the same as s.set
	n = min(n, set.cost)
	for {
		// The Remaining of a Peek of one unit is the largest cost the
		// algorithm allows now (every algorithm's decide says so), so
		// min(n, Remaining) grants as much as fits and never more.
		v := s.decideIn(sh, h, check, now, 1, false, false)
		if !v.allowed() || v.remaining <= 0 {
			sh.mu.Unlock()
			return v, 0, set
		}
		g := min(n, v.remaining)
		if v = s.decideIn(sh, h, check, now, g, true, false); v.allowed() {
			sh.mu.Unlock()
			return v, g, set
		}
		// A lock-free decision took units between the two: again, on
		// what it left.
	}
}

// insert adds a new key with state next at slot i, which find returned
// with res. If another key held the slot (a 64-bit index collision), that
// key's state is replaced in place and counted. Replacing or evicting a
// key that was not fresh is counted as lossy.
func (s *store[S, A]) insert(sh *keyShard[S], i, res int, tag, check uint64, next S, now int64) {
	if s.atom != nil {
		s.insertShared(sh, i, res, tag, check, next, now)
		return
	}
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

// insertShared is insert for a store with lock-free decisions: a collided
// key's slot is killed, not reused, and the new key goes to the empty slot
// its probe ends at; the table is rebuilt when its live and dead slots
// reach grow.
func (s *store[S, A]) insertShared(sh *keyShard[S], i, res int, tag, check uint64, next S, now int64) {
	moved := false
	if res == collided {
		s.count(sh, s.atom.take(&sh.slots[i].state), now)
		s.kill(sh, i)
	} else {
		moved = s.makeRoom(sh, now)
	}
	if sh.used >= sh.grow {
		s.rehash(sh, now)
		moved = true
	}
	if moved || res == collided {
		i, _ = sh.find(tag, check)
	}
	e := &sh.slots[i]
	s.atom.put(&e.state, next)
	atomic.StoreUint64(&e.check, check)
	atomic.StoreUint64(&e.tag, tag|tagNew)
	sh.n++
	sh.used++
	s.track(sh, next, now)
}

// kill marks slot i of sh dead, its state already taken, for a store with
// lock-free decisions: check first, then tag, so that a reader that still
// sees the key's tag sees a check that is not its key's.
func (s *store[S, A]) kill(sh *keyShard[S], i int) {
	e := &sh.slots[i]
	atomic.StoreUint64(&e.check, deadCheck)
	atomic.StoreUint64(&e.tag, 0)
	sh.n--
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
	if s.atom != nil {
		s.rebuild(sh, now)
		return
	}
	old := sh.slots
	sh.resize(make([]entry[S], 2*len(old)))
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

// rebuild is rehash for a store with lock-free decisions: it takes every
// live state of the old table (a reader's CAS lands before and is carried,
// or fails) and publishes a new table without the dead slots. While the
// live entries fill five eighths of the old table and it may grow, the new
// one is twice as large and filled as rehash fills it; otherwise it is the
// same size, and compact fills it.
func (s *store[S, A]) rebuild(sh *keyShard[S], now int64) {
	old := sh.slots
	size := len(old)
	if sh.n < size*5/8 || size >= sh.maxLen {
		s.compact(sh, now)
		return
	}
	size *= 2
	slots, m := make([]entry[S], size), size-1
	sh.calm, sh.lapMin = math.MaxInt64, math.MaxInt64
	for k := range old {
		e := &old[k]
		if atomic.LoadUint64(&e.tag) == 0 {
			continue
		}
		st := s.atom.take(&e.state)
		if s.alg.fresh(st, now-s.idle) {
			s.alg.release(st)
			sh.n--
			sh.fresh++
			continue
		}
		tag := atomic.LoadUint64(&e.tag) &^ tagNew
		_, until := s.alg.holds(st, now)
		sh.calm = min(sh.calm, now+until)
		i := int(tag) & m
		for slots[i].tag != 0 {
			i = (i + 1) & m
		}
		slots[i] = entry[S]{tag: tag, check: e.check, state: st}
	}
	sh.resize(slots)
	sh.used = sh.n
}

// compact is rebuild at the same size, for what removing the dead slots
// one by one would have done. It puts the live entries back in the order
// of their slots from an empty one, so that each lands between its home
// slot and its old slot, as an entry shifted back does, and drops nothing.
// The hand, calm and the lap are kept, and no entry crosses the hand: one
// that would move from the hand or past it to a slot the hand has passed
// goes to the first free slot from the hand instead, and the free slots
// between go on as dead slots, which keeps its probe intact. So the hand
// neither skips an entry in this lap nor looks again at one it has passed
// (which would clear bits they had no time to set again). Should the dead
// slots kept leave less than a sixteenth of the slots before the next
// rebuild, that table is compacted again with entries crossing the hand.
// The hand stays: the entries that cross it are looked at in the next lap,
// their fresh times kept in this lap's bound (lapMin). Going back to them
// instead, as remove does for its one entry, would make the hand judge
// again the entries it passed on the way, their reference bits just
// cleared: a key that keeps asking would go as if it had not.
func (s *store[S, A]) compact(sh *keyShard[S], now int64) {
	slots, dead := s.compactFrom(sh, sh.slots, true, now)
	if sh.n+dead > sh.grow-len(slots)/16 {
		slots, dead = s.compactFrom(sh, slots, false, now)
	}
	hand, lapLeft := sh.hand, sh.lapLeft
	sh.resize(slots)
	sh.hand, sh.lapLeft = hand, lapLeft
	sh.used = sh.n + dead
}

// compactFrom returns the entries of from in a new table of the same size,
// as compact places them: with keep, none crossing sh's hand, and the dead
// slots that kept; without, crossing it, lowering sh.lapMin to the fresh
// time at now of each entry that does.
// It takes the states of from, unless from is the private result of an
// earlier call (!keep).
func (s *store[S, A]) compactFrom(sh *keyShard[S], from []entry[S], keep bool, now int64) (slots []entry[S], dead int) {
	m := len(from) - 1
	start := 0
	for atomic.LoadUint64(&from[start].tag) != 0 || from[start].check != 0 {
		start++ // a quarter of the slots at least are empty
	}
	slots = make([]entry[S], len(from))
	taken := func(i int) bool { return slots[i].tag != 0 || slots[i].check != 0 }
	for c := 1; c <= m; c++ {
		j := (start + c) & m
		e := &from[j]
		if atomic.LoadUint64(&e.tag) == 0 {
			continue // empty or dead
		}
		var st S
		if keep {
			st = s.atom.take(&e.state)
		} else {
			st = e.state // private
		}
		tag := atomic.LoadUint64(&e.tag)
		i := int(tag) & m
		for taken(i) {
			i = (i + 1) & m
		}
		if d := (sh.hand - i) & m; d > 0 && d <= (j-i)&m {
			if !keep {
				// Behind the hand now: looked at in the next lap, its
				// fresh time in this one's bound.
				_, until := s.alg.holds(st, now)
				sh.lapMin = min(sh.lapMin, now+until)
			} else {
				for ; i != sh.hand; i = (i + 1) & m {
					if !taken(i) {
						slots[i].check = deadCheck
						dead++
					}
				}
				for taken(i) {
					i = (i + 1) & m
				}
			}
		}
		slots[i] = entry[S]{tag: tag, check: e.check, state: st}
	}
	return slots, dead
}

// remove empties slot i of sh, releasing its state, and shifts the entries
// after it that probed past it back towards their home slots. At most one
// of them can move from the hand (or past it) to a slot the hand has
// passed; the hand then goes back to it, the lap growing by as many slots,
// so that the hand still looks at it in this lap.
//
// With lock-free decisions it takes the state and kills the slot instead:
// nothing moves (see "Lock-free decisions").
func (s *store[S, A]) remove(sh *keyShard[S], i int) {
	if s.atom != nil {
		s.alg.release(s.atom.take(&sh.slots[i].state))
		s.kill(sh, i)
		return
	}
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
		e := &sh.slots[sh.hand]
		tag := atomic.LoadUint64(&e.tag)
		if !full && (tag != 0 || e.check == 0) {
			// A dead slot is not counted: removal would have shifted an
			// entry into it.
			if visited == sweepSlots {
				return removed
			}
			visited++
		}
		if tag == 0 {
			sh.advance()
			continue
		}
		st := s.load(&e.state)
		if s.alg.fresh(st, now) {
			idle := swept < 2 && s.alg.fresh(st, now-s.idle)
			// Dropped only as it was judged: with lock-free decisions, a
			// request may have counted since, and the entry is looked at
			// again.
			if (idle || full) && s.atom != nil && !s.atom.kill(&e.state, st) {
				continue
			}
			if idle {
				s.removeTaken(sh, sh.hand)
				sh.fresh++
				removed, v.victim, v.seen = true, -1, 0
				if swept++; swept < 2 {
					continue
				}
				return true
			}
			if full {
				s.removeTaken(sh, sh.hand)
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
			chance, spare := v.chances(tag)
			kept := chance || spare
			if v.weigh(sh.hand, units, kept) && units == 1 && !kept && calm {
				s.remove(sh, sh.hand)
				sh.lossy++
				return true
			}
			if v.pass(chance, spare, sh.n) {
				break
			}
			s.clearBits(e, tagRef)
		}
		s.clearBits(e, tagNew)
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

// removeTaken is remove for an entry whose state, with lock-free
// decisions, makeRoom has already taken.
func (s *store[S, A]) removeTaken(sh *keyShard[S], i int) {
	if s.atom == nil {
		s.remove(sh, i)
		return
	}
	s.kill(sh, i)
}

// refundIn gives back n units of the key in slot i of sh, whose lock the
// caller holds, as the algorithm's refund says, and returns the new state.
// With lock-free decisions the state is replaced by CAS, deciding again if
// a reader changed it first.
func (s *store[S, A]) refundIn(sh *keyShard[S], i int, now, since, n int64) S {
	e := &sh.slots[i]
	if s.atom == nil {
		e.state = s.alg.refund(e.state, now, since, n)
		return e.state
	}
	for {
		st := s.atom.load(&e.state)
		next := s.alg.refund(st, now, since, n)
		if s.atom.cas(&e.state, st, next) {
			return next
		}
	}
}

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

// retune carries every state of the store to the settings to and makes
// them the store's (see Memory.SetPolicy). It holds every shard's lock,
// taken in index order, for the whole change, and reads the clock once
// they are all held.
//
// With lock-free decisions, each shard's live states are taken (a reader
// that finds one taken decides under the lock, and waits), the shard's
// settings are published, and the converted states are put back: see
// Memory.decideInto for why readers load the state first. The
// algorithm's own parameters, read under a lock only, are changed once
// every state is carried, and then each shard's calm and lapMin are
// recomputed from its converted states (an entry may become fresh sooner:
// a higher limit, a shorter window).
func (s *store[S, A]) retune(to *settings, clock func() int64) {
	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
	now := clock()
	type carried struct {
		slot  int
		state S
	}
	var taken []carried
	for i := range s.shards {
		sh := &s.shards[i]
		if s.atom == nil {
			for k := range sh.slots {
				if e := &sh.slots[k]; e.tag != 0 {
					e.state = s.alg.carry(e.state, now, to)
				}
			}
			sh.set.Store(to)
			continue
		}
		taken = taken[:0]
		for k := range sh.slots {
			if e := &sh.slots[k]; atomic.LoadUint64(&e.tag) != 0 {
				taken = append(taken, carried{k, s.alg.carry(s.atom.take(&e.state), now, to)})
			}
		}
		sh.set.Store(to)
		for _, c := range taken {
			s.atom.put(&sh.slots[c.slot].state, c.state)
		}
	}
	s.alg.adopt(to)
	s.idle = to.idle
	s.set.Store(to)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.calm = math.MaxInt64
		for k := range sh.slots {
			if e := &sh.slots[k]; atomic.LoadUint64(&e.tag) != 0 {
				_, until := s.alg.holds(s.load(&e.state), now)
				sh.calm = min(sh.calm, now+until)
			}
		}
		sh.lapMin = sh.calm
	}
	for i := range s.shards {
		s.shards[i].mu.Unlock()
	}
}
