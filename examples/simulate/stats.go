package main

import (
	"cmp"
	"slices"
	"time"
)

// span is a stretch of the simulation, [from, to], both offsets from the
// start.
type span struct{ from, to time.Duration }

// worstBurst returns the most units allowed in any window of length w, and
// the first and last of the requests that make it up. A window is half open,
// [s, s+w): a request at s and one at s+w are never in the same window,
// which is how the sliding log counts. events must be in time order. It is
// exact: the busiest window can always be slid to start at an allowed
// request, so it checks the window starting at each, with two pointers.
func worstBurst(events []event, w time.Duration) (units int64, where span) {
	var sum int64
	i := 0
	for _, e := range events {
		sum += e.cost
		for e.at-events[i].at >= w {
			sum -= events[i].cost
			i++
		}
		if sum > units {
			units, where = sum, span{events[i].at, e.at}
		}
	}
	return units, where
}

// percentile returns the p-th percentile (0 < p <= 100) of ds by the
// nearest-rank method: the smallest value that at least p % of ds are at
// most. It returns 0 and false for no values.
func percentile(ds []time.Duration, p int) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 · n), 1-based
	return s[max(rank, 1)-1], true
}

// retryAfters returns the RetryAfter of every denial.
func retryAfters(denied []event) []time.Duration {
	ds := make([]time.Duration, len(denied))
	for i, e := range denied {
		ds[i] = e.retry
	}
	return ds
}

// longestDelay returns the longest Delay an allowed request waited (the
// leaky bucket's queue; zero for the other algorithms).
func longestDelay(allowed []event) time.Duration {
	var d time.Duration
	for _, e := range allowed {
		d = max(d, e.delay)
	}
	return d
}

// served returns the allowed requests at the time they are served, sent time
// plus Delay, in time order.
func served(allowed []event) []event {
	out := slices.Clone(allowed)
	for i := range out {
		out[i].at += out[i].delay
	}
	slices.SortStableFunc(out, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	return out
}
