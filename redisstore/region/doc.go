// Package region enforces one global [core.Policy] over several regions,
// each with its own Redis, without a cross-region call per request.
//
// Each region's [Limiter] decides on its share of the global limit, in one
// round trip to the region's Redis, as a [redisstore.Limiter] does. Every
// period it publishes its demand (the units asked for, allowed or not) to
// an aggregate, a Redis every region reaches, and takes its share of the
// split for the next period: every region gets a floor and the rest is
// divided by demand with [Apportion], so the shares always sum to the
// limit. The first region to ask for a period's split once every region has
// published (or, late in the period, without the silent ones) stores it in
// the aggregate; every other region reads that one, so all regions use the
// same split in the same period.
//
//	global := core.Policy{Algorithm: core.FixedWindow, Limit: 6000, Window: time.Minute}
//	lim, err := region.New(local, aggregate, global, "eu", []string{"eu", "us", "ap"},
//		region.WithPeriod(5*time.Second), region.WithFloor(300))
//	defer lim.Close()
//
// # The bound
//
// Shares change only at the start of a period; for [core.FixedWindow] the
// period is a whole number of windows, so shares change only at window
// boundaries and the regions together admit at most Limit in every window:
// over-admission zero. For the other algorithms a key's state carries over
// a change of share (a region's units are scaled to a common, finer unit in
// Redis), and a rebalancing can admit, in the windows that span it, at most
// the sum of the regions' capacity increases: each region's share of Burst
// (or of Limit, for the sliding windows) after it minus before it.
//
// A share's units are rounded down, never up, in those finer units: a
// region never admits more than its share, and with a window algorithm
// and a Limit up to 31,622 it admits exactly its share in a window.
//
// The bound holds while every region reaches the aggregate. A region whose
// goroutine has not taken a period's split when the period starts (a busy
// machine, a slow aggregate) reads it from the aggregate at its first
// decision in the period, one call per period. A region that cannot reach
// it keeps its last share and reports the error through
// [WithErrorHook]; until it reaches the aggregate again, the regions may
// admit up to that share minus its share in the stored split beyond the
// limit. A region that never reached it starts from an equal share
// ([WithShares] sets another).
//
// # Clocks
//
// A region's decisions, and which period they fall in, are read from one
// clock ([WithClock], default the system clock), rounded down to the
// microsecond, not the Redis server's TIME: the gateways of every region
// need synchronized clocks, as fixed windows across regions do anyway.
package region
