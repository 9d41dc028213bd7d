package core

import "math"

// slidingWindow estimates the units of the last Window from two fixed-window
// counters: with e the time into the current window,
//
//	estimate = prev·(W-e)/W + cur
//
// and a request is allowed when estimate + n <= L. The comparison is made
// exactly, as prev·(W-e) + (cur+n)·W <= L·W in 128-bit integers, so nothing
// overflows or rounds for L up to 1e9 and W up to a year. The estimate
// assumes the previous window's units were spread evenly; it keeps two
// counters per key instead of a log.
type slidingWindow struct {
	limit  int64
	window int64
}

// swState is a key's current window index and its two counters. Limit is at
// most 1e9, so the counters fit 32 bits.
type swState struct {
	idx  int64
	prev uint32
	cur  uint32
}

func (w *slidingWindow) empty(now int64) swState { return swState{idx: floorDiv(now, w.window)} }

func (*slidingWindow) release(swState) {}

// current rolls s forward to now's window and returns it with the time e
// into that window. If the clock went backwards, s's window stays current:
// the state stands still, as at the window's start (e = 0, the previous
// window weighs fully), until the clock reaches that start, lag from now;
// every wait is lag longer.
func (w *slidingWindow) current(s swState, now int64) (c swState, e, lag int64) {
	idx := floorDiv(now, w.window)
	switch {
	case idx == s.idx+1:
		s = swState{idx: idx, prev: s.cur}
	case idx > s.idx+1:
		s = swState{idx: idx}
	}
	into := now - s.idx*w.window
	return s, max(into, 0), max(-into, 0)
}

func (w *slidingWindow) fresh(s swState, now int64) bool {
	c, _, _ := w.current(s, now)
	return c.prev == 0 && c.cur == 0
}

// holds returns the estimate, rounded up, and the time until both counters
// have left the window.
func (w *slidingWindow) holds(s swState, now int64) (units, until int64) {
	c, e, lag := w.current(s, now)
	prev, cur := int64(c.prev), int64(c.cur)
	return cur + int64(mulDivCeil(uint64(prev), uint64(w.window-e), uint64(w.window))), w.resetAfter(prev, cur, e, lag)
}

// fits reports whether prev·(W-e) + (cur+n)·W <= L·W.
func (w *slidingWindow) fits(prev, cur, n, e int64) bool {
	W := uint64(w.window)
	lhs := mul128(uint64(prev), W-uint64(e)).add(mul128(uint64(cur+n), W))
	return !mul128(uint64(w.limit), W).less(lhs)
}

func (w *slidingWindow) decide(s swState, now, n int64, commit bool) (verdict, swState) {
	c, e, lag := w.current(s, now)
	prev, cur := int64(c.prev), int64(c.cur)
	if !w.fits(prev, cur, n, e) {
		return deny(w.remaining(prev, cur, e), lag+w.retryAfter(prev, cur, n, e), w.resetAfter(prev, cur, e, lag)), s
	}
	if !commit {
		// A Peek: the counters as they are.
		return verdict{remaining: w.remaining(prev, cur, e), resetAfter: w.resetAfter(prev, cur, e, lag)}, s
	}
	cur += n
	c.cur = uint32(cur)
	return verdict{remaining: w.remaining(prev, cur, e), resetAfter: w.resetAfter(prev, cur, e, lag)}, c
}

// remaining returns L - cur - ceil(prev·(W-e)/W), at least 0: the largest n
// that fits now.
func (w *slidingWindow) remaining(prev, cur, e int64) int64 {
	used := cur + int64(mulDivCeil(uint64(prev), uint64(w.window-e), uint64(w.window)))
	return max(w.limit-used, 0)
}

// retryAfter returns the wait until n fits, for a request that does not fit
// now. Within the current window it fits once prev·(W-e1) <= (L-cur-n)·W,
// that is at e1 = W - floor((L-cur-n)·W/prev). Failing that, the current
// count becomes the previous one at the boundary, and n fits in the next
// window at e2 = W - floor((L-n)·W/cur).
func (w *slidingWindow) retryAfter(prev, cur, n, e int64) int64 {
	W := w.window
	if room := w.limit - cur - n; room >= 0 && prev > 0 {
		if at := W - int64(min(mulDivFloor(uint64(room), uint64(W), uint64(prev)), uint64(W))); at < W {
			return at - e
		}
	}
	var at int64
	if cur > 0 {
		at = W - int64(min(mulDivFloor(uint64(w.limit-n), uint64(W), uint64(cur)), uint64(W)))
	}
	return W - e + at
}

// resetAfter returns the wait until both counters have left the window.
func (w *slidingWindow) resetAfter(prev, cur, e, lag int64) int64 {
	switch {
	case cur > 0:
		return lag + 2*w.window - e
	case prev > 0:
		return lag + w.window - e
	}
	return 0
}

// carry keeps the counters as they are when only the limit changes. When
// the window changes, the estimate at now (as holds computes it, rounded
// up, at most 2^32-1) becomes the count of the new window that holds now,
// the previous one 0: it weighs fully until that window ends, and then as
// the previous window's count.
func (w *slidingWindow) carry(s swState, now int64, to *settings) swState {
	if to.window == w.window {
		return s
	}
	est, _ := w.holds(s, now)
	return swState{idx: floorDiv(now, to.window), cur: uint32(min(est, math.MaxUint32))}
}

func (w *slidingWindow) adopt(to *settings) { w.limit, w.window = to.policy.Limit, to.window }
