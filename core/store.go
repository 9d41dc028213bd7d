package core

import (
	"hash/maphash"
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
// second-chance approximation of LRU): a request sets its key's bit, and a
// key found at the LRU tail with its bit set is moved to the front, its bit
// cleared, instead of being evicted or swept: a key requested since it was
// last looked at from the tail is passed over (up to maxSecondChances of them
// per insertion, see makeRoom).
//
// A key whose live state is evicted to make room, or replaced after a
// 64-bit index collision, is counted as lossy.
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
		sh.lru.Add(h, sl)
		return
	}
	s.makeRoom(sh, sb, now)
	sl.state = sb.alloc(next)
	sh.lru.Add(h, sl)
}

// makeRoom looks at the LRU tail of sh before a new key is added. It drops
// up to two entries there that have been fresh for at least s.idle (they
// decide as new keys would, so nothing is lost), moves entries whose
// reference bit is set to the front (clearing it), and, if the shard is
// full, evicts the first entry that is neither, fresh or not. At most
// maxSecondChances entries are moved: past that, a full shard evicts its
// tail whatever its bit says, so one insertion's work under the lock stays
// bounded.
//
// The sweep keeps memory near the keys in use when the population of keys
// turns over (client IPs do), without a background goroutine. Waiting s.idle
// (one window) before sweeping keeps it from dropping keys that are only
// briefly fresh, such as a token bucket 600 ms after one request at 100/1m,
// only to allocate them again on their next request.
func (s *store[S, A]) makeRoom(sh *shard[int], sb *slab[S], now int64) {
	swept, moved := 0, 0
	for {
		h, old, ok := sh.lru.GetOldest()
		if !ok {
			return
		}
		st := *sb.at(old.state)
		switch full := sh.lru.Len() >= sh.limit; {
		case swept < 2 && s.alg.fresh(st, now) && s.alg.fresh(st, now-s.idle):
			sh.lru.RemoveOldest()
			sh.fresh++
			swept++
		case sb.referenced(old.state) && moved < maxSecondChances:
			sb.unref(old.state)
			sh.lru.Get(h)
			moved++
		case full:
			sh.lru.RemoveOldest()
			s.count(sh, st, now)
			return
		default:
			return
		}
	}
}

// maxSecondChances bounds how many referenced entries one insertion moves
// from the LRU tail to the front before a full shard evicts the tail anyway.
const maxSecondChances = 8

// count records the removal of a state to make room.
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
// records whether the key was requested since it was last looked at from
// the LRU tail.
type slab[S any] struct {
	chunks [][]S
	ref    []uint64
	free   []int // indices of removed keys
	used   int   // indices handed out so far, free ones included
	mask   int   // chunk size - 1
	shift  uint8 // log2 of the chunk size
	_      [39]byte
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

// setRef records a request for the key at index i.
func (b *slab[S]) setRef(i int) { b.ref[i>>6] |= 1 << (i & 63) }

func (b *slab[S]) referenced(i int) bool { return b.ref[i>>6]&(1<<(i&63)) != 0 }

func (b *slab[S]) unref(i int) { b.ref[i>>6] &^= 1 << (i & 63) }
