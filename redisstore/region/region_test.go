package region

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/redis/go-redis/v9"
)

var long = flag.Bool("region.long", false, "run the regional comparison over 60 windows instead of 12")

var names = []string{"a", "b", "c"}

// group builds the three regions' limiters on one manual clock, without
// their goroutines: the test calls step.
func group(t *testing.T, p core.Policy, clock core.Clock, opts ...Option) ([]*Limiter, *redis.Client, []*redis.Client) {
	t.Helper()
	addrs, aggAddr := fleet(t)
	agg := newClient(t, aggAddr)
	var locals []*redis.Client
	var lims []*Limiter
	prefix := uniquePrefix(t)
	for i, name := range names {
		local := newClient(t, addrs[i])
		// The manual clock moves faster than Redis's expiries on a loaded
		// machine: a margin of an hour keeps keys alive for the test.
		o := append([]Option{WithClock(clock), WithPrefix(prefix), WithTimeout(5 * time.Second), func(o *options) { o.noLoop, o.margin = true, time.Hour }}, opts...)
		l, err := New(local, agg, p, name, names, o...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		locals = append(locals, local)
		lims = append(lims, l)
	}
	return lims, agg, locals
}

// checkShares checks that the regions' shares sum to the limit and none is
// under the floor, and returns them.
func checkShares(t *testing.T, lims []*Limiter, limit, floor int64) []int64 {
	t.Helper()
	var shares []int64
	var sum int64
	for _, l := range lims {
		s := l.Share()
		if s < floor {
			t.Errorf("region %s: share %d under the floor %d", l.self, s, floor)
		}
		shares = append(shares, s)
		sum += s
	}
	if sum != limit {
		t.Errorf("shares %v sum to %d, want %d", shares, sum, limit)
	}
	return shares
}

// follow is the demand of window w in regions a, b, c: 1,000 requests a
// window, following the sun from a to b to c, four windows each, so each
// region's demand changes every four windows and then holds.
func follow(w int) [3]int64 {
	switch (w / 4) % 3 {
	case 0:
		return [3]int64{700, 200, 100}
	case 1:
		return [3]int64{100, 700, 200}
	}
	return [3]int64{200, 100, 700}
}

// TestThreeStrategies drives three regions, each with its own redis-server,
// and an aggregate on a fourth, on a manual clock through windows of 1 s
// whose demand moves from region to region, and compares the admitted
// requests per window of three strategies for one global limit of 600:
// static thirds (a redisstore limiter per region), rebalanced shares (this
// package, a period of one window) and a single global store (one
// redisstore limiter on the aggregate). It asserts exact invariants (the
// shares sum to the limit, floors hold, each region admits exactly the
// smaller of its demand and its share, no window admits more than the
// limit) and prints the table. Run the 60-window form with
//
//	go test ./redisstore/region -run ThreeStrategies -v -region.long
func TestThreeStrategies(t *testing.T) {
	const limit, floor = 600, 30
	windows := 12
	if *long {
		windows = 60
	}
	W := time.Second
	p := core.Policy{Algorithm: core.FixedWindow, Limit: limit, Window: W}
	start := time.Unix(1_800_000_000, 0)
	clock := core.NewManualClock(start)
	lims, agg, locals := group(t, p, clock, WithPeriod(200*time.Millisecond), WithFloor(floor))
	if got := time.Duration(lims[0].periodUS) * time.Microsecond; got != W {
		t.Fatalf("period %v, want one window %v", got, W)
	}
	prefix := lims[0].prefix
	static := make([]*redisstore.Limiter, 3)
	for i := range static {
		sp := p
		sp.Limit = limit / 3
		var err error
		if static[i], err = redisstore.New(locals[i], sp, redisstore.WithClock(clock), redisstore.WithPrefix(prefix), redisstore.WithExpiryMargin(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	global, err := redisstore.New(agg, p, redisstore.WithClock(clock), redisstore.WithPrefix(prefix), redisstore.WithExpiryMargin(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	type event struct {
		at     time.Duration
		region int
		step   bool
	}
	var sums [4]int64 // demand, static, rebalanced, global
	var worst [3]int64
	var table strings.Builder
	fmt.Fprintf(&table, "| window | demand a/b/c | static | rebalanced (shares a/b/c) | global store |\n|---:|---:|---:|---:|---:|\n")
	for w := range windows {
		d := follow(w)
		var events []event
		for i, n := range d {
			for k := range n {
				events = append(events, event{at: time.Duration(k) * W / time.Duration(n), region: i})
			}
			events = append(events, event{at: W / 2, region: i, step: true}, event{at: 3 * W / 4, region: i, step: true})
		}
		slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
		base := start.Add(time.Duration(w) * W)
		clock.Set(base)
		shares := checkShares(t, lims, limit, floor)
		var got [3][3]int64 // strategy, region
		for _, e := range events {
			clock.Set(base.Add(e.at))
			if e.step {
				lims[e.region].step(ctx, clock.Now())
				continue
			}
			for s, l := range []core.Limiter{static[e.region], lims[e.region], global} {
				dec, err := l.AllowN(ctx, "api-key-7", 1)
				if err != nil {
					t.Fatal(err)
				}
				if dec.Allowed {
					got[s][e.region]++
				}
			}
		}
		var tot [3]int64
		for s := range got {
			tot[s] = got[s][0] + got[s][1] + got[s][2]
			worst[s] = max(worst[s], tot[s]-limit)
			sums[s+1] += tot[s]
			if tot[s] > limit {
				t.Errorf("window %d: strategy %d admitted %d, over the limit %d", w, s, tot[s], limit)
			}
		}
		sums[0] += d[0] + d[1] + d[2]
		for i := range 3 {
			if want := min(d[i], shares[i]); got[1][i] != want {
				t.Errorf("window %d, region %s: admitted %d with demand %d and share %d, want %d", w, names[i], got[1][i], d[i], shares[i], want)
			}
		}
		fmt.Fprintf(&table, "| %d | %d/%d/%d | %d | %d (%d/%d/%d) | %d |\n",
			w, d[0], d[1], d[2], tot[0], tot[1], shares[0], shares[1], shares[2], tot[2])
	}
	fmt.Fprintf(&table, "| total | %d | %d | %d | %d |\n", sums[0], sums[1], sums[2], sums[3])
	fmt.Fprintf(&table, "| worst over-admission in a window | | %d | %d | %d |\n", worst[0], worst[1], worst[2])
	t.Logf("limit %d per %v, floor %d, %d windows:\n%s", limit, W, floor, windows, table.String())
}
