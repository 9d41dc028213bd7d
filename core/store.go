package core

import (
	"hash/maphash"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// A table holds one value per key, in shards: a power of two of them, each
// an LRU behind its own mutex, picked by a seeded hash of the key. Requests
// for keys in different shards never wait for each other. The memory store
// keeps its states in one; the lease and denial-cache wrappers keep theirs
// in others.
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
	n := shardCount(maxKeys)
	t := table[V]{
		mask:   uint64(n - 1),
		seed1:  maphash.MakeSeed(),
		seed2:  maphash.MakeSeed(),
		shards: make([]shard[V], n),
	}
	var evict simplelru.EvictCallback[uint64, slot[V]]
	if onEvict != nil {
		evict = func(_ uint64, s slot[V]) { onEvict(s.state) }
	}
	for i := range t.shards {
		limit := maxKeys / n
		if i < maxKeys%n {
			limit++
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
	h = maphash.String(t.seed1, key)
	return &t.shards[h&t.mask], h, maphash.String(t.seed2, key)
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

// A store keeps one state per key for one algorithm in a table. A key whose
// live state is evicted to make room, or replaced after a 64-bit index
// collision, is counted as lossy.
type store[S any, A algorithm[S]] struct {
	alg     A
	inPlace bool  // the state is a pointer updated in place
	idle    int64 // µs an entry must have been fresh before a new key sweeps it away
	table[S]
}

// newStore returns a store of at most maxKeys keys. idle is how long, in
// microseconds, a fresh entry is kept while its shard has room (see insert).
func newStore[S any, A algorithm[S]](alg A, inPlace bool, maxKeys int, idle int64) *store[S, A] {
	return &store[S, A]{alg: alg, inPlace: inPlace, idle: idle, table: newTable[S](maxKeys, nil)}
}

// decide runs the algorithm for key under its shard's lock and, when commit
// is set and the request is allowed, stores the new state.
//
// decideLocked runs the same steps; each keeps its own copy because one
// more call on this path costs about 13% of a decision (BenchmarkHotKey,
// serial): keep the two in step.
func (s *store[S, A]) decide(key string, now, n int64, commit bool) verdict {
	sh, h, check := s.locate(key)
	sh.mu.Lock()
	sl, found, ok := sh.get(h, check, commit)
	if !ok {
		sl.state = s.alg.empty(now)
	}
	v, next := s.alg.decide(sl.state, now, n, commit)
	if commit && v.allowed() {
		s.save(sh, h, slot[S]{check, next}, found, ok, now)
	}
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
	sh, h, check := &s.shards[r.shard], r.h, r.check
	sl, found, ok := sh.get(h, check, commit)
	if !ok {
		sl.state = s.alg.empty(now)
	}
	v, next := s.alg.decide(sl.state, now, n, commit)
	if commit && v.allowed() {
		s.save(sh, h, slot[S]{check, next}, found, ok, now)
	}
	return v
}

// get returns the slot at index h in sh, whose lock the caller holds,
// touching its recency when touch is set. found reports whether the index
// is held, ok whether it is held for the key whose check half is check.
func (sh *shard[V]) get(h, check uint64, touch bool) (sl slot[V], found, ok bool) {
	if touch {
		sl, found = sh.lru.Get(h)
	} else {
		sl, found = sh.lru.Peek(h)
	}
	return sl, found, found && sl.check == check
}

// save stores sl at index h in sh, whose lock the caller holds, for a
// request allowed at now: in place if ok (the index held this key), as a
// new key otherwise.
func (s *store[S, A]) save(sh *shard[S], h uint64, sl slot[S], found, ok bool, now int64) {
	switch {
	case !ok:
		s.insert(sh, h, sl, found, now)
	case !s.inPlace:
		sh.lru.Add(h, sl)
	}
}

// insert adds a new key. If another key held its LRU index (a 64-bit hash
// collision), that key is replaced. Otherwise it first drops up to two least
// recently used entries that have been fresh for at least s.idle (they
// decide as new keys would, so nothing is lost), and if the shard is still
// full it evicts the least recently used entry, fresh or not. Replacing or
// evicting a key that was not fresh is counted as lossy.
//
// The sweep keeps memory near the keys in use when the population of keys
// turns over (client IPs do), without a background goroutine. Waiting s.idle
// (one window) before sweeping keeps it from dropping keys that are only
// briefly fresh, such as a token bucket 600 ms after one request at 100/1m,
// only to allocate them again on their next request.
func (s *store[S, A]) insert(sh *shard[S], h uint64, sl slot[S], collided bool, now int64) {
	if collided {
		old, _ := sh.lru.Peek(h)
		s.count(sh, old.state, now)
		sh.lru.Add(h, sl)
		return
	}
	for range 2 {
		_, old, ok := sh.lru.GetOldest()
		if !ok || !s.alg.fresh(old.state, now) || !s.alg.fresh(old.state, now-s.idle) {
			break
		}
		sh.lru.RemoveOldest()
		sh.fresh++
	}
	if sh.lru.Len() >= sh.limit {
		_, old, _ := sh.lru.RemoveOldest()
		s.count(sh, old.state, now)
	}
	sh.lru.Add(h, sl)
}

// count records the removal of a state to make room.
func (s *store[S, A]) count(sh *shard[S], old S, now int64) {
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
