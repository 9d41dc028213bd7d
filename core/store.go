package core

import (
	"hash/maphash"
	"runtime"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// A store keeps one state per key for one algorithm, in shards: a power of
// two of them, each an LRU behind its own mutex, picked by a seeded hash of
// the key. Requests for keys in different shards never wait for each other.
//
// Keys are stored as a 128-bit seeded hash (two independent maphash sums),
// not as the string: every key costs the same memory however long it is and
// no caller's string is retained. The first half indexes the LRU, the second
// is kept beside the state and checked on every lookup; two keys that share
// the first half (odds 2^-64 per pair) are told apart and the older one is
// evicted, counted as lossy. Two keys sharing all 128 bits, the only way two
// callers could share a state, is below 10^-26 for a million live keys.
type store[S any, A algorithm[S]] struct {
	alg          A
	inPlace      bool // the state is a pointer updated in place
	mask         uint64
	seed1, seed2 maphash.Seed
	shards       []shard[S]
}

type shard[S any] struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[uint64, slot[S]]
	limit int
	fresh uint64 // fresh entries dropped
	lossy uint64 // non-fresh entries evicted to make room
	_     [64]byte
}

// slot is what the LRU holds for a key: the second half of the key's hash
// and the algorithm's state.
type slot[S any] struct {
	check uint64
	state S
}

// shardCount returns the number of shards for maxKeys: several per CPU, a
// power of two, and at least 64 keys each.
func shardCount(maxKeys int) int {
	n := 1
	for n < 4*runtime.GOMAXPROCS(0) && n < 256 {
		n *= 2
	}
	for n > 1 && maxKeys/n < 64 {
		n /= 2
	}
	return n
}

func newStore[S any, A algorithm[S]](alg A, inPlace bool, maxKeys int) *store[S, A] {
	n := shardCount(maxKeys)
	s := &store[S, A]{
		alg:     alg,
		inPlace: inPlace,
		mask:    uint64(n - 1),
		seed1:   maphash.MakeSeed(),
		seed2:   maphash.MakeSeed(),
		shards:  make([]shard[S], n),
	}
	for i := range s.shards {
		limit := maxKeys / n
		if i < maxKeys%n {
			limit++
		}
		// The LRU is one larger than the limit: the shard evicts before it
		// adds, choosing and counting what goes, so the LRU never does.
		s.shards[i].lru, _ = simplelru.NewLRU[uint64, slot[S]](limit+1, nil)
		s.shards[i].limit = limit
	}
	return s
}

// locate returns key's shard and the two halves of its hash.
func (s *store[S, A]) locate(key string) (sh *shard[S], h, check uint64) {
	h = maphash.String(s.seed1, key)
	return &s.shards[h&s.mask], h, maphash.String(s.seed2, key)
}

// decide runs the algorithm for key under its shard's lock and, when commit
// is set and the request is allowed, stores the new state.
func (s *store[S, A]) decide(key string, now, n int64, commit bool) verdict {
	sh, h, check := s.locate(key)
	sh.mu.Lock()
	var sl slot[S]
	var found, ok bool
	if commit {
		sl, found = sh.lru.Get(h)
	} else {
		sl, found = sh.lru.Peek(h)
	}
	if ok = found && sl.check == check; !ok {
		sl.state = s.alg.empty(now)
	}
	v, next := s.alg.decide(sl.state, now, n, commit)
	if commit && v.allowed {
		switch {
		case !ok:
			s.insert(sh, h, slot[S]{check, next}, found, now)
		case !s.inPlace:
			sh.lru.Add(h, slot[S]{check, next})
		}
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
// holds. Its body is decide's: decide keeps its own copy because calling
// this from it made every Memory decision about 10% slower
// (BenchmarkHotKey: one more call on the hot path), so keep the two in
// step.
func (s *store[S, A]) decideLocked(r keyRef, now, n int64, commit bool) verdict {
	sh, h, check := &s.shards[r.shard], r.h, r.check
	var sl slot[S]
	var found, ok bool
	if commit {
		sl, found = sh.lru.Get(h)
	} else {
		sl, found = sh.lru.Peek(h)
	}
	if ok = found && sl.check == check; !ok {
		sl.state = s.alg.empty(now)
	}
	v, next := s.alg.decide(sl.state, now, n, commit)
	if commit && v.allowed {
		switch {
		case !ok:
			s.insert(sh, h, slot[S]{check, next}, found, now)
		case !s.inPlace:
			sh.lru.Add(h, slot[S]{check, next})
		}
	}
	return v
}

// insert adds a new key. If another key held its LRU index (a 64-bit hash
// collision), that key is replaced. Otherwise it first drops up to two least
// recently used entries that have become fresh (they decide as new keys
// would, so nothing is lost), and if the shard is still full it evicts the
// least recently used entry. Replacing or evicting a key that was not fresh
// is counted as lossy.
func (s *store[S, A]) insert(sh *shard[S], h uint64, sl slot[S], collided bool, now int64) {
	if collided {
		old, _ := sh.lru.Peek(h)
		s.count(sh, old.state, now)
		sh.lru.Add(h, sl)
		return
	}
	for range 2 {
		_, old, ok := sh.lru.GetOldest()
		if !ok || !s.alg.fresh(old.state, now) {
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
