package core

// slidingLog keeps the time and cost of every allowed request: a request
// allowed at s counts while now - W < s and leaves exactly at s + W. A new
// request is allowed when the units in the log plus n are at most L. It is
// the exact "at most L units in any window of length W", and its memory grows
// with the traffic: one 16-byte entry per distinct request time in the last
// window, so at most L entries per key. Choose it for small limits (logins,
// signups), not for 10,000 per second.
type slidingLog struct {
	limit  int64
	window int64
}

type logEntry struct {
	at int64 // when it was allowed, in ns
	n  int64 // units
}

// logState is one key's log: entries[head:] in time order, and their units
// summed. A nil *logState is an empty log.
type logState struct {
	entries []logEntry
	head    int
	sum     int64
}

func (l *slidingLog) empty(int64) *logState { return nil }

// prune drops the entries that have left the window at now. Pruning changes
// no decision, so Peek may do it too.
func (l *slidingLog) prune(s *logState, now int64) {
	cutoff := now - l.window
	for s.head < len(s.entries) && s.entries[s.head].at <= cutoff {
		s.sum -= s.entries[s.head].n
		s.head++
	}
	switch live := len(s.entries) - s.head; {
	case cap(s.entries) > 64 && 4*live < cap(s.entries):
		// After a burst, give most of the memory back.
		s.entries, s.head = append(make([]logEntry, 0, 2*live), s.entries[s.head:]...), 0
	case live == 0:
		s.entries, s.head = s.entries[:0], 0
	case s.head >= 32 && 2*s.head >= len(s.entries):
		k := copy(s.entries, s.entries[s.head:])
		s.entries, s.head = s.entries[:k], 0
	}
}

func (l *slidingLog) fresh(s *logState, now int64) bool {
	return s == nil || len(s.entries) == 0 || s.entries[len(s.entries)-1].at <= now-l.window
}

func (l *slidingLog) decide(s *logState, now, n int64, commit bool) (verdict, *logState) {
	var sum int64
	if s != nil {
		l.prune(s, now)
		sum = s.sum
	}
	if sum+n > l.limit {
		// Entries leave oldest first; find the one whose leaving makes room.
		v := verdict{remaining: l.limit - sum}
		freed := int64(0)
		for _, e := range s.entries[s.head:] {
			freed += e.n
			if sum-freed+n <= l.limit {
				v.retryAfter = e.at + l.window - now
				break
			}
		}
		v.resetAfter = s.entries[len(s.entries)-1].at + l.window - now
		return v, s
	}
	at := now
	if s != nil && len(s.entries) > 0 {
		// A clock that went backwards records at the latest time seen, so
		// the log stays in order and nothing leaves early.
		at = max(at, s.entries[len(s.entries)-1].at)
	}
	v := verdict{allowed: true, remaining: l.limit - sum - n, resetAfter: at + l.window - now}
	if !commit {
		return v, s
	}
	if s == nil {
		s = &logState{entries: make([]logEntry, 0, 4)}
	}
	if k := len(s.entries); k > s.head && s.entries[k-1].at == at {
		s.entries[k-1].n += n
	} else {
		s.entries = append(s.entries, logEntry{at: at, n: n})
	}
	s.sum += n
	return v, s
}
