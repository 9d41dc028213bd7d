package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Giving units back ([Refunder]).
//
// A refund of n units counted at most e ago (e rounded up to whole
// microseconds) is applied at now, the limiter's clock reading, and names
// s = now - e: the earliest time the units can have been counted. Each
// algorithm gives back only what it can prove is still counted for them,
// so a refunded key never has more room than it would have had if the
// refunded request had never been made (the requests allowed in between
// being the same), and never more than a fresh key:
//
//   - token and leaky bucket (GCRA): the refill has already returned e·q of
//     the request's n·T units (in 1/q µs), so at most g = max(0, n·T - e·q)
//     are still counted; the backlog d becomes max(0, d - g). A request
//     that found a bucket already partly drained may still weigh its full
//     n·T; giving back only g is the conservative bound. A raw backlog
//     beyond gcraMaxBacklog (a clock stepped back by years) is left alone:
//     decisions read it capped, and a refund below the cap could give more.
//   - fixed window: the units were counted in s's window or later, and not
//     after the key's current window; if s lies in the current window, the
//     count loses n (not below 0). Otherwise they were counted in a window
//     already forgotten, or may have been.
//   - sliding window: if s lies in the current window, cur loses n; if it
//     lies in the previous one, prev loses n (the units may be in cur,
//     which weighs more, so taking them from prev gives back less); older:
//     nothing. Neither goes below 0.
//   - sliding log: the request's entry is at s or later (a clock that went
//     back records at the latest time seen, later still). If s is still in
//     the window (s > now - W), that entry is live, and up to n units are
//     removed from the entries at s or later, oldest first (the ones that
//     leave soonest: giving those back gives the least room), reducing the
//     last one touched when it holds more than needed. Otherwise the units
//     may have left already, and the live entries hold other requests':
//     nothing is given back.
//
// A key not held is left alone: no state is created. A Reset or a lossy
// eviction between AllowN and Refund, or a clock that jumped forward in
// between, breaks the premise (the units are no longer, or no longer
// provably, counted); the refund then gives back at most n units counted
// for other requests.

// ErrNoRefund reports a limiter that cannot give units back: a wrapper
// whose limiter is not a [Refunder] (see [As]).
var ErrNoRefund = errors.New("limiter cannot give units back")

// ErrInvalidElapsed reports a negative elapsed time given to Refund.
var ErrInvalidElapsed = errors.New("elapsed time must not be negative")

// noRefund returns ErrNoRefund, wrapped, naming the limiter that cannot
// refund.
func noRefund(who string, l Limiter) error {
	return fmt.Errorf("core: %s: %T: %w", who, l, ErrNoRefund)
}

// checkRefund validates the arguments of Refund: those of AllowN, and a
// non-negative elapsed.
func checkRefund(key string, n, maxCost int64, elapsed time.Duration) error {
	if err := checkRequest(key, n, maxCost); err != nil {
		return err
	}
	if elapsed < 0 {
		return fmt.Errorf("core: refund: elapsed %v: %w", elapsed, ErrInvalidElapsed)
	}
	return nil
}

// elapsedMicros returns elapsed in microseconds, rounded up: a refund then
// assumes the units may have been counted a little earlier than they were,
// which can only give back less.
func elapsedMicros(elapsed time.Duration) int64 {
	return ceilDiv(int64(elapsed), int64(time.Microsecond))
}

var _ Refunder = (*Memory)(nil)

// Refund gives back n units that AllowN counted for key at most elapsed
// ago ([Refunder]), as much of them as still counts, with s = now - elapsed
// the earliest time they can have been counted: the buckets give back what
// the refill has not already returned since s; the fixed and sliding
// windows give back n units when s lies in the current window (for the
// sliding window, the previous one too) and nothing when it lies in an
// older one; the sliding log removes up to n units from its entries at s or
// later, oldest first, while s is still in the window. It fails for the
// arguments AllowN rejects and for a negative elapsed; a key the limiter
// does not hold is left alone. Like AllowN, it reads the clock once and
// ignores ctx.
func (m *Memory) Refund(_ context.Context, key string, n int64, elapsed time.Duration) error {
	if err := checkRefund(key, n, m.set.Load().cost, elapsed); err != nil {
		return err
	}
	now := m.now()
	m.eng.refund(key, now, now-elapsedMicros(elapsed), n)
	return nil
}

// refund gives back n units of key counted at since or later (Unix µs),
// at now, under the key's shard lock. A key not held is left alone; the
// key's reference bit is not set (a refund is no use of the key).
func (s *store[S, A]) refund(key string, now, since, n int64) {
	sh, h, check := s.locate(key)
	sh.mu.Lock()
	// A policy changed since the caller checked n may have lowered the
	// capacity: giving back all of it is all there is to give.
	n = min(n, s.set.Load().cost)
	if i, res := sh.find(h&tagHash|tagUsed, check); res == found {
		// A refund may make the state fresh sooner than the shard's
		// bound on fresh times says.
		s.track(sh, s.refundIn(sh, i, now, since, n), now)
	}
	sh.mu.Unlock()
}

// refund gives back g = max(0, n·T - e·q) of the backlog, e = now - since.
func (g *bucket) refund(tat uint64, now, since, n int64) uint64 {
	d := int64(tat - g.scaled(now))
	if d <= 0 || d > gcraMaxBacklog {
		return tat // full, or stepped back beyond what decisions read
	}
	back := n*g.unit - (now-since)*int64(g.q)
	if back <= 0 {
		return tat
	}
	return g.scaled(now) + uint64(max(d-back, 0))
}

func (f *fixedWindow) refund(s fwState, now, since, n int64) fwState {
	cur, _ := f.current(s, now)
	if idx, _ := f.at(since); idx == cur.idx {
		cur.count = max(cur.count-n, 0)
		return cur
	}
	return s
}

func (w *slidingWindow) refund(s swState, now, since, n int64) swState {
	c, _, _ := w.current(s, now)
	// n is at most Limit, which fits 32 bits.
	switch floorDiv(since, w.window) {
	case c.idx:
		c.cur -= uint32(min(int64(c.cur), n))
	case c.idx - 1:
		c.prev -= uint32(min(int64(c.prev), n))
	default:
		return s
	}
	return c
}

// refund drops the entries that have left the window and takes n units
// from the first entry at since or later and the newer ones (see
// logState.take): O(log k) for k entries, plus the entries it empties.
func (l *slidingLog) refund(r logRef, now, since, n int64) logRef {
	s := l.logs.at(r)
	if s == nil || since <= now-l.window {
		return r
	}
	s.expire(s.after(now-l.window, false))
	s.take(s.after(since-1, true), n)
	return r
}
