package core

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Settling a request's cost after it ran ([Settler]).
//
// A request takes an estimate with AllowN before it runs and settles its
// actual cost after. Less than the estimate gives back the difference, as
// Refund does (refund.go). More charges the difference at now,
// unconditionally, whatever room is left: the key may go into debt, a
// state beyond the limit, which every algorithm already decides exactly
// (a policy lowered by SetPolicy leaves one too), denying every request
// until the debt has been repaid as the algorithm defines it:
//
//   - token and leaky bucket (GCRA): the backlog d grows by k·T, past the
//     capacity C; a request of n units waits until d + n·T <= C, that is
//     (d + n·T - C) of refill. The backlog is bounded at 2·C (one capacity
//     of debt): a charge beyond it is dropped.
//   - fixed window (epoch or calendar): the current window's count grows
//     by k, past L; a request waits until the window ends, and whatever
//     debt remains is forgotten there, as every count is. The count is
//     bounded at 2·L.
//   - sliding window: the current window's counter grows by k; the
//     estimate prev·(W-e)/W + cur decides as always, so the charge weighs
//     fully until its window ends and then as the previous window's
//     count. The counter is bounded at 2·L (it fits 32 bits for L up to
//     1e9).
//   - sliding log: an entry of k units at now (the latest time the log has
//     seen, merged into the last entry when it has that time), which
//     leaves at now + W as an allowed request's would. The log's units are
//     bounded at 2·L, so it holds at most 2·L entries, in a ring of at
//     most ⌈8·L/3⌉ slots while in debt (see logState).
//
// A charge for a key not held (its state was dropped fresh, or evicted)
// adds it, as a new key's first request does. Charging is the one write
// that can leave a state beyond what AllowN allows, and it only ever adds
// to what the state counts: like a request, it can only delay when the
// entry becomes fresh, and a key in debt holds units (it is not fresh and
// is evicted after the keys that hold fewer).

// Settler is a [Limiter] that can settle a request's cost after it ran: a
// request whose cost is known only once it is served (the tokens an AI
// model used, the rows an export wrote) takes an estimate with AllowN
// before it runs and reports its actual cost after.
//
// The memory store ([Memory], [Layered], [Tiered]) implements it, and so
// do the Redis store's Limiter and Layered (redisstore). The wrappers ([Failover], hotkey.DenialCache, hotkey.Leased,
// observe.Limiter, observe.Shadow) do not pass it on yet: [As] finds no
// Settler through them.
type Settler interface {
	Limiter

	// Settle settles a request that AllowN(ctx, key, estimate) allowed at
	// most elapsed ago (measured as for [Refunder.Refund], from before
	// the AllowN call) at its actual cost. An actual below the estimate
	// gives back estimate - actual as Refund does, never more room than
	// if the request had not been made; 0 gives back the whole estimate.
	// An actual above it charges actual - estimate at now,
	// unconditionally: the key may go into debt and is then denied until
	// the debt is repaid, as each algorithm defines it (the bucket's
	// refill, the end of a fixed window, a sliding log's entries leaving),
	// with the exact RetryAfter of that time. Debt is bounded at one
	// capacity past the limit ([Policy.Capacity]); a charge beyond it is
	// not counted. An actual equal to the estimate does nothing. Settle
	// makes no [Decision].
	//
	// Errors are those of Refund for the key and elapsed, and
	// [ErrInvalidCost] for an estimate below 1 or a negative actual. An
	// estimate above the capacity is not refused (a policy lowered since
	// AllowN may have lowered the capacity); no more than the capacity is
	// given back. A layered limiter settles in every layer. It is safe for
	// concurrent use.
	Settle(ctx context.Context, key string, estimate, actual int64, elapsed time.Duration) error
}

var (
	_ Settler = (*Memory)(nil)
	_ Settler = (*Layered)(nil)
	_ Settler = (*Tiered)(nil)
)

// checkSettle validates the arguments of Settle: a key, a positive
// estimate, a non-negative actual and elapsed. An estimate above the
// capacity is not refused (a policy lowered since AllowN counted it may
// have lowered the capacity): giving back is then capped at it.
func checkSettle(key string, estimate, actual int64, elapsed time.Duration) error {
	if err := checkRefund(key, estimate, estimate, elapsed); err != nil {
		return err
	}
	if actual < 0 {
		return fmt.Errorf("core: settle: actual cost %d is negative: %w", actual, ErrInvalidCost)
	}
	return nil
}

// Settle settles a request that AllowN allowed for estimate units at most
// elapsed ago at its actual cost ([Settler]): a refund of estimate -
// actual when it is less, a charge of actual - estimate at now when it is
// more. Like AllowN, it reads the clock once and ignores ctx.
func (m *Memory) Settle(_ context.Context, key string, estimate, actual int64, elapsed time.Duration) error {
	if err := checkSettle(key, estimate, actual, elapsed); err != nil {
		return err
	}
	m.settle(key, estimate, actual, elapsedMicros(elapsed))
	return nil
}

// settle is Settle with valid arguments and elapsed in µs.
func (m *Memory) settle(key string, estimate, actual, elapsed int64) {
	if actual == estimate {
		return
	}
	now := m.now()
	if actual < estimate {
		m.eng.refund(key, now, now-elapsed, estimate-actual)
		return
	}
	m.eng.charge(key, now, actual-estimate)
}

// Settle settles the request in every layer ([Settler]): each layer gives
// back or charges in turn, under its own key's shard lock. A charge always
// succeeds, so no layer waits for another; a request decided between two
// layers' settles sees some layers settled and the others not yet, as
// after a Refund (see [Layered.RefundKeys]) or before a charge that it
// could have preceded.
func (l *Layered) Settle(ctx context.Context, key string, estimate, actual int64, elapsed time.Duration) error {
	return l.SettleKeys(ctx, []string{key}, estimate, actual, elapsed)
}

// SettleKeys is Settle with a key per layer, as for [Layered.AllowKeys].
func (l *Layered) SettleKeys(_ context.Context, keys []string, estimate, actual int64, elapsed time.Duration) error {
	if err := l.checkKeys(keys); err != nil {
		return err
	}
	for i := range l.layers {
		if err := checkSettle(keys[min(i, len(keys)-1)], estimate, actual, elapsed); err != nil {
			return err
		}
	}
	e := elapsedMicros(elapsed)
	for i, m := range l.layers {
		m.settle(keys[min(i, len(keys)-1)], estimate, actual, e)
	}
	return nil
}

// Settle asks for key's plan and settles the request in that plan's
// limiter ([Settler]), by the plan the key is on when Settle is called, as
// for [Tiered.Refund].
func (t *Tiered) Settle(ctx context.Context, key string, estimate, actual int64, elapsed time.Duration) error {
	if err := checkSettle(key, estimate, actual, elapsed); err != nil {
		return err
	}
	m, err := t.limiter(ctx, key, estimate)
	if err != nil {
		return err
	}
	return m.Settle(ctx, key, estimate, actual, elapsed)
}

// charge counts n more units of key at now, under its shard lock, adding
// the key if it is not held. With lock-free decisions the state is
// replaced by CAS, as a refund's is (refundIn), deciding again if a
// reader changed it first. A charge is a use of the key: it sets the
// reference bit.
func (s *store[S, A]) charge(key string, now, n int64) {
	sh, h, check := s.locate(key)
	tag := h&tagHash | tagUsed
	sh.mu.Lock()
	i, res := sh.find(tag, check)
	if res != found {
		s.insert(sh, i, res, tag, check, s.alg.charge(s.alg.empty(now), now, n), now)
		sh.mu.Unlock()
		return
	}
	e := &sh.slots[i]
	if s.atom == nil {
		e.state = s.alg.charge(e.state, now, n)
	} else {
		for {
			st := s.atom.load(&e.state)
			if s.atom.cas(&e.state, st, s.alg.charge(st, now, n)) {
				break
			}
		}
	}
	setRef(e, atomic.LoadUint64(&e.tag))
	sh.mu.Unlock()
}

// charge adds n·T to the backlog, up to 2·C: max(TAT, now) + n·T.
func (g *bucket) charge(tat uint64, now, n int64) uint64 {
	d, most := g.backlog(tat, now), 2*g.cap
	if d >= most {
		return tat // at the bound, or stepped back beyond it
	}
	if n >= ceilDiv(most-d, g.unit) {
		d = most
	} else {
		d += n * g.unit
	}
	return g.scaled(now) + uint64(d)
}

func (f *fixedWindow) charge(s fwState, now, n int64) fwState {
	cur, _ := f.current(s, now)
	if room := 2*f.limit - cur.count; room > 0 {
		cur.count += min(n, room)
	}
	return cur
}

func (w *slidingWindow) charge(s swState, now, n int64) swState {
	c, _, _ := w.current(s, now)
	if room := 2*w.limit - int64(c.cur); room > 0 {
		c.cur += uint32(min(n, room))
	}
	return c
}

// charge drops the entries that have left the window and adds n units at
// now (or the latest time the log has seen), up to 2·L units in the log.
func (l *slidingLog) charge(r logRef, now, n int64) logRef {
	s := l.logs.at(r)
	var sum int64
	at := now
	if s != nil {
		s.expire(s.after(now-l.window, false))
		sum = int64(s.sum)
		if s.n() > 0 {
			at = max(at, s.last())
		}
	}
	if n = min(n, 2*l.limit-sum); n <= 0 {
		return r
	}
	if s == nil {
		r = l.logs.alloc()
		s = l.logs.at(r)
	}
	s.push(at, n, 2*l.limit)
	return r
}
