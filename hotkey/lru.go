package hotkey

import (
	"hash/maphash"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// A table holds one value per key, in shards: a power of two of them, each
// an LRU behind its own mutex, picked by a seeded hash of the key. Requests
// for keys in different shards never wait for each other. The lease and
// denial-cache wrappers keep their values in one: an exact LRU over a
// bounded set, which is what hashicorp/golang-lru is for. (The memory
// store's per-key table is a structure of its own; see store.)
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
	_     [64]byte
}

// slot is what the LRU holds for a key: the second half of the key's hash
// and the value.
type slot[V any] struct {
	check uint64
	state V
}

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
		// adds, so the LRU never does.
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

// shardCount returns the number of shards for maxKeys: 64, or the largest
// power of two below it that leaves at least 64 keys to each shard, as the
// memory store does: enough shards that two CPUs rarely wait for one lock,
// few enough that no shard fills long before the table does.
func shardCount(maxKeys int) int {
	n := 64
	for n > 1 && maxKeys/n < 64 {
		n /= 2
	}
	return n
}
