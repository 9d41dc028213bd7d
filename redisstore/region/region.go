package region

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/redis/go-redis/v9"
)

// DefaultPeriod is how often a region publishes its demand and takes a new
// share unless [WithPeriod] says otherwise.
const DefaultPeriod = 5 * time.Second

// DefaultPrefix starts every key, in the regions' Redis and in the
// aggregate, unless [WithPrefix] says otherwise.
const DefaultPrefix = "ratekit:region"

// MinPeriod is the shortest period [WithPeriod] accepts.
const MinPeriod = 10 * time.Millisecond

// Limiter is one region's part of a global [core.Policy]: a [core.Limiter]
// that decides on the region's share of the limit in the region's Redis,
// one round trip per decision, while a goroutine publishes the region's
// demand to the aggregate once a period and takes the next period's share.
// Every region of a group must be built with the same policy, regions,
// period, floor and prefix.
//
// Shares sum to the limit in every period, and change only at the start of
// one; see the package documentation for the bound that gives. A
// [core.Decision]'s Limit is the region's share and its Remaining is out of
// that share. A cost above the region's current capacity is denied until
// the next period; one above the global capacity is [core.ErrCostTooHigh].
//
// A Limiter is safe for concurrent use. Create one with [New]; [Limiter.Close]
// stops its goroutine, after which it keeps deciding on its last share.
type Limiter struct {
	local     redis.UniversalClient
	agg       redis.UniversalClient
	global    core.Policy
	scaled    core.Policy // global × scale, the policy kept in local Redis
	scale     int64
	self      string
	idx       int      // self's index in regions
	regions   []string // sorted
	floor     int64
	periodUS  int64 // the period in microseconds: a whole number of windows for fixed windows
	clock     core.Clock
	prefix    string
	aggPrefix string // "<prefix>:{<group>}:"
	timeout   time.Duration
	margin    time.Duration // tests: the keys' expiry margin, 0 for redisstore's
	aggTO     time.Duration
	hook      func(error)

	demand atomic.Int64 // units asked for since the last publication
	cur    atomic.Pointer[epoch]

	fetchMu sync.Mutex // one fetch of a period's split at a time

	mu     sync.Mutex
	shares map[int64]int64 // period -> this region's share, from the aggregate
	last   int64           // the share of the last period decided on
	next   *epoch          // the next period, prepared by the goroutine
	pubK   int64           // the last period whose demand was published (goroutine only)

	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

var _ core.PolicyReporter = (*Limiter)(nil)

// epoch is what a region decides by in one period.
type epoch struct {
	k        int64
	share    int64
	cost     int64 // scaled units per unit; 0 when share is 0
	capacity int64 // the largest cost allowed in this period
	policy   core.Policy
	end      time.Time
	lim      *redisstore.Limiter
}

// Option configures a [Limiter].
type Option func(*options)

type options struct {
	period   time.Duration
	floor    int64
	floorSet bool
	shares   map[string]int64
	clock    core.Clock
	hook     func(error)
	prefix   string
	timeout  time.Duration
	noLoop   bool          // tests drive step themselves
	margin   time.Duration // tests: the keys' expiry margin, for a manual clock
}

// WithPeriod sets how often each region publishes its demand and takes a
// new share, at least [MinPeriod], in whole microseconds. Periods are
// aligned to multiples of the period since the Unix epoch; for
// [core.FixedWindow] the period is rounded up to a whole number of windows.
// Default: [DefaultPeriod].
func WithPeriod(d time.Duration) Option { return func(o *options) { o.period = d } }

// WithFloor sets the share every region gets whatever its demand. The
// floors must fit in the limit: floor × regions <= Limit. Default: a tenth
// of an equal share, rounded down.
func WithFloor(n int64) Option { return func(o *options) { o.floor, o.floorSet = n, true } }

// WithShares sets the shares the regions use until the aggregate has
// stored a split: one per region, summing to the limit. Default: equal
// shares, the remainder to the first regions in sorted order.
func WithShares(shares map[string]int64) Option {
	return func(o *options) { o.shares = shares }
}

// WithClock sets the clock the region reads, rounded down to the
// microsecond: every decision's time (sent to the region's Redis, whose
// TIME is never read) and the period it falls in, and the times at which
// the goroutine publishes demand and takes shares. The goroutine waits for
// those times on real timers, so c must advance with real time. The
// gateways of every region then need synchronized clocks. A nil c is an
// error from [New].
//
// Default: [core.SystemClock].
func WithClock(c core.Clock) Option {
	return func(o *options) { o.clock = c }
}

// WithErrorHook sets a function called with every error the goroutine
// meets talking to the aggregate or the region's Redis; decisions return
// theirs. It must not block. Default: none.
func WithErrorHook(hook func(error)) Option { return func(o *options) { o.hook = hook } }

// WithPrefix sets the first segment of every key, in the regions' Redis
// and in the aggregate. It must not contain '{' or '}'. Default:
// [DefaultPrefix].
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithTimeout bounds each call to Redis by d: every decision and reset in
// the region's Redis runs under a context that ends d after the call
// starts, or earlier if the caller's does, and so does every call to the
// aggregate, New's included. The clients need ContextTimeoutEnabled for
// the bound to interrupt a read (see package redisstore). A negative d is
// an error from [New].
//
// Default: 0, no bound beyond the caller's context and the clients' own
// timeouts for decisions; the goroutine's calls to the aggregate, which
// have no caller, are bounded by a quarter of the period.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// New returns the limiter of region self, one of regions, enforcing its
// share of global over local, the region's Redis, and exchanging demand
// and shares through aggregate, and starts its goroutine. It fails if
// global is invalid, self is not among regions, a region is named twice or
// an option is invalid.
//
// New waits, at most the timeout, for the current period's split in the
// aggregate and loads the script into local; it does not fail if either
// cannot be reached.
func New(local, aggregate redis.UniversalClient, global core.Policy, self string, regions []string, opts ...Option) (*Limiter, error) {
	if local == nil || aggregate == nil {
		return nil, errors.New("region: New: a local and an aggregate client are required")
	}
	if err := global.Validate(); err != nil {
		return nil, fmt.Errorf("region: %w", err)
	}
	if global.Calendar != 0 {
		// Periods and shares are multiples of the Window since the epoch.
		return nil, fmt.Errorf("region: New: policy %q: calendar windows are not supported: %w", global.String(), errors.ErrUnsupported)
	}
	sorted := slices.Clone(regions)
	slices.Sort(sorted)
	idx := -1
	for i, r := range sorted {
		switch {
		case r == "":
			return nil, errors.New("region: New: a region name is empty")
		case i > 0 && r == sorted[i-1]:
			return nil, fmt.Errorf("region: New: region %q named twice", r)
		case r == self:
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("region: New: region %q is not among %q", self, regions)
	}
	n := int64(len(sorted))
	o, err := applyOptions(global, n, opts)
	if err != nil {
		return nil, err
	}
	period := o.period
	if global.Algorithm == core.FixedWindow && period%global.Window != 0 {
		period = (period/global.Window + 1) * global.Window
	}
	static, err := Apportion(global.Limit, 0, make([]int64, n))
	if err != nil {
		return nil, err
	}
	if o.shares != nil {
		if static, err = staticShares(global.Limit, sorted, o.shares); err != nil {
			return nil, err
		}
	}
	// The scale makes a unit of every share a whole number of local units:
	// the local policy is the global one with Limit and Burst times scale,
	// and share s costs about scale×Limit/s of them a unit. A window
	// counts whole units, so the scale is as large as MaxLimit allows:
	// with Limit <= 31,622, every share counts exactly its units. A bucket
	// counts time in 1/64 µs (see core's gcra), so its scaled rate is kept
	// to one local unit per 4 µs of window: a share's rate is then within
	// 1/256 under its exact value.
	c := global.Capacity()
	top := int64(core.MaxLimit)
	if global.Algorithm.Burstable() {
		top = min(top, global.Window.Microseconds()/4)
	}
	scale := max(1, top/max(global.Limit, c))
	scaled := global
	scaled.Limit *= scale
	scaled.Burst *= scale

	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%d|%d|%s", global, period, o.floor, strings.Join(sorted, ","))
	l := &Limiter{
		local:     local,
		agg:       aggregate,
		global:    global,
		scaled:    scaled,
		scale:     scale,
		self:      self,
		idx:       idx,
		regions:   sorted,
		floor:     o.floor,
		periodUS:  int64(period / time.Microsecond),
		clock:     o.clock,
		prefix:    o.prefix,
		aggPrefix: o.prefix + ":{" + strconv.FormatUint(h.Sum64(), 36) + "}:",
		timeout:   o.timeout,
		margin:    o.margin,
		aggTO:     o.timeout,
		hook:      o.hook,
		shares:    make(map[int64]int64),
		last:      static[idx],
		pubK:      -1 << 62,
		done:      make(chan struct{}),
	}
	if l.aggTO == 0 {
		l.aggTO = period / 4
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())

	// Join: take the split the other regions use now, if there is one.
	now := l.clock.Now()
	k := l.periodOf(now)
	if err := l.sync(l.ctx, k, false, false); err != nil {
		l.report(err)
	}
	l.mu.Lock()
	share := l.shareFor(k)
	l.mu.Unlock()
	e, err := l.newEpoch(k, share)
	if err != nil {
		return nil, err
	}
	l.cur.Store(e)
	if o.noLoop {
		close(l.done)
	} else {
		go l.loop()
	}
	return l, nil
}

// applyOptions applies opts over the defaults for global over n regions
// and checks the result.
func applyOptions(global core.Policy, n int64, opts []Option) (options, error) {
	o := options{period: DefaultPeriod, prefix: DefaultPrefix, clock: core.SystemClock{}}
	for i, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("region: New: option %d is nil", i+1)
		}
		opt(&o)
	}
	if o.prefix == "" {
		o.prefix = DefaultPrefix
	}
	if !o.floorSet {
		o.floor = global.Limit / n / 10
	}
	switch {
	case o.clock == nil:
		return o, errors.New("region: New: WithClock(nil): a clock is required")
	case o.period < MinPeriod || o.period%time.Microsecond != 0:
		return o, fmt.Errorf("region: New: WithPeriod(%v): must be at least %v, in whole microseconds", o.period, MinPeriod)
	case o.floor < 0 || o.floor > global.Limit/n:
		return o, fmt.Errorf("region: New: WithFloor(%d): must be between 0 and Limit/regions = %d", o.floor, global.Limit/n)
	case strings.ContainsAny(o.prefix, "{}"):
		return o, fmt.Errorf("region: New: WithPrefix(%q): must not contain '{' or '}'", o.prefix)
	case o.timeout < 0:
		return o, fmt.Errorf("region: New: WithTimeout(%v): must not be negative", o.timeout)
	}
	return o, nil
}

// staticShares checks the shares of WithShares and returns them in the
// regions' order.
func staticShares(limit int64, regions []string, shares map[string]int64) ([]int64, error) {
	out := make([]int64, len(regions))
	var sum int64
	for i, r := range regions {
		s, ok := shares[r]
		if !ok || s < 0 {
			return nil, fmt.Errorf("region: New: WithShares: region %q needs a share of at least 0", r)
		}
		out[i] = s
		sum += s
	}
	if len(shares) != len(regions) || sum != limit {
		return nil, fmt.Errorf("region: New: WithShares: %v must give each of %q a share, summing to the limit %d", shares, regions, limit)
	}
	return out, nil
}

// Policy returns the global policy the regions share.
func (l *Limiter) Policy() core.Policy { return l.global }

// Share returns the share of the limit this region decides on now.
func (l *Limiter) Share() int64 {
	k := l.periodOf(l.clock.Now())
	if e := l.cur.Load(); e != nil && e.k == k {
		return e.share
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next != nil && l.next.k == k {
		return l.next.share
	}
	return l.shareFor(k)
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (core.Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN reports whether n units may be spent for key now within the
// region's share and, if so, counts them, in one round trip to the
// region's Redis; a denied request counts nothing. The n units count as
// demand either way. See [core.Limiter].
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	return l.decide(ctx, key, n, true)
}

// Peek reports what AllowN would decide now without counting anything,
// demand included.
func (l *Limiter) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	return l.decide(ctx, key, n, false)
}

// Reset forgets key in the region's Redis.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	e, err := l.epochAt(l.clock.Now())
	if err != nil {
		return err
	}
	if err := e.lim.Reset(ctx, key); err != nil {
		return fmt.Errorf("region: %w", err)
	}
	return nil
}

func (l *Limiter) decide(ctx context.Context, key string, n int64, commit bool) (core.Decision, error) {
	d := core.Decision{Limit: l.global.Limit, Policy: l.global}
	switch {
	case key == "":
		return d, fmt.Errorf("region: %w", core.ErrEmptyKey)
	case n <= 0:
		return d, fmt.Errorf("region: cost %d: %w", n, core.ErrInvalidCost)
	case n > l.global.Capacity():
		return d, fmt.Errorf("region: cost %d, at most %d: %w", n, l.global.Capacity(), core.ErrCostTooHigh)
	}
	if commit {
		l.demand.Add(n)
	}
	now := l.clock.Now()
	e, err := l.epochAt(now)
	if err != nil {
		return d, err
	}
	d.Limit, d.Policy = e.share, e.policy
	if n > e.capacity {
		// Not in this period's share; maybe in the next one's.
		d.RetryAfter = max(e.end.Sub(now), time.Microsecond)
		return d, nil
	}
	var r core.Decision
	if commit {
		r, err = e.lim.AllowN(ctx, key, n*e.cost)
	} else {
		r, err = e.lim.Peek(ctx, key, n*e.cost)
	}
	if err != nil {
		return d, fmt.Errorf("region: %w", err)
	}
	d.Allowed = r.Allowed
	d.Remaining = r.Remaining / e.cost
	d.RetryAfter, d.ResetAfter, d.Delay = r.RetryAfter, r.ResetAfter, r.Delay
	return d, nil
}

// epochAt returns what to decide by at now: the period's prepared epoch,
// or one made now with the period's share, read from the aggregate when
// the goroutine has not taken it yet, or else the last share.
func (l *Limiter) epochAt(now time.Time) (*epoch, error) {
	k := l.periodOf(now)
	if e := l.cur.Load(); e != nil && e.k == k {
		return e, nil
	}
	if !l.known(k) {
		l.fetch(k)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.cur.Load(); e != nil && e.k == k {
		return e, nil
	}
	e := l.next
	if e == nil || e.k != k {
		var err error
		if e, err = l.newEpoch(k, l.shareFor(k)); err != nil {
			return nil, err
		}
	}
	l.next = nil
	l.last = e.share
	l.cur.Store(e)
	return e, nil
}

// shareFor returns the share of period k: the aggregate's split of k, or
// else of the latest period before k it gave, or else the last share
// decided on. l.mu must be held.
func (l *Limiter) shareFor(k int64) int64 {
	share, latest := l.last, int64(-1<<63)
	for p, s := range l.shares {
		if p <= k && p > latest {
			share, latest = s, p
		}
	}
	return share
}

// newEpoch returns what to decide by in period k with share. Its limiter
// reads the clock clamped into the period, so that a decision counts in
// the period whose share it was given, even if its clock reading falls
// just past the period's end.
func (l *Limiter) newEpoch(k, share int64) (*epoch, error) {
	startUS := k * l.periodUS
	end := time.UnixMicro(startUS + l.periodUS)
	e := &epoch{k: k, share: share, end: end, policy: l.global}
	e.policy.Limit = share
	if share > 0 {
		m, c := l.scaled.Limit, l.scaled.Capacity()
		e.cost = (m + share - 1) / share // ceil: never above the share's rate
		if !l.global.Algorithm.Burstable() && m/(m/share) == share {
			e.cost = m / share // floor when it counts exactly share units
		}
		e.capacity = c / e.cost
		if l.global.Burst != 0 {
			e.policy.Burst = e.capacity
		}
	}
	clock := clampClock{c: l.clock, lo: time.UnixMicro(startUS), hi: end.Add(-time.Microsecond)}
	opts := []redisstore.Option{redisstore.WithPrefix(l.prefix), redisstore.WithClock(clock)}
	if l.timeout > 0 {
		opts = append(opts, redisstore.WithTimeout(l.timeout))
	}
	if l.margin > 0 {
		opts = append(opts, redisstore.WithExpiryMargin(l.margin))
	}
	lim, err := redisstore.New(l.local, l.scaled, opts...)
	if err != nil {
		return nil, fmt.Errorf("region: %w", err)
	}
	e.lim = lim
	return e, nil
}

// clampClock reads c, clamped into [lo, hi].
type clampClock struct {
	c      core.Clock
	lo, hi time.Time
}

func (c clampClock) Now() time.Time {
	t := c.c.Now()
	if t.Before(c.lo) {
		return c.lo
	}
	if t.After(c.hi) {
		return c.hi
	}
	return t
}

// periodOf returns the index of the period t falls in.
func (l *Limiter) periodOf(t time.Time) int64 {
	us := t.UnixMicro()
	k := us / l.periodUS
	if us%l.periodUS < 0 {
		k--
	}
	return k
}

// Close stops the goroutine and waits for it to end. The limiter keeps
// deciding, on its last share. Close returns nil; calling it again does
// nothing.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.cancel()
		<-l.done
	})
	return nil
}

func (l *Limiter) report(err error) {
	if l.hook != nil {
		l.hook(err)
	}
}
