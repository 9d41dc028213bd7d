package region

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

// drain spends everything l allows key at the clock's time and returns how
// many units that was.
func drain(t *testing.T, l *Limiter, key string) int64 {
	t.Helper()
	var n int64
	for {
		d, err := l.AllowN(context.Background(), key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return n
		}
		n++
	}
}

// rebalance steps every region at the middle and at three quarters of the
// period that starts at start and lasts e, as their goroutines would.
func rebalance(lims []*Limiter, clock *core.ManualClock, start time.Time, e time.Duration) {
	for _, at := range []time.Duration{e / 2, 3 * e / 4} {
		clock.Set(start.Add(at))
		for _, l := range lims {
			l.step(context.Background(), clock.Now())
		}
	}
}

// TestTokenBucketBound checks the bound of a rebalancing for token buckets:
// at the instant the shares change, the regions can spend at most the
// tokens they held just before plus the sum of their capacity increases.
// The worst case is set up: region a, whose share grows, holds a full
// bucket; b and c, whose shares shrink, are empty.
func TestTokenBucketBound(t *testing.T) {
	const limit = 300
	p := core.Policy{Algorithm: core.TokenBucket, Limit: limit, Window: time.Second}
	start := time.Unix(1_800_000_000, 0)
	clock := core.NewManualClock(start)
	const E = 4 * time.Second
	lims, _, _ := group(t, p, clock, WithPeriod(E), WithFloor(10))
	ctx := context.Background()
	// Period 0: a asks for 400 units, b and c for 10 each.
	for range 400 {
		lims[0].AllowN(ctx, "k", 1)
	}
	for _, l := range lims[1:] {
		for range 10 {
			l.AllowN(ctx, "k", 1)
		}
	}
	rebalance(lims, clock, start, E)
	// Just before period 1: a has refilled; b and c are emptied.
	clock.Set(start.Add(E - time.Microsecond))
	var before, capBefore [3]int64
	for i, l := range lims {
		if i > 0 {
			drain(t, l, "k")
		}
		d, err := l.Peek(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		before[i] = d.Remaining // what is left after the unit peeked at
		if d.Allowed {
			before[i]++
		}
		capBefore[i] = l.cur.Load().capacity
	}
	clock.Set(start.Add(E))
	shares := checkShares(t, lims, limit, 10)
	var spent, held, increase int64
	for i, l := range lims {
		spent += drain(t, l, "k")
		held += before[i]
		increase += max(0, l.cur.Load().capacity-capBefore[i])
	}
	if spent > held+increase {
		t.Errorf("spent %d at the rebalancing, above the %d tokens held plus the %d of capacity increases", spent, held, increase)
	}
	t.Logf("shares %v: held %d tokens before (capacities %v), spent %d at the instant; bound %d + %d", shares, held, capBefore, spent, held, increase)
}

// TestAggregateUnreachable: a region that never reaches the aggregate
// starts from an equal share and decides; one that loses it keeps its last
// share; errors reach the hook; nothing panics.
func TestAggregateUnreachable(t *testing.T) {
	addrs, _ := fleet(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	var mu sync.Mutex
	var errs []error
	hook := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 100, Window: time.Second}
	clock := core.NewManualClock(time.Unix(1_800_000_000, 0))
	agg := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer agg.Close()
	l, err := New(newClient(t, addrs[0]), agg, p, "b", names, WithClock(clock), WithPrefix(uniquePrefix(t)),
		WithErrorHook(hook), WithPeriod(time.Second), WithShares(map[string]int64{"a": 50, "b": 30, "c": 20}), func(o *options) { o.noLoop = true })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := drain(t, l, "k"); got != 30 || l.Share() != 30 {
		t.Errorf("without the aggregate: admitted %d, share %d; want the configured 30", got, l.Share())
	}
	clock.Advance(time.Second / 2)
	l.step(context.Background(), clock.Now())
	clock.Advance(time.Second / 2)
	if got := drain(t, l, "k"); got != 30 {
		t.Errorf("next period: admitted %d, want the last share 30", got)
	}
	mu.Lock()
	n := len(errs)
	mu.Unlock()
	if n < 2 || !strings.HasPrefix(errs[0].Error(), "region: aggregate: ") {
		t.Errorf("hook got %d errors (%v), want one from New and one from the step, wrapped", n, errs)
	}

	// A group that had a split, then loses the aggregate.
	start := time.Unix(1_900_000_000, 0)
	clock2 := core.NewManualClock(start)
	lims, aggc, _ := group(t, p, clock2, WithPeriod(time.Second), WithFloor(5), WithErrorHook(hook))
	for range 90 {
		lims[0].AllowN(context.Background(), "k", 1)
	}
	rebalance(lims, clock2, start, time.Second)
	clock2.Set(start.Add(time.Second))
	shares := checkShares(t, lims, 100, 5)
	aggc.Close()
	rebalance(lims, clock2, start.Add(time.Second), time.Second)
	clock2.Set(start.Add(2 * time.Second))
	if got := checkShares(t, lims, 100, 5); got[0] != shares[0] || got[1] != shares[1] {
		t.Errorf("after losing the aggregate: shares %v, want the last ones %v", got, shares)
	}
	mu.Lock()
	last := errs[len(errs)-1]
	mu.Unlock()
	if !errors.Is(last, redis.ErrClosed) {
		t.Errorf("last error %v, want the closed client's", last)
	}
}

// TestLive runs the three regions on the system clock with their
// goroutines (fixed windows of 200 ms, the period rounded up to one
// window), region a busy and b and c light, for two seconds: the shares
// move toward a, and no window admits more than the limit. A request is
// attributed to a window only when the clock read before and after it fall
// in the same one, so the assertion never depends on scheduling. After
// Close, no goroutine of the package is left.
func TestLive(t *testing.T) {
	const limit = 300
	W := 200 * time.Millisecond
	p := core.Policy{Algorithm: core.FixedWindow, Limit: limit, Window: W}
	addrs, aggAddr := fleet(t)
	agg := newClient(t, aggAddr)
	prefix := uniquePrefix(t)
	var hookErrs atomic.Int64
	var lims []*Limiter
	for i, name := range names {
		l, err := New(newClient(t, addrs[i]), agg, p, name, names, WithPeriod(10*time.Millisecond),
			WithPrefix(prefix), WithFloor(20), WithTimeout(time.Second), WithErrorHook(func(error) { hookErrs.Add(1) }))
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, l)
	}
	var mu sync.Mutex
	admitted := map[int64]int64{} // window -> admitted, attributed with certainty
	var maxShareA atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, l := range lims {
		wg.Go(func() {
			for ctx.Err() == nil {
				before := time.Now()
				d, err := l.Allow(context.Background(), "k")
				after := time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				if w := before.UnixMicro() / W.Microseconds(); d.Allowed && w == after.UnixMicro()/W.Microseconds() {
					mu.Lock()
					admitted[w]++
					mu.Unlock()
				}
				if i == 0 {
					maxShareA.Store(max(maxShareA.Load(), l.Share()))
				} else {
					time.Sleep(2 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	for _, l := range lims {
		l.Close()
	}
	for w, n := range admitted {
		if n > limit {
			t.Errorf("window %d: admitted %d, over the limit %d", w, n, limit)
		}
	}
	if got := maxShareA.Load(); got <= limit/3 {
		t.Errorf("the busy region's share stayed at %d, never above an equal share", got)
	}
	t.Logf("%d windows, busy region's largest share %d of %d, %d aggregate errors", len(admitted), maxShareA.Load(), limit, hookErrs.Load())
	buf := make([]byte, 1<<20)
	if s := string(buf[:runtime.Stack(buf, true)]); strings.Contains(s, "region.(*Limiter).loop") {
		t.Errorf("a goroutine is left after Close:\n%s", s)
	}
}

// TestLateGoroutine: a region whose goroutine did not take the next
// period's split in time (a loaded machine) reads it from the aggregate at
// its first decision in that period, rather than decide on its last share
// while the others decide on the new split: fixed windows, one per period,
// never admit more than the limit. Busy a gets most of the split; b's
// goroutine publishes at the middle of the period and then is late.
func TestLateGoroutine(t *testing.T) {
	const limit = 300
	const E = time.Second
	p := core.Policy{Algorithm: core.FixedWindow, Limit: limit, Window: E}
	start := time.Unix(1_800_000_000, 0)
	clock := core.NewManualClock(start)
	lims, _, _ := group(t, p, clock, WithPeriod(E), WithFloor(10))
	a, b, c := lims[0], lims[1], lims[2]
	// Period 0: a asks for 400 units, b and c for a few; every region
	// publishes its demand, as its goroutine does at the period's middle.
	for range 400 {
		if _, err := a.AllowN(context.Background(), "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []*Limiter{b, c} {
		if _, err := l.AllowN(context.Background(), "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	clock.Set(start.Add(E / 2))
	for _, l := range lims {
		l.step(context.Background(), clock.Now())
	}
	clock.Set(start.Add(3 * E / 4)) // a's goroutine runs on time, b's is late
	a.step(context.Background(), clock.Now())
	next := a.periodOf(start) + 1
	if !a.known(next) {
		t.Fatal("a did not take the next period's split")
	}
	if b.known(next) {
		t.Fatal("b took the next period's split: the test needs it late")
	}
	clock.Set(start.Add(E))
	total := drain(t, a, "k") + drain(t, b, "k") + drain(t, c, "k")
	if total > limit {
		t.Errorf("period 1 admitted %d, over the limit %d", total, limit)
	}
	if s := b.Share() + a.Share() + c.Share(); s != limit {
		t.Errorf("shares in period 1 sum to %d, want %d", s, limit)
	}
}
