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

// live returns the index of the first entry still in the window at now and
// the units from there on. It changes nothing, so Peek and denials leave the
// log exactly as it was (as the Redis store does).
func (l *slidingLog) live(s *logState, now int64) (first int, units int64) {
	cutoff := now - l.window
	first, units = s.head, s.sum
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
		s.sum -= e.n
	}
	s.head = first
	switch live := len(s.entries) - s.head; {
	case cap(s.entries) > 64 && 4*live < cap(s.entries):
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

// holds returns the units in the window and the time until the last entry
// leaves it.
func (l *slidingLog) holds(s *logState, now int64) (units, until int64) {
	if l.fresh(s, now) {
		return 0, 0
	}
	_, units = l.live(s, now)
	return units, s.entries[len(s.entries)-1].at + l.window - now
}

func (l *slidingLog) decide(s *logState, now, n int64, commit bool) (verdict, *logState) {
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
		return deny(l.limit-sum, wait, s.entries[len(s.entries)-1].at+l.window-now), s
	}
	at := now
	if s != nil && len(s.entries) > 0 {
		// A clock that went backwards records at the latest time seen, so
		// the log stays in order and nothing leaves early.
		at = max(at, s.entries[len(s.entries)-1].at)
	}
	v := verdict{remaining: l.limit - sum - n, resetAfter: at + l.window - now}
	if !commit {
		return v, s
	}
	if s == nil {
		s = &logState{entries: make([]logEntry, 0, 4)}
	} else {
		l.drop(s, first)
	}
	if k := len(s.entries); k > s.head && s.entries[k-1].at == at {
		s.entries[k-1].n += n
	} else {
		s.entries = append(s.entries, logEntry{at: at, n: n})
	}
	s.sum += n
	return v, s
}
