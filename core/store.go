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
// not as the string: every key costs the same memory however long it is, no
// caller's string is retained, and the odds that two of a million live keys
// collide are below 10^-26.
type store[S any, A algorithm[S]] struct {
	alg          A
	inPlace      bool // the state is a pointer updated in place
	mask         uint64
	seed1, seed2 maphash.Seed
	shards       []shard[S]
}

type shard[S any] struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[hashKey, S]
	limit int
	fresh uint64 // fresh entries dropped
	lossy uint64 // non-fresh entries evicted to make room
	_     [64]byte
}

type hashKey [2]uint64

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
		s.shards[i].lru, _ = simplelru.NewLRU[hashKey, S](limit+1, nil)
		s.shards[i].limit = limit
	}
	return s
}

func (s *store[S, A]) locate(key string) (*shard[S], hashKey) {
	h := hashKey{maphash.String(s.seed1, key), maphash.String(s.seed2, key)}
	return &s.shards[h[0]&s.mask], h
}

// decide runs the algorithm for key under its shard's lock and, when commit
// is set and the request is allowed, stores the new state.
func (s *store[S, A]) decide(key string, now, n int64, commit bool) verdict {
	sh, h := s.locate(key)
	sh.mu.Lock()
	var st S
	var ok bool
	if commit {
		st, ok = sh.lru.Get(h)
	} else {
		st, ok = sh.lru.Peek(h)
	}
	if !ok {
		st = s.alg.empty(now)
	}
	v, next := s.alg.decide(st, now, n, commit)
	if commit && v.allowed {
		switch {
		case !ok:
			s.insert(sh, h, next, now)
		case !s.inPlace:
			sh.lru.Add(h, next)
		}
	}
	sh.mu.Unlock()
	return v
}

// insert adds a new key. Before it does, it drops up to two least recently
// used entries that have become fresh (they decide as new keys would, so
// nothing is lost), and if the shard is still full it evicts the least
// recently used entry, counting that loss.
func (s *store[S, A]) insert(sh *shard[S], h hashKey, st S, now int64) {
	for range 2 {
		_, old, ok := sh.lru.GetOldest()
		if !ok || !s.alg.fresh(old, now) {
			break
		}
		sh.lru.RemoveOldest()
		sh.fresh++
	}
	if sh.lru.Len() >= sh.limit {
		sh.lru.RemoveOldest()
		sh.lossy++
	}
	sh.lru.Add(h, st)
}

func (s *store[S, A]) reset(key string) {
	sh, h := s.locate(key)
	sh.mu.Lock()
	sh.lru.Remove(h)
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
