package core

// fixedWindow counts units per window [k·W, (k+1)·W), aligned to multiples
// of Window since the Unix epoch, or, with a calendar, per calendar period
// in the policy's zone (calendar.go). A request is allowed when
// count + n <= L. The counter starts over at each boundary, so up to 2·L
// units can pass in a short span around one (L at the end of a window, L
// at the start of the next): that is the algorithm, traded for one counter
// per key.
type fixedWindow struct {
	limit  int64
	window int64
	cal    *calendar // nil: epoch windows
}

// fwState is a key's window index and the units counted in it. The index
// is k for the epoch window [k·W, (k+1)·W), and the start (Unix µs) of a
// calendar period.
type fwState struct {
	idx   int64
	count int64
}

// at returns the index of the window that holds t, and its end.
func (f *fixedWindow) at(t int64) (idx, end int64) {
	if f.cal != nil {
		return f.cal.at(t)
	}
	idx = floorDiv(t, f.window)
	return idx, (idx + 1) * f.window
}

// end returns the end of the window of index idx.
func (f *fixedWindow) end(idx int64) int64 {
	if f.cal != nil {
		_, end := f.cal.at(idx)
		return end
	}
	return (idx + 1) * f.window
}

func (f *fixedWindow) empty(now int64) fwState {
	idx, _ := f.at(now)
	return fwState{idx: idx}
}

func (*fixedWindow) release(fwState) {}

// current returns s as of now, and the end of its window: a new, empty
// window once now has passed s's. If the clock went backwards, s's window
// stays current (nothing is forgotten early).
func (f *fixedWindow) current(s fwState, now int64) (fwState, int64) {
	idx, end := f.at(now)
	switch {
	case idx > s.idx:
		return fwState{idx: idx}, end
	case idx < s.idx:
		end = f.end(s.idx)
	}
	return s, end
}

func (f *fixedWindow) fresh(s fwState, now int64) bool {
	c, _ := f.current(s, now)
	return c.count == 0
}

// holds returns the count of the current window and the time to its end.
func (f *fixedWindow) holds(s fwState, now int64) (units, until int64) {
	if c, end := f.current(s, now); c.count > 0 {
		return c.count, end - now
	}
	return 0, 0
}

func (f *fixedWindow) decide(s fwState, now, n int64, commit bool) (verdict, fwState) {
	cur, end := f.current(s, now)
	untilEnd := end - now
	if commit && cur.count+n <= f.limit {
		cur.count += n
		return verdict{remaining: f.limit - cur.count, resetAfter: untilEnd}, cur
	}
	// Denied, or a Peek: the window as it is.
	var reset int64
	if cur.count > 0 {
		reset = untilEnd
	}
	if cur.count+n > f.limit {
		// A count above the limit: lowered by Memory.SetPolicy.
		return deny(max(f.limit-cur.count, 0), untilEnd, reset), s
	}
	return verdict{remaining: f.limit - cur.count, resetAfter: reset}, s
}

// carry keeps the count of the current window. When the windows change
// (Window, calendar period or zone), the count moves to the new window
// that holds now, and leaves when that window ends.
func (f *fixedWindow) carry(s fwState, now int64, to *settings) fwState {
	cur, _ := f.current(s, now)
	if to.window != f.window || !f.cal.same(to.cal) {
		next := fixedWindow{window: to.window, cal: to.cal}
		cur.idx, _ = next.at(now)
	}
	return cur
}

func (f *fixedWindow) adopt(to *settings) {
	f.limit, f.window, f.cal = to.policy.Limit, to.window, to.cal
}
