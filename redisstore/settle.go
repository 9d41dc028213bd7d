package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

// Settling a request's cost after it ran (core.Settler) and partial grants
// (core.PartialLimiter): calls of one key whose ARGV[3] is below 0
// (prelude.lua), so the common call's arguments stay as they are.

// The modes of ARGV[3] (prelude.lua): a partial grant, a charge.
const (
	modeAtMost int64 = -1
	modeCharge int64 = -2
)

var (
	_ core.Settler        = (*Limiter)(nil)
	_ core.PartialLimiter = (*Limiter)(nil)
)

// Settle settles a request that AllowN(ctx, key, estimate) allowed at most
// elapsed ago at its actual cost, in one round trip, exactly as
// [core.Memory.Settle] does; see [core.Settler]. An actual below the
// estimate gives back estimate - actual as [Limiter.Refund] does (elapsed
// padded likewise on the server's TIME), at most the capacity; one above
// it charges actual - estimate at now, unconditionally, so that the key
// may go into debt, at most one capacity past the limit, and its expiry
// covers the debt. Errors from Redis are wrapped; when one is returned,
// the settle may have been made, never twice.
func (l *Limiter) Settle(ctx context.Context, key string, estimate, actual int64, elapsed time.Duration) error {
	c := l.cur.Load()
	if err := checkSettle(key, estimate, actual, elapsed); err != nil {
		return err
	}
	if actual == estimate {
		return nil
	}
	now, err := l.now()
	if err != nil {
		return err
	}
	k := l.key(key)
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	n, mode := actual-estimate, modeCharge
	if actual < estimate {
		// A policy changed since AllowN may have lowered the capacity:
		// giving back all of it is all there is to give.
		n, mode = min(estimate-actual, c.cost), elapsedMicros(l.padded(elapsed))
	}
	if c.cal != nil {
		return l.refundCalendar(ctx, c, k, now, n, mode)
	}
	verb, id := l.verb(c.sha, c.fn)
	args := []any{verb, id, "1", k, now, n, mode}
	if c.since != nil {
		args = append(args, c.since)
	}
	cmd, err := l.process(ctx, redis.NewCmd(ctx, args...))
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	return refunded(cmd)
}

// checkSettle validates the arguments of Settle as core's Settle does: a
// key, a positive estimate (above the capacity is allowed), a
// non-negative actual and elapsed.
func checkSettle(key string, estimate, actual int64, elapsed time.Duration) error {
	if err := checkCost(key, estimate, estimate, -1); err != nil {
		return err
	}
	if actual < 0 {
		return fmt.Errorf("redisstore: settle: actual cost %d is negative: %w", actual, core.ErrInvalidCost)
	}
	return checkElapsed(elapsed)
}

// AllowAtMost counts as many of n units as fit for key now, at most n and
// at most the capacity, and returns how many, in one round trip, exactly
// as [core.Memory.AllowAtMost] does; see [core.PartialLimiter]. When none
// fit it counts nothing and returns the denial of one unit. Errors from
// Redis are wrapped; when one is returned, the units may have been
// counted, never twice.
func (l *Limiter) AllowAtMost(ctx context.Context, key string, n int64) (core.Decision, int64, error) {
	c := l.cur.Load()
	d := core.Decision{Limit: c.policy.Limit, Policy: c.policy}
	if err := checkCost(key, n, n, -1); err != nil {
		return d, 0, err
	}
	now, err := l.now()
	if err != nil {
		return d, 0, err
	}
	k := l.key(key)
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	n = min(n, c.cost)
	var w *windows
	if c.cal != nil {
		w = c.cal.at(now)
	}
	for range 2 {
		verb, id := l.verb(c.sha, c.fn)
		args := []any{verb, id, "1", k, now, n, modeAtMost}
		if w != nil {
			args = append(args, w.args[0], w.args[1], w.args[2])
		}
		if c.since != nil {
			args = append(args, c.since)
		}
		cmd, err := l.process(ctx, redis.NewCmd(ctx, args...))
		if err != nil {
			return d, 0, fmt.Errorf("redisstore: eval: %w", err)
		}
		r, ok := cmd.Val().(string)
		if !ok || len(r) != answerLen+8 {
			return d, 0, fmt.Errorf("redisstore: eval: partial grant script returned %v, want %d bytes", cmd.Val(), answerLen+8)
		}
		if be64(r) == 2 && w != nil {
			w = c.cal.around(be64(r[8:])) // the server's time
			continue
		}
		d.Allowed = be64(r) == 1
		d.Remaining = be64(r[8:])
		d.RetryAfter = time.Duration(be64(r[16:])) * time.Microsecond
		d.ResetAfter = time.Duration(be64(r[24:])) * time.Microsecond
		d.Delay = time.Duration(be64(r[32:])) * time.Microsecond
		return d, be64(r[40:]), nil
	}
	return d, 0, fmt.Errorf("redisstore: eval: the server's time left the calendar period it gave")
}

var (
	_ core.Settler        = (*Layered)(nil)
	_ core.PartialLimiter = (*Layered)(nil)
)

// Settle settles the request in every layer, in one round trip and
// atomically, each layer exactly as a [Limiter] of its policy settles (and
// [core.Layered.Settle]); see [core.Settler]. A charge is counted in every
// layer, up to each one's bound; a refund gives back up to each layer's
// capacity.
func (l *Layered) Settle(ctx context.Context, key string, estimate, actual int64, elapsed time.Duration) error {
	return l.SettleKeys(ctx, []string{key}, estimate, actual, elapsed)
}

// SettleKeys is Settle with a key per layer, as for [Layered.AllowKeys].
func (l *Layered) SettleKeys(ctx context.Context, keys []string, estimate, actual int64, elapsed time.Duration) error {
	if err := l.checkKeys(keys); err != nil {
		return err
	}
	for i := range l.layers {
		if err := checkSettle(layerKey(keys, i), estimate, actual, elapsed); err != nil {
			return err
		}
	}
	if actual == estimate {
		return nil
	}
	rkeys, err := l.redisKeys(keys)
	if err != nil {
		return err
	}
	now, err := l.run.now()
	if err != nil {
		return err
	}
	c := l.cur.Load()
	costs, mode := []int64{actual - estimate}, modeCharge
	if actual < estimate {
		costs = make([]int64, len(l.layers))
		for i := range costs {
			costs[i] = min(estimate-actual, c.costs[i])
		}
		mode = elapsedMicros(l.run.padded(elapsed))
	}
	cmd, err := l.eval(ctx, c, rkeys, now, costs, nil, true, mode)
	if err != nil {
		return l.wrap("eval", err)
	}
	return refunded(cmd)
}

// AllowAtMost counts, in every layer, as many of n units as fit in all of
// them for key now, and returns how many, in one round trip and
// atomically, exactly as [core.Layered.AllowAtMost] does; see
// [core.PartialLimiter]. The Decision is the most restrictive layer's for
// the units counted, or, when not even one unit fits, the denial of one
// unit.
func (l *Layered) AllowAtMost(ctx context.Context, key string, n int64) (core.Decision, int64, error) {
	c := l.cur.Load()
	first := c.policies[0]
	d := core.Decision{Limit: first.Limit, Policy: first}
	if err := checkCost(key, n, n, -1); err != nil {
		return d, 0, err
	}
	for i := range l.layers {
		n = min(n, c.costs[i])
	}
	rkeys, err := l.redisKeys([]string{key})
	if err != nil {
		return d, 0, err
	}
	now, err := l.run.now()
	if err != nil {
		return d, 0, err
	}
	cmd, err := l.eval(ctx, c, rkeys, now, []int64{n}, nil, true, modeAtMost)
	if err != nil {
		return d, 0, l.wrap("eval", err)
	}
	v, ok := cmd.Val().([]any)
	if !ok || len(v) != 5*len(l.layers)+1 {
		return d, 0, fmt.Errorf("redisstore: eval: partial grant script returned %v, want %d integers", cmd.Val(), 5*len(l.layers)+1)
	}
	var buf [4]core.Decision
	ds, err := layerDecisions(c.policies, v, buf[:0])
	if err != nil {
		return d, 0, err
	}
	granted, ok := v[len(v)-1].(int64)
	if !ok {
		return d, 0, fmt.Errorf("redisstore: eval: partial grant script returned %v, want integers", v)
	}
	return core.MostRestrictive(ds).Decision, granted, nil
}
