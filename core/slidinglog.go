package core

import (
	"sync"
	"sync/atomic"
)

// slidingLog keeps the time and cost of every allowed request: a request
// allowed at s counts while now - W < s and leaves exactly at s + W. A new
// request is allowed when the units in the log plus n are at most L. It is
// the exact "at most L units in any window of length W", and its memory grows
// with the traffic: one 16-byte entry per distinct request time in the last
// window, so at most L entries per key. Choose it for small limits (logins,
// signups), not for 10,000 per second.
//
// The log is the one state that does not fit a slot of the store: a key's
// slot holds a logRef, the index of its logState in the limiter's
// logArena, where the log's entries live out of line.
type slidingLog struct {
	limit  int64
	window int64
	logs   *logArena
}

type logEntry struct {
	at int64 // when it was allowed, in µs
	n  int64 // units
}

// logState is one key's log: entries[head:] in time order, and their units
// summed. A nil *logState is an empty log.
//
// head and sum are 32-bit (a log holds at most Limit units, at most 1e9)
// so that a logState is 32 bytes, not 40.
type logState struct {
	entries []logEntry
	head    int32
	sum     int32
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
	a.chunks[r>>logChunkBits].Load()[r&(logChunk-1)].entries = make([]logEntry, 0, 1)
	return r
}

// release empties the log at r and takes the index back for reuse. It
// keeps a small entries array for the next key (none is allocated then),
// not a large one.
func (a *logArena) release(r logRef) {
	s := a.at(r)
	if s == nil {
		return
	}
	entries := s.entries[:0]
	if cap(entries) > 4 {
		entries = make([]logEntry, 0, 1)
	}
	*s = logState{entries: entries}
	a.mu.Lock()
	a.free = append(a.free, r)
	a.mu.Unlock()
}

func (l *slidingLog) empty(int64) logRef { return 0 }

func (l *slidingLog) release(r logRef) { l.logs.release(r) }

// live returns the index of the first entry still in the window at now and
// the units from there on. It changes nothing, so Peek and denials leave the
// log exactly as it was (as the Redis store does).
func (l *slidingLog) live(s *logState, now int64) (first int, units int64) {
	cutoff := now - l.window
	first, units = int(s.head), int64(s.sum)
	for first < len(s.entries) && s.entries[first].at <= cutoff {
		units -= s.entries[first].n
		first++
	}
	return first, units
}

// drop removes the entries before first, which have left the window, and
// gives memory back after a burst.
func (l *slidingLog) drop(s *logState, first int) {
	for _, e := range s.entries[s.head:first] {
		s.sum -= int32(e.n)
	}
	s.head = int32(first)
	switch live := len(s.entries) - first; {
	case cap(s.entries) > 64 && 4*live < cap(s.entries):
		s.entries, s.head = append(make([]logEntry, 0, 2*live), s.entries[s.head:]...), 0
	case live == 0:
		s.entries, s.head = s.entries[:0], 0
	case first >= 32 && 2*first >= len(s.entries):
		k := copy(s.entries, s.entries[s.head:])
		s.entries, s.head = s.entries[:k], 0
	}
}

func (l *slidingLog) fresh(r logRef, now int64) bool {
	s := l.logs.at(r)
	return s == nil || len(s.entries) == 0 || s.entries[len(s.entries)-1].at <= now-l.window
}

// holds returns the units in the window and the time until the last entry
// leaves it.
func (l *slidingLog) holds(r logRef, now int64) (units, until int64) {
	if l.fresh(r, now) {
		return 0, 0
	}
	s := l.logs.at(r)
	_, units = l.live(s, now)
	return units, s.entries[len(s.entries)-1].at + l.window - now
}

func (l *slidingLog) decide(r logRef, now, n int64, commit bool) (verdict, logRef) {
	s := l.logs.at(r)
	var sum int64
	first := 0
	if s != nil {
		first, sum = l.live(s, now)
	}
	if sum+n > l.limit {
		// Entries leave oldest first; find the one whose leaving makes room.
		var wait int64
		freed := int64(0)
		for _, e := range s.entries[first:] {
			freed += e.n
			if sum-freed+n <= l.limit {
				wait = e.at + l.window - now
				break
			}
		}
		return deny(l.limit-sum, wait, s.entries[len(s.entries)-1].at+l.window-now), r
	}
	at := now
	if s != nil && len(s.entries) > 0 {
		// A clock that went backwards records at the latest time seen, so
		// the log stays in order and nothing leaves early.
		at = max(at, s.entries[len(s.entries)-1].at)
	}
	v := verdict{remaining: l.limit - sum - n, resetAfter: at + l.window - now}
	if !commit {
		return v, r
	}
	if s == nil {
		r = l.logs.alloc()
		s = l.logs.at(r)
	} else {
		l.drop(s, first)
	}
	if k := len(s.entries); k > int(s.head) && s.entries[k-1].at == at {
		s.entries[k-1].n += n
	} else {
		s.entries = append(s.entries, logEntry{at: at, n: n})
	}
	s.sum += int32(n)
	return v, r
}
