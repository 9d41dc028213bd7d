package core_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Three regions share a global limit of 600 requests a minute, each
// enforcing its share locally (a Memory limiter, fixed windows), with
// demand that follows the sun from region A to B to C. Static shares split
// the limit evenly; rebalancing gives each region, every minute, a floor of
// 30 plus a part of the rest proportional to its demand in the minute
// before. A global store (one limiter for all) is the reference. The shares
// sum to the global limit, so no minute ever admits more than 600, however
// the shares move: the over-admission bound is zero.
func Example_regionalShares() {
	const global, floor = 600, 30
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := core.NewManualClock(start)
	demand := [][3]int64{ // requests per minute in regions A, B, C
		{700, 200, 100}, {700, 200, 100}, {200, 700, 100},
		{200, 700, 100}, {100, 200, 700}, {100, 200, 700},
	}
	newLimiter := func(limit int64) *core.Memory {
		l, err := core.New(core.Policy{Algorithm: core.FixedWindow, Limit: max(limit, 1), Window: time.Minute}, core.WithClock(clock))
		if err != nil {
			panic(err)
		}
		return l
	}
	// rebalance splits the global limit by last minute's demand.
	rebalance := func(last [3]int64) [3]int64 {
		total := last[0] + last[1] + last[2]
		var s [3]int64
		rest := int64(global - 3*floor)
		for i := range s {
			s[i] = floor + rest*last[i]/total
		}
		top := 0
		for i := range s {
			if last[i] > last[top] {
				top = i
			}
		}
		s[top] += global - (s[0] + s[1] + s[2]) // the rounding remainder
		return s
	}
	static := [3]int64{global / 3, global / 3, global / 3}
	shares := static
	var sums [3]int64
	fmt.Println("minute  demand A/B/C   static  rebalanced (shares)   global store")
	for m, d := range demand {
		if m > 0 {
			shares = rebalance(demand[m-1])
		}
		var st, rb [3]*core.Memory
		for i := range 3 {
			st[i], rb[i] = newLimiter(static[i]), newLimiter(shares[i])
		}
		gl := newLimiter(global)
		// Each region's requests spread evenly over the minute, all on
		// one clock, in time order.
		type req struct {
			at     time.Duration
			region int
		}
		var reqs []req
		for i, n := range d {
			for k := range n {
				reqs = append(reqs, req{time.Duration(k) * time.Minute / time.Duration(n), i})
			}
		}
		slices.SortStableFunc(reqs, func(a, b req) int { return int(a.at - b.at) })
		var got [3]int64
		minute := start.Add(time.Duration(m) * time.Minute)
		for _, r := range reqs {
			clock.Set(minute.Add(r.at))
			key := "api-key-7"
			for j, l := range []*core.Memory{st[r.region], rb[r.region], gl} {
				if dd, _ := l.Allow(ctx, key); dd.Allowed {
					got[j]++
				}
			}
		}
		for j := range got {
			sums[j] += got[j]
		}
		fmt.Printf("%6d  %4d/%3d/%3d  %6d  %10d (%3d/%3d/%3d)  %12d\n",
			m, d[0], d[1], d[2], got[0], got[1], shares[0], shares[1], shares[2], got[2])
	}
	fmt.Printf("total   %12d  %6d  %10d                %12d\n", 6000, sums[0], sums[1], sums[2])
	// Output:
	// minute  demand A/B/C   static  rebalanced (shares)   global store
	//      0   700/200/100     500         500 (200/200/200)           600
	//      1   700/200/100     500         600 (387/132/ 81)           600
	//      2   200/700/100     500         413 (387/132/ 81)           600
	//      3   200/700/100     500         600 (132/387/ 81)           600
	//      4   100/200/700     500         381 (132/387/ 81)           600
	//      5   100/200/700     500         600 ( 81/132/387)           600
	// total           6000    3000        3094                        3600
}
