package region

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The aggregate holds, per group of regions (a hash tag of their common
// configuration, so a Cluster keeps a group on one slot):
//
//	<prefix>:{<group>}:d:<k>  a hash: region -> units asked for, published in period k
//	<prefix>:{<group>}:s:<k>  the split of period k: "s1,s2,...", regions in sorted order
//
// Each region, at the middle of period k, publishes the demand it saw
// since its last publication and asks for the splits of k and k+1. The
// split of k+1 is stored once, with SET NX, by the first region that finds
// it missing when every region has published for k, or, at three quarters
// of the period, whichever regions have: every region then reads the same
// split. Keys expire after four periods.

// syncScript publishes a region's demand for period k (unless ARGV[2] is
// empty) and returns the splits of k and k+1 and, when k+1's is missing
// and may now be stored, period k's demand.
var syncScript = redis.NewScript(`
if ARGV[2] ~= '' then
	redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
	redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
local cur = redis.call('GET', KEYS[2])
local nxt = redis.call('GET', KEYS[3])
if nxt or (ARGV[4] ~= '1' and redis.call('HLEN', KEYS[1]) < tonumber(ARGV[3])) then
	return {cur, nxt}
end
return {cur, nxt, redis.call('HGETALL', KEYS[1])}
`)

// sealScript stores a split unless one is stored and returns the stored one.
var sealScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
return redis.call('GET', KEYS[1])
`)

// loop runs step until Close.
func (l *Limiter) loop() {
	defer close(l.done)
	t := time.NewTimer(l.step(l.ctx, l.clock.Now()))
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(l.step(l.ctx, l.clock.Now()))
	}
}

// step does what is due at now and returns how long to wait before the
// next step: at the middle of each period it publishes the demand and
// takes the next period's split; while the split is missing it asks again
// at three quarters of the period, and then every eighth of it.
func (l *Limiter) step(ctx context.Context, now time.Time) time.Duration {
	p := l.periodUS
	k := l.periodOf(now)
	off := now.UnixMicro() - k*p
	nextMid := time.Duration(p+p/2-off) * time.Microsecond
	if off < p/2 {
		return time.Duration(p/2-off) * time.Microsecond
	}
	if l.known(k + 1) {
		return nextMid
	}
	force := off >= 3*p/4
	if err := l.sync(ctx, k, l.pubK != k, force); err != nil {
		l.report(err)
	}
	switch {
	case l.known(k + 1):
		return nextMid
	case !force:
		return time.Duration(3*p/4-off) * time.Microsecond
	case off+p/8 < p:
		return time.Duration(p/8) * time.Microsecond
	}
	return nextMid
}

// known reports whether the share of period k came from the aggregate.
func (l *Limiter) known(k int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.shares[k]
	return ok
}

// sync publishes the demand since the last publication for period k, if
// publish, and takes the splits of k and k+1, storing k+1's from period
// k's demand if it is missing and every region has published, or if force.
func (l *Limiter) sync(ctx context.Context, k int64, publish, force bool) error {
	ctx, cancel := context.WithTimeout(ctx, l.aggTO)
	defer cancel()
	dem, taken := "", int64(0)
	if publish {
		taken = l.demand.Swap(0)
		dem = strconv.FormatInt(taken, 10)
	}
	f := "0"
	if force {
		f = "1"
	}
	ttl := 4 * l.periodUS / 1000
	keys := []string{l.key("d", k), l.key("s", k), l.key("s", k+1)}
	v, err := syncScript.Run(ctx, l.agg, keys, l.self, dem, len(l.regions), f, ttl+1000).Slice()
	if err != nil {
		l.demand.Add(taken) // publish it next time
		return fmt.Errorf("region: aggregate: %w", err)
	}
	if publish {
		l.pubK = k
	}
	if len(v) < 2 {
		return fmt.Errorf("region: aggregate: script returned %v", v)
	}
	var errs []error
	if s, ok := v[0].(string); ok {
		if err := l.record(k, s); err != nil {
			errs = append(errs, err)
		}
	}
	next, ok := v[1].(string)
	if !ok && len(v) == 3 {
		pairs, _ := v[2].([]any)
		demand := make([]int64, len(l.regions))
		for i := 0; i+1 < len(pairs); i += 2 {
			name, _ := pairs[i].(string)
			s, _ := pairs[i+1].(string)
			n, err := strconv.ParseInt(s, 10, 64)
			if j, found := l.index(name); found && err == nil && n > 0 {
				demand[j] = n
			}
		}
		split, err := Apportion(l.global.Limit, l.floor, demand)
		if err != nil {
			return err
		}
		if next, err = sealScript.Run(ctx, l.agg, keys[2:], formatSplit(split), ttl+1000).Text(); err != nil {
			return fmt.Errorf("region: aggregate: %w", err)
		}
		ok = true
	}
	if ok {
		if err := l.record(k+1, next); err != nil {
			errs = append(errs, err)
		} else {
			l.prepare(k + 1)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// fetch reads the stored split of period k from the aggregate, for a first
// decision in k that the goroutine did not prepare (it was late: a busy
// machine, a slow aggregate). Deciding in k on the last share while the
// other regions decide on k's split could let them together admit more
// than the limit. One request fetches at a time; a split not stored yet,
// or an aggregate that cannot be reached, leaves the last share, as when
// the goroutine cannot reach it.
func (l *Limiter) fetch(k int64) {
	l.fetchMu.Lock()
	defer l.fetchMu.Unlock()
	if l.known(k) || l.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.aggTO)
	defer cancel()
	s, err := l.agg.Get(ctx, l.key("s", k)).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		l.report(fmt.Errorf("region: aggregate: %w", err))
	default:
		if err := l.record(k, s); err != nil {
			l.report(err)
		}
	}
}

// key returns the aggregate's key of kind kind for period k.
func (l *Limiter) key(kind string, k int64) string {
	return l.aggPrefix + kind + ":" + strconv.FormatInt(k, 10)
}

// index returns the index of region name in the sorted regions.
func (l *Limiter) index(name string) (int, bool) {
	for i, r := range l.regions {
		if r == name {
			return i, true
		}
	}
	return 0, false
}

// record keeps this region's share of period k from the stored split s,
// after checking that s is a split of the limit over the regions.
func (l *Limiter) record(k int64, s string) error {
	split, err := parseSplit(s, len(l.regions))
	if err == nil {
		var sum int64
		for _, x := range split {
			sum += x
			if x < l.floor {
				err = fmt.Errorf("share %d under the floor %d", x, l.floor)
			}
		}
		if err == nil && sum != l.global.Limit {
			err = fmt.Errorf("shares sum to %d, not %d", sum, l.global.Limit)
		}
	}
	if err != nil {
		return fmt.Errorf("region: aggregate: split %q of period %d: %v", s, k, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shares[k] = split[l.idx]
	for p := range l.shares {
		if p < k-4 {
			delete(l.shares, p)
		}
	}
	return nil
}

// prepare makes the epoch of period k ahead of time, with its share from
// the aggregate, unless decisions have reached it already.
func (l *Limiter) prepare(k int64) {
	l.mu.Lock()
	share := l.shareFor(k)
	ready := l.next != nil && l.next.k == k && l.next.share == share
	l.mu.Unlock()
	if ready {
		return
	}
	e, err := l.newEpoch(k, share)
	if err != nil {
		l.report(err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.cur.Load(); cur == nil || cur.k < k {
		l.next = e
	}
}

func formatSplit(split []int64) string {
	var b strings.Builder
	for i, s := range split {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s, 10))
	}
	return b.String()
}

func parseSplit(s string, n int) ([]int64, error) {
	fields := strings.Split(s, ",")
	if len(fields) != n {
		return nil, fmt.Errorf("%d shares for %d regions", len(fields), n)
	}
	out := make([]int64, n)
	for i, f := range fields {
		x, err := strconv.ParseInt(f, 10, 64)
		if err != nil || x < 0 {
			return nil, fmt.Errorf("share %q", f)
		}
		out[i] = x
	}
	return out, nil
}
