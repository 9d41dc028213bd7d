package core

// fixedWindow counts units per window [k·W, (k+1)·W), aligned to multiples
// of Window since the Unix epoch. A request is allowed when count + n <= L.
// The counter starts over at each boundary, so up to 2·L units can pass in a
// short span around one (L at the end of a window, L at the start of the
// next): that is the algorithm, traded for one counter per key.
type fixedWindow struct {
	limit  int64
	window int64
}

// fwState is a key's window index and the units counted in it.
type fwState struct {
	idx   int64
	count int64
}

func (f *fixedWindow) empty(now int64) fwState { return fwState{idx: floorDiv(now, f.window)} }

func (*fixedWindow) release(fwState) {}

// current returns s as of now: a new, empty window once now has passed s's.
// If the clock went backwards, s's window stays current (nothing is
// forgotten early).
func (f *fixedWindow) current(s fwState, now int64) fwState {
	if idx := floorDiv(now, f.window); idx > s.idx {
		return fwState{idx: idx}
	}
	return s
}

func (f *fixedWindow) fresh(s fwState, now int64) bool { return f.current(s, now).count == 0 }

// holds returns the count of the current window and the time to its end.
func (f *fixedWindow) holds(s fwState, now int64) (units, until int64) {
	if c := f.current(s, now); c.count > 0 {
		return c.count, (c.idx+1)*f.window - now
	}
	return 0, 0
}

func (f *fixedWindow) decide(s fwState, now, n int64, commit bool) (verdict, fwState) {
	cur := f.current(s, now)
	untilEnd := (cur.idx+1)*f.window - now
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

// carry keeps the count of the current window. When the window changes,
// the count moves to the new window that holds now (aligned to multiples
// of the new Window), and leaves when that window ends.
func (f *fixedWindow) carry(s fwState, now int64, to *settings) fwState {
	cur := f.current(s, now)
	if to.window != f.window {
		cur.idx = floorDiv(now, to.window)
	}
	return cur
}

func (f *fixedWindow) adopt(to *settings) { f.limit, f.window = to.policy.Limit, to.window }
