package core

import (
	"sync"
	"sync/atomic"
)

// slidingLog keeps the time and cost of every allowed request: a request
// allowed at s counts while now - W < s and leaves exactly at s + W. A new
// request is allowed when the units in the log plus n are at most L. It is
// the exact "at most L units in any window of length W", and its memory grows
// with the traffic: one 12-byte entry per distinct request time in the last
// window, so at most L entries per key, in a ring of at most ⌈4L/3⌉ slots
// (16·L bytes; see logState), twice that while a settled charge keeps the
// key in debt (settle.go: at most 2·L units, so 2·L entries). Choose it for
// small limits (logins, signups), not for 10,000 per second.
//
// A decision's work is O(log k) for a log of k entries, plus, when it is
// allowed, the entries it drops from the log (each is dropped once): see
// logState.
//
// The log is the one state that does not fit a slot of the store: a key's
// slot holds a logRef, the index of its logState in the limiter's
// logArena, where the log's entries live out of line.
type slidingLog struct {
	limit  int64
	window int64
	logs   *logArena
}

// A logRef is the index of a key's logState in a logArena; 0 is the empty
// log, which has none.
type logRef uint32

// A logArena holds the logs of one sliding-log limiter's keys, in chunks
// that never move, so that a store's slots can refer to them by a 32-bit
// index and hold no pointer. A logState is read and written only under the
// lock of its key's shard; mu guards handing out and taking back indices
// (once per new key and per dropped one, never on a known key's decision).
type logArena struct {
	chunks []atomic.Pointer[[logChunk]logState] // fixed length, filled as needed
	mu     sync.Mutex
	free   []logRef // indices released
	next   logRef   // the next index never handed out; 0 is never
}

const (
	logChunkBits = 10
	logChunk     = 1 << logChunkBits
)

// newLogArena returns an arena for a store of at most maxKeys keys: as many
// logs live at once, and one more while a collided key's log replaces
// another.
func newLogArena(maxKeys int) *logArena {
	n := min(maxKeys+2, 1<<32-1)
	return &logArena{chunks: make([]atomic.Pointer[[logChunk]logState], n>>logChunkBits+1), next: 1}
}

// at returns the log at r, or nil for the empty log.
func (a *logArena) at(r logRef) *logState {
	if r == 0 {
		return nil
	}
	return &a.chunks[r>>logChunkBits].Load()[r&(logChunk-1)]
}

// alloc returns the index of an empty log, with room for one entry.
func (a *logArena) alloc() logRef {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.free); n > 0 {
		r := a.free[n-1]
		a.free = a.free[:n-1]
		return r
	}
	r := a.next
	a.next++
	if c := &a.chunks[r>>logChunkBits]; c.Load() == nil {
		c.Store(new([logChunk]logState))
	}
	a.chunks[r>>logChunkBits].Load()[r&(logChunk-1)].slots = make([]logSlot, 0, 1)
	return r
}

// release empties the log at r and takes the index back for reuse. It
// keeps a small ring for the next key (none is allocated then), not a
// large one.
func (a *logArena) release(r logRef) {
	s := a.at(r)
	if s == nil {
		return
	}
	slots := s.ring()
	if len(slots) > 4 {
		slots = make([]logSlot, 1)
	} else {
		clear(slots)
	}
	*s = logState{slots: slots[:0]}
	a.mu.Lock()
	a.free = append(a.free, r)
	a.mu.Unlock()
}

func (l *slidingLog) empty(int64) logRef { return 0 }

func (l *slidingLog) release(r logRef) { l.logs.release(r) }

func (l *slidingLog) fresh(r logRef, now int64) bool {
	s := l.logs.at(r)
	return s == nil || s.n() == 0 || s.last() <= now-l.window
}

// holds returns the units in the window and the time until the last entry
// leaves it.
func (l *slidingLog) holds(r logRef, now int64) (units, until int64) {
	if l.fresh(r, now) {
		return 0, 0
	}
	s := l.logs.at(r)
	return int64(s.sum) - s.before(s.after(now-l.window, false)), s.last() + l.window - now
}

// decide reads the log without changing it, so that Peek and denials leave
// it exactly as it was (as the Redis store does); an allowed request
// committed drops the entries that have left and adds its own.
func (l *slidingLog) decide(r logRef, now, n int64, commit bool) (verdict, logRef) {
	s := l.logs.at(r)
	var sum, gone int64 // units in the window, and in the entries that left it
	first := 0
	if s != nil {
		first = s.after(now-l.window, false)
		gone = s.before(first)
		sum = int64(s.sum) - gone
	}
	if sum+n > l.limit {
		// Entries leave oldest first: the request fits when the entry
		// where the running count from the first one in the window
		// reaches sum + n - L has left.
		i := s.reach(gone + sum + n - l.limit)
		// (sum may be above the limit, lowered by Memory.SetPolicy.)
		return deny(max(l.limit-sum, 0), s.time(i)+l.window-now, s.last()+l.window-now), r
	}
	if !commit {
		// A Peek: the log as it is. Its last entry holds units, so it is
		// in the window exactly when the window holds any.
		v := verdict{remaining: l.limit - sum}
		if sum > 0 {
			v.resetAfter = s.last() + l.window - now
		}
		return v, r
	}
	at := now
	if s != nil && s.n() > 0 {
		// A clock that went backwards records at the latest time seen, so
		// the log stays in order and nothing leaves early.
		at = max(at, s.last())
	}
	v := verdict{remaining: l.limit - sum - n, resetAfter: at + l.window - now}
	if s == nil {
		r = l.logs.alloc()
		s = l.logs.at(r)
	} else {
		s.expire(first)
	}
	s.push(at, n, l.limit)
	return v, r
}

// carry keeps the log's entries, times and units, dropping those that have
// left the current window first: under a longer window they would
// otherwise count again. Under a shorter one, older entries leave as
// always. The ring keeps its size: a lower limit leaves it larger than
// the new limit's ⌈4L/3⌉ slots until its entries leave and it shrinks, and
// a higher one lets it grow to the new bound (see logState.push).
func (l *slidingLog) carry(r logRef, now int64, _ *settings) logRef {
	if s := l.logs.at(r); s != nil {
		s.expire(s.after(now-l.window, false))
	}
	return r
}

func (l *slidingLog) adopt(to *settings) { l.limit, l.window = to.policy.Limit, to.window }
