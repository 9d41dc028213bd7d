package core

import (
	"hash/maphash"
	"math"
	"math/bits"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// A table holds one value per key, in shards: a power of two of them, each
// an LRU behind its own mutex, picked by a seeded hash of the key. Requests
// for keys in different shards never wait for each other. The memory store
// keeps its keys in one (their states in slabs beside it, see store); the
// lease and denial-cache wrappers keep their values in others.
//
// Keys are stored as a 128-bit seeded hash (two independent maphash sums),
// not as the string: every key costs the same memory however long it is and
// no caller's string is retained. The first half indexes the LRU, the second
// is kept beside the value and checked on every lookup; two keys that share
// the first half (odds 2^-64 per pair) are told apart and the older one is
// evicted. Two keys sharing all 128 bits, the only way two callers could
// share a value, is below 10^-26 for a million live keys.
type table[V any] struct {
	mask         uint64
	seed1, seed2 maphash.Seed
	shards       []shard[V]
}

type shard[V any] struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[uint64, slot[V]]
	limit int
	fresh uint64 // fresh entries dropped
	lossy uint64 // non-fresh entries evicted to make room
	_     [64]byte
}

// slot is what the LRU holds for a key: the second half of the key's hash
// and the value.
type slot[V any] struct {
	check uint64
	state V
}

// shardCount returns the number of shards for maxKeys: 64, or the largest
// power of two below it that leaves at least 64 keys to each shard.
//
// Many more shards than CPUs: at a million keys a decision spends most of
// its time in cache misses with its shard locked, and with 8 shards on 2
// CPUs the other CPU waited for that lock often enough to cost about a fifth
// of the time (BenchmarkManyKeys in benchmarks/, 290 against 217-233 ns
// with 64 or 256 shards). Not many more: each shard holds at most its share
// of the maximum, and the more shards, the sooner the fullest one evicts
// while the store as a whole has room (with 256 shards, a million keys in
// the default 1,048,576 already cost some of them).
func shardCount(maxKeys int) int {
	n := maxShards
	for n > 1 && maxKeys/n < 64 {
		n /= 2
	}
	return n
}

const maxShards = 64

// newTable returns a table of at most maxKeys keys. onEvict, if not nil, is
// called with the shard locked for each value removed from an LRU.
func newTable[V any](maxKeys int, onEvict func(V)) table[V] {
	return newTableEach(maxKeys, func(int) func(V) { return onEvict })
}

// newTableEach is newTable with a removal callback for each shard:
// onEvict(i), if not nil, is called with shard i locked for each value
// removed from its LRU.
func newTableEach[V any](maxKeys int, onEvict func(shard int) func(V)) table[V] {
	n := shardCount(maxKeys)
	t := table[V]{
		mask:   uint64(n - 1),
		seed1:  maphash.MakeSeed(),
		seed2:  maphash.MakeSeed(),
		shards: make([]shard[V], n),
	}
	for i := range t.shards {
		limit := maxKeys / n
		if i < maxKeys%n {
			limit++
		}
		var evict simplelru.EvictCallback[uint64, slot[V]]
		if f := onEvict(i); f != nil {
			evict = func(_ uint64, s slot[V]) { f(s.state) }
		}
		// The LRU is one larger than the limit: the shard evicts before it
		// adds, choosing and counting what goes, so the LRU never does.
		t.shards[i].lru, _ = simplelru.NewLRU(limit+1, evict)
		t.shards[i].limit = limit
	}
	return t
}

// locate returns key's shard and the two halves of its hash.
func (t *table[V]) locate(key string) (sh *shard[V], h, check uint64) {
	h = maphash.Comparable(t.seed1, key)
	return &t.shards[h&t.mask], h, maphash.Comparable(t.seed2, key)
}

// getOrAdd returns key's value, touching its recency, adding mk() first if
// there is none (evicting the least recently used key when full).
func (t *table[V]) getOrAdd(key string, mk func() V) V {
	sh, h, check := t.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s, ok := sh.lru.Get(h); ok && s.check == check {
		return s.state
	}
	v := mk()
	t.add(sh, h, slot[V]{check, v})
	return v
}

// add stores s under h in sh, whose lock the caller holds, evicting the
// least recently used key first when a new key would pass the limit.
func (t *table[V]) add(sh *shard[V], h uint64, s slot[V]) {
	if !sh.lru.Contains(h) && sh.lru.Len() >= sh.limit {
		sh.lru.RemoveOldest()
	}
	sh.lru.Add(h, s)
}

// peek returns key's value without touching its recency.
func (t *table[V]) peek(key string) (V, bool) {
	sh, h, check := t.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s, ok := sh.lru.Peek(h); ok && s.check == check {
		return s.state, true
	}
	var zero V
	return zero, false
}

// update calls f with key's value, if any, under the shard's lock, and
// stores what f returns, or removes the key if f says not to keep it.
func (t *table[V]) update(key string, f func(v V, ok bool) (V, bool)) {
	sh, h, check := t.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s, ok := sh.lru.Peek(h)
	ok = ok && s.check == check
	v, keep := f(s.state, ok)
	switch {
	case keep:
		t.add(sh, h, slot[V]{check, v})
	case ok:
		sh.lru.Remove(h)
	}
}

// remove drops key, if held.
func (t *table[V]) remove(key string) {
	t.update(key, func(v V, _ bool) (V, bool) { return v, false })
}

// len returns the number of keys held.
func (t *table[V]) len() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += sh.lru.Len()
		sh.mu.Unlock()
	}
	return n
}

// A store keeps one state per key for one algorithm.
//
// The table's LRU holds, for each key, the check half of its hash and the
// index of its state in the shard's slab, where the state is read and
// written in place. A request therefore costs one LRU lookup that moves
// nothing (Peek): no second lookup to store the new state, no unlinking of
// the key from between its LRU neighbours. At a million keys those were two
// of the cache misses every decision paid.
//
// Recency is kept with a reference bit per key instead (the CLOCK or
// second-chance approximation of LRU): a request sets its key's bit. The
// LRU order is the CLOCK's ring, its tail the hand: the hand passes a key by
// moving it to the front and clearing its bit, so the tail is the key the
// hand passed longest ago (or, if never passed, inserted longest ago).
//
// A new key in a full shard takes the place of a fresh entry if the hand
// finds one among the handReach entries it looks at from the tail (plus up
// to maxSecondChances requested ones it passes); failing that, it evicts
// the entry it looked at that holds the fewest units (see makeRoom). That
// eviction is counted as lossy, as is a live state replaced after a 64-bit
// index collision.
type store[S any, A algorithm[S]] struct {
	alg        A
	idle       int64     // µs an entry must have been fresh before a new key sweeps it away
	slabs      []slab[S] // one per shard, each guarded by its shard's mutex
	table[int]           // the LRU value: the state's index in the shard's slab
}

// newStore returns a store of at most maxKeys keys. idle is how long, in
// microseconds, a fresh entry is kept while its shard has room (see
// makeRoom).
func newStore[S any, A algorithm[S]](alg A, maxKeys int, idle int64) *store[S, A] {
	s := &store[S, A]{alg: alg, idle: idle, slabs: make([]slab[S], shardCount(maxKeys))}
	s.table = newTableEach(maxKeys, func(i int) func(int) { return s.slabs[i].release })
	for i := range s.slabs {
		shift := min(slabChunkBits, bits.Len(uint(s.shards[i].limit)))
		s.slabs[i].shift, s.slabs[i].mask = uint8(shift), 1<<shift-1
		s.slabs[i].calm, s.slabs[i].lapMin = math.MaxInt64, math.MaxInt64
	}
	return s
}

// decide runs the algorithm for key under its shard's lock (see
// decideIn).
func (s *store[S, A]) decide(key string, now, n int64, commit bool) verdict {
	sh, h, check := s.locate(key)
	sh.mu.Lock()
	v := s.decideIn(sh, &s.slabs[h&s.mask], h, check, now, n, commit)
	sh.mu.Unlock()
	return v
}

// keyRef is where a key lives in a store: its shard (index and mutex) and
// the two halves of its hash. A [Layered] limiter locks the shards of every
// layer's key itself, in a fixed order, and then decides under those locks
// with decideLocked.
type keyRef struct {
	mu       *sync.Mutex
	shard    int
	h, check uint64
}

// ref returns where key lives, taking no lock.
func (s *store[S, A]) ref(key string) keyRef {
	sh, h, check := s.locate(key)
	return keyRef{mu: &sh.mu, shard: int(h & s.mask), h: h, check: check}
}

// decideLocked is decide for a key whose shard's mutex (r.mu) the caller
// holds.
func (s *store[S, A]) decideLocked(r keyRef, now, n int64, commit bool) verdict {
	return s.decideIn(&s.shards[r.shard], &s.slabs[r.shard], r.h, r.check, now, n, commit)
}

// decideIn runs the algorithm for the key whose hash is h and check half
// check, in sh and sb, whose lock the caller holds, and, when commit is set,
// counts the request: it sets the key's reference bit and, if the request
// is allowed, stores the new state.
func (s *store[S, A]) decideIn(sh *shard[int], sb *slab[S], h, check uint64, now, n int64, commit bool) verdict {
	sl, found := sh.lru.Peek(h)
	ok := found && sl.check == check
	var st S
	var at *S
	if ok {
		at = sb.at(sl.state)
		st = *at
	} else {
		st = s.alg.empty(now)
	}
	v, next := s.alg.decide(st, now, n, commit)
	switch {
	case commit && ok:
		sb.setRef(sl.state)
		if v.allowed() {
			*at = next
		}
	case commit && v.allowed():
		s.insert(sh, sb, h, slot[int]{check, sl.state}, found, next, now)
	}
	return v
}

// insert adds a new key with state next. If another key held its LRU index
// (a 64-bit hash collision), that key's state is replaced in place. Replacing
// or evicting a key that was not fresh is counted as lossy.
func (s *store[S, A]) insert(sh *shard[int], sb *slab[S], h uint64, sl slot[int], collided bool, next S, now int64) {
	if collided {
		at := sb.at(sl.state)
		s.count(sh, *at, now)
		*at = next
		sb.unref(sl.state)
	} else {
		s.makeRoom(sh, sb, now)
		sl.state = sb.alloc(next)
	}
	sh.lru.Add(h, sl)
	// After makeRoom, which may end the hand's lap: the new key counts in
	// the next one.
	s.track(sb, next, now)
}

// track lowers the shard's bound on when an entry can become fresh (see
// slab.calm) to when st, written at now, does. Every write that may make a
// state fresh sooner than the bound says must call it: a new key's first
// state, a collided key's, a refund's. A request that counts units only
// delays its key's fresh time, and needs not.
func (s *store[S, A]) track(sb *slab[S], st S, now int64) {
	_, until := s.alg.holds(st, now)
	sb.calm = min(sb.calm, now+until)
	sb.lapMin = min(sb.lapMin, now+until)
}

// makeRoom makes room in sh for a new key, with the hand at the LRU tail.
//
// It first sweeps up to two entries that have been fresh for at least
// s.idle (they decide as new keys would, so nothing is lost); while the
// shard is not full, it passes up to maxSecondChances referenced entries to
// find them, and stops at the first entry that is neither.
//
// In a full shard the new key takes the place of the first fresh entry the
// hand finds (fresh at now: a full bucket, an empty window). The hand looks
// at up to handReach entries, passing all but the last (moving each to the
// front and clearing its reference bit), and on top of them passes up to
// maxSecondChances referenced ones. When none is fresh, it evicts the
// entry that holds the fewest units (the most a dropped state can let its
// key spend again early); of entries that hold as many, one passed for its
// reference bit goes last, and otherwise the one nearest the tail goes
// first. That eviction is counted as lossy. A key that has used up its
// limit therefore outlives every key within the hand's reach that holds
// less, such as an attacker's keys minted one request at a time (or two,
// to set their bits): minting keys cannot reset it while they fill its
// shard. Units decide, not the time until fresh: a sliding log's minted
// key is fresh later than an older used-up key, and every fixed window
// ends at once.
//
// One rule shortens the search: slab.calm is a time before which no entry
// of the shard can be fresh. Before it, there is no fresh entry to find, so
// the hand looks at calmReach entries instead, and an entry holding one
// unit and not passed for its bit, which nothing can better, is evicted at
// once: a flood of one-unit keys through a full shard costs one look per
// key, as when the tail was evicted blindly.
//
// The sweep keeps memory near the keys in use when the population of keys
// turns over (client IPs do), without a background goroutine. Waiting s.idle
// (one window) before sweeping keeps it from dropping keys that are only
// briefly fresh, such as a token bucket 600 ms after one request at 100/1m,
// only to allocate them again on their next request; a full shard drops
// them anyway, before anything that holds usage.
func (s *store[S, A]) makeRoom(sh *shard[int], sb *slab[S], now int64) {
	swept, passed, seen, looked, reach := 0, 0, 0, 0, 0
	var victim uint64
	var least int64 // units the victim holds
	var leastRef bool
	for {
		h, sl, ok := sh.lru.GetOldest()
		if !ok {
			return
		}
		i := sl.state
		st := *sb.at(i)
		full := sh.lru.Len() >= sh.limit
		if s.alg.fresh(st, now) {
			if swept < 2 && s.alg.fresh(st, now-s.idle) {
				sh.lru.RemoveOldest()
				sh.fresh++
				if swept++; swept < 2 {
					continue
				}
				return
			}
			if full {
				sh.lru.RemoveOldest()
				sh.fresh++
				return
			}
		}
		ref := sb.referenced(i)
		if !full && (!ref || passed == maxSecondChances) {
			return
		}
		units, until := s.alg.holds(st, now)
		if !full {
			passed++
		} else {
			if seen == 0 {
				reach = handReach
				if now < sb.calm {
					reach = calmReach
				}
			}
			// A referenced entry is passed, its bit counting in its
			// favour, up to maxSecondChances times; past that, its bit
			// no longer counts.
			chance := ref && passed < maxSecondChances
			if seen++; seen == 1 || units < least || units == least && leastRef && !chance {
				victim, least, leastRef = h, units, chance
				if units == 1 && !chance && now < sb.calm {
					sh.lru.RemoveOldest()
					sh.lossy++
					return
				}
			}
			if chance {
				passed++
			} else {
				looked++
			}
			if looked == reach || seen == sh.lru.Len() {
				break
			}
		}
		sb.unref(i)
		sh.lru.Get(h)
		sb.passed(now+until, sh.lru.Len())
	}
	sh.lru.Remove(victim)
	sh.lossy++
}

// handReach bounds how many entries one insertion into a full shard looks
// at from the LRU tail, for a fresh one and, failing that, for the one
// that holds the fewest units; referenced entries passed as second chances
// (up to maxSecondChances) come on top. calmReach replaces it while no
// entry of the shard can be fresh (now before slab.calm), when only the
// second search is left. One insertion thus looks at no more than
// handReach + maxSecondChances + 2 entries (the 2 being swept).
//
// Why 16: each look costs three dependent cache misses with the shard
// locked (the list entry, its state, the map slot of the move to the
// front), about 300 ns measured on a 2-CPU VM, so 16 looks hold the lock
// for about 5 µs. In return, a shard whose entries are a fifth fresh,
// scattered at random, hides all of them from 16 looks 2.8% of the time
// (0.8^16), a third fresh 0.15%. The hand goes on from where it stopped,
// so a fresh entry it did not reach is looked at within limit/15 of the
// insertions that find none.
//
// Why 4: with nothing fresh to find, the hand need only set each entry it
// would evict beside others: a used-up key goes only if the three others
// hold as much, which no flood's keys do unless they spend as much. A
// flood of one-unit keys costs one look per key (see makeRoom); of dearer
// keys, four rather than 16, whose 5 µs a key an attacker could choose.
const (
	handReach = 16
	calmReach = 4
)

// maxSecondChances bounds how many referenced entries one insertion passes
// as second chances: in a shard with room, looking for idle entries to
// sweep behind them; in a full one, on top of handReach.
const maxSecondChances = 8

// count records the removal of a state to make room for another key's (a
// collided key's).
func (s *store[S, A]) count(sh *shard[int], old S, now int64) {
	if s.alg.fresh(old, now) {
		sh.fresh++
	} else {
		sh.lossy++
	}
}

func (s *store[S, A]) reset(key string) {
	sh, h, check := s.locate(key)
	sh.mu.Lock()
	if sl, ok := sh.lru.Peek(h); ok && sl.check == check {
		sh.lru.Remove(h)
	}
	sh.mu.Unlock()
}

func (s *store[S, A]) stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.lru.Len()
		st.FreshDrops += sh.fresh
		st.LossyEvictions += sh.lossy
		sh.mu.Unlock()
	}
	return st
}

// A slab holds the states of one shard's keys, each at an index that stays
// the key's until it is removed. States are kept in chunks of a fixed size,
// so growing never copies them and wastes at most one chunk; a removed
// key's index is reused by the next key added. One reference bit per index
// records whether the key was requested since the hand of makeRoom last
// passed it (or since it was added).
//
// It also keeps what the hand of makeRoom knows about when the shard's
// entries become fresh: calm, a time (Unix µs) before which none can be.
// Inserts lower it (store.track), and requests only delay an entry's fresh
// time, so it stays a bound; the hand raises it each time it has gone round
// the shard (a lap: as many entries passed as the shard held when the lap
// began), to the earliest fresh time it passed or saw inserted in that lap.
type slab[S any] struct {
	chunks  [][]S
	ref     []uint64
	free    []int // indices of removed keys
	used    int   // indices handed out so far, free ones included
	mask    int   // chunk size - 1
	calm    int64 // no entry is fresh before this time
	lapMin  int64 // the earliest fresh time passed or inserted in this lap
	lapLeft int   // entries left to pass in this lap
	shift   uint8 // log2 of the chunk size
	_       [15]byte
}

// slabChunkBits is log2 of the largest chunk: 1024 states.
const slabChunkBits = 10

// at returns the state at index i. (The shift count is masked so that the
// compiler need not handle counts of 64 and more.)
func (b *slab[S]) at(i int) *S {
	return &b.chunks[i>>(b.shift&63)][i&b.mask]
}

// alloc stores v at a free index, with its reference bit clear, and
// returns the index.
func (b *slab[S]) alloc(v S) int {
	var i int
	if n := len(b.free); n > 0 {
		i, b.free = b.free[n-1], b.free[:n-1]
	} else {
		i = b.used
		b.used++
		if i>>(b.shift&63) == len(b.chunks) {
			b.chunks = append(b.chunks, make([]S, b.mask+1))
		}
		if i>>6 == len(b.ref) {
			b.ref = append(b.ref, 0)
		}
	}
	*b.at(i) = v
	b.unref(i)
	return i
}

// release frees index i for reuse, clearing the state it held so that
// nothing it points to is kept alive.
func (b *slab[S]) release(i int) {
	var zero S
	*b.at(i) = zero
	b.free = append(b.free, i)
}

// passed records that the hand passed an entry that becomes fresh at
// freshAt at the earliest, in a shard that now holds n entries.
func (b *slab[S]) passed(freshAt int64, n int) {
	b.lapMin = min(b.lapMin, freshAt)
	if b.lapLeft--; b.lapLeft <= 0 {
		b.calm, b.lapMin, b.lapLeft = b.lapMin, math.MaxInt64, n
	}
}

// setRef records a request for the key at index i.
func (b *slab[S]) setRef(i int) { b.ref[i>>6] |= 1 << (i & 63) }

func (b *slab[S]) referenced(i int) bool { return b.ref[i>>6]&(1<<(i&63)) != 0 }

func (b *slab[S]) unref(i int) { b.ref[i>>6] &^= 1 << (i & 63) }
