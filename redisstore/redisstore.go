package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts every key unless [WithPrefix] says otherwise.
const DefaultPrefix = "ratekit"

// DefaultExpiryMargin is added to every key's expiry unless
// [WithExpiryMargin] says otherwise.
const DefaultExpiryMargin = time.Second

// Limiter is a [core.Limiter] whose state lives in Redis: one [core.Policy]
// enforced over any number of keys, shared by every process that builds a
// Limiter with the same policy (for a named one, the same Name and
// algorithm), prefix and Redis. It is a [core.Refunder]
// too: it gives back units it counted; a [core.Settler], settling a
// request's cost after it ran; and a [core.PartialLimiter], granting part
// of a request.
//
// Each decision, and each refund, is one atomic round trip, so concurrent
// requests from any number of servers are counted exactly. The decisions and
// refunds are those of [core.Memory] for the same clock, field for field.
// State per key: one Redis string, whose size is fixed for the buckets and
// windows and, for the sliding log, 48 bytes (56 for a named policy) and
// 16 per distinct request time in the last window (up to twice that while
// records that left wait to be cut off).
//
// [Limiter.SetPolicy] changes a named policy's numbers while the limiter
// runs, and a Limiter built with new numbers finds the same keys: either
// way each key keeps its usage, as [core.Memory.SetPolicy] keeps it.
//
// A Limiter is safe for concurrent use. The zero value is not usable; create
// one with [New].
type Limiter struct {
	// One Lua script reads, decides and writes: 8 servers racing on a new key
	// with Limit 1 get exactly one allowed. State per key in detail: the token
	// and leaky buckets keep the theoretical arrival time, the fixed and
	// sliding windows the window index and counters, the sliding log packed
	// records of (time, a Fenwick tree node over the units): a decision,
	// allowed, denied or given back, reads O(log k) 8-byte fields of its k
	// records, never the whole log, and appends one (slidinglog.lua).

	client  redis.UniversalClient
	cur     atomic.Pointer[conf] // the policy in force: see SetPolicy
	setMu   sync.Mutex           // serializes SetPolicy
	margin  int64                // the expiry margin in ms
	multi   multi                // how a batch's decisions share a batch script
	prefix  string               // "<prefix>:<policy>:{"
	clock   core.Clock
	timeout time.Duration
	batch   *batcher // nil without WithBatching
	// trip is a recent script call's duration, in ns, a decaying maximum
	// kept on the server's TIME only: Refund pads elapsed with it (see
	// Refund).
	trip atomic.Int64

	reload reloader // a Cluster client's slot reloads (cluster.go)
	// fmode says how the limiter calls its scripts: by FCALL or EVALSHA
	// (functions.go).
	fmode atomic.Int32
}

var (
	_ core.Refunder       = (*Limiter)(nil)
	_ core.PolicyReporter = (*Limiter)(nil)
)

// conf is what a [Limiter] makes of its policy, published whole and never
// changed: [Limiter.SetPolicy] publishes another.
type conf struct {
	policy core.Policy
	script *redis.Script
	sha    any           // the script's SHA-1, boxed once for every call
	fn     any           // its function's name (functions.go), boxed
	batch  *redis.Script // the batch script (batch.go), when multi is set
	bsha   any           // its SHA-1
	bfn    any           // its function's name
	cost   int64         // largest cost ever allowed
	emit   core.Emission // the buckets' (Capacity 0 for the windows): a fresh answer's
	// since is when the limiter took the policy, in Unix µs: a state
	// written under another policy is converted as of then (convert.lua's
	// changedAt). Nil for an unnamed policy, whose keys hold no other
	// policy's state: its calls go without it.
	since any
	cal   *calendarWindows // a calendar policy's periods (calendar.go), or nil
}

// Option configures a [Limiter].
type Option func(*options)

type options struct {
	prefix   string
	clock    core.Clock // nil: the server's TIME
	clockSet bool       // WithClock was given, so nil is a mistake
	timeout  time.Duration
	margin   time.Duration
	batching bool // on unless WithBatching(1)
	maxBatch int

	failover    []core.FailoverOption // WithFailover's (NewRuleStore only)
	failoverSet bool

	leaseTTL    time.Duration // WithLeaseTTL's (NewInFlight only)
	leaseTTLSet bool
}

// WithPrefix sets the first segment of every key, such as "myapp:limits".
// It must not contain '{' or '}', which would move the Cluster hash tag.
// Default: [DefaultPrefix].
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithClock makes the limiter's decisions and refunds read the time from
// c, once per call, rounded down to the microsecond, and send it to the
// script, instead of the script reading the Redis server's TIME. It clocks
// nothing else: the limiter runs no timer. The servers that share a
// limit then need synchronized clocks; tests drive a limiter with a
// [core.ManualClock] this way. A nil c is an error from [New] and
// [NewLayered].
//
// Default: the Redis server's TIME.
func WithClock(c core.Clock) Option {
	return func(o *options) { o.clock, o.clockSet = c, true }
}

// WithTimeout bounds each call to Redis by d: every decision, refund and
// reset runs under a context that ends d after the call starts, or
// earlier if the caller's does; the constructors load their script under
// it too. The client needs ContextTimeoutEnabled for the bound to
// interrupt a read (see the package documentation). A negative d is an
// error from [New] and [NewLayered].
//
// Default: 0, no bound beyond the caller's context and the client's own
// timeouts (the constructors wait at most one second to load the script).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithExpiryMargin sets what is added to a key's ResetAfter, rounded up to
// the millisecond, to make its expiry. The margin covers the time between
// reading a client clock ([WithClock]) and the script running, and the skew
// between servers' clocks; with the server's TIME a few milliseconds
// suffice. Default: [DefaultExpiryMargin].
func WithExpiryMargin(d time.Duration) Option { return func(o *options) { o.margin = d } }

// New returns a limiter that enforces p on Redis through client. It fails if
// p is invalid (see [core.Policy.Validate]) or an option is. A calendar
// policy ([core.Calendar]) is counted exactly on the server's TIME, and
// never batched (see the package documentation, "Time"). Limiters of one
// named policy (Name and algorithm) on one prefix share its keys whatever
// their numbers (and calendar), and convert each other's states: give two
// limits different Names.
//
// New loads the policy's script into Redis (on every node of a Cluster),
// waiting at most the [WithTimeout] timeout, or one second, for it. It does
// not fail if Redis cannot be reached: the first call loads the script then.
func New(client redis.UniversalClient, p core.Policy, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("redisstore: New: a client is required")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	o, err := applyOptions("New", opts)
	if err != nil {
		return nil, err
	}
	if p.Calendar != 0 {
		// The batch script passes no periods.
		o.batching = false
	}
	l := &Limiter{
		client:  client,
		margin:  int64((o.margin + time.Millisecond - 1) / time.Millisecond),
		prefix:  o.prefix + ":" + policySegment(p) + ":{",
		clock:   o.clock,
		timeout: o.timeout,
	}
	if o.batching {
		l.batch = &batcher{l: l, max: o.maxBatch}
		if l.batch.max == 0 {
			l.batch.max = DefaultMaxBatch
		}
		l.multi = multiOf(client)
	}
	c, err := l.confOf(p)
	if err != nil {
		return nil, fmt.Errorf("redisstore: New: %w", err)
	}
	l.cur.Store(c)
	l.load(c)
	return l, nil
}

// confOf returns the conf of p, a valid policy, taken now.
func (l *Limiter) confOf(p core.Policy) (*conf, error) {
	cal, err := newCalendarWindows(p)
	if err != nil {
		return nil, err
	}
	script := scriptFor(scriptSource(p, l.margin))
	c := &conf{policy: p, script: script, sha: script.Hash(), fn: functionName(script), cost: p.Capacity(), cal: cal}
	if carries(p) {
		c.since = l.sinceNow()
	}
	if p.Algorithm.Burstable() {
		c.emit = p.Emission()
	}
	if l.batch != nil && l.multi != noMulti && cal == nil {
		// (A calendar policy's calls are never grouped: see batch.go.)
		c.batch = scriptFor(batchSource(p, l.margin))
		c.bsha = c.batch.Hash()
		c.bfn = functionName(c.batch)
	}
	return c, nil
}

// sinceNow returns the time a policy taken now is in force from, in Unix
// µs: the limiter's clock, or on the server's TIME this machine's (a
// state is never converted as of a time before its last write or after
// the decision that converts it, so skew between machines moves the
// conversion by no more than the skew).
func (l *Limiter) sinceNow() int64 {
	if l.clock == nil {
		return unixMicro(time.Now())
	}
	return unixMicro(l.clock.Now())
}

// load loads c's scripts into Redis, as libraries (functions.go) or else
// scripts, waiting at most the timeout, or one second. Best effort: a
// call falls back to EVAL, or loads the library.
func (l *Limiter) load(c *conf) {
	ctx, cancel := l.loadContext()
	defer cancel()
	fs := []*scriptForms{formsOf(c.script.Hash())}
	if c.batch != nil {
		fs = append(fs, formsOf(c.batch.Hash()))
	}
	if l.loadFunctions(ctx, fs...) {
		return
	}
	if err := c.script.Load(ctx, l.client).Err(); err == nil && c.batch != nil {
		_ = c.batch.Load(ctx, l.client).Err()
	}
}

// loadContext returns the context of a constructor's load: the timeout,
// or one second.
func (l *Limiter) loadContext() (context.Context, context.CancelFunc) {
	load := l.timeout
	if load == 0 {
		load = time.Second
	}
	return context.WithTimeout(context.Background(), load)
}

// checkCalendar refuses a policy with calendar windows ([core.Calendar])
// in a layered limiter, whose script passes no periods (calendar.go).
func checkCalendar(p core.Policy) error {
	if p.Calendar == 0 {
		return nil
	}
	return fmt.Errorf("policy %q: calendar windows (a %v in %s) are not supported in layered limits on Redis; use a Limiter of its own for it (New): %w",
		p.String(), p.Calendar, zoneName(p), errors.ErrUnsupported)
}

// zoneName returns a calendar policy's zone, "UTC" for the empty one.
func zoneName(p core.Policy) string {
	if p.Zone == "" {
		return "UTC"
	}
	return p.Zone
}

// applyOptions applies opts, for the constructor named fn, over the
// defaults and checks the result. Every constructor of the package calls
// it, so that they accept and reject the same options.
func applyOptions(fn string, opts []Option) (options, error) {
	o := options{prefix: DefaultPrefix, margin: DefaultExpiryMargin, batching: true}
	for i, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("redisstore: %s: option %d is nil", fn, i+1)
		}
		opt(&o)
	}
	switch {
	case o.prefix == "":
		o.prefix = DefaultPrefix
	case strings.ContainsAny(o.prefix, "{}"):
		return o, fmt.Errorf("redisstore: %s: WithPrefix(%q): must not contain '{' or '}'", fn, o.prefix)
	}
	switch {
	case o.clockSet && o.clock == nil:
		return o, fmt.Errorf("redisstore: %s: WithClock(nil): a clock is required", fn)
	case o.timeout < 0:
		return o, fmt.Errorf("redisstore: %s: WithTimeout(%v): must not be negative", fn, o.timeout)
	case o.margin < 0:
		return o, fmt.Errorf("redisstore: %s: WithExpiryMargin(%v): must not be negative", fn, o.margin)
	case o.maxBatch < 0:
		return o, fmt.Errorf("redisstore: %s: WithBatching(%d): must not be negative", fn, o.maxBatch)
	case o.failoverSet && fn != "NewRuleStore":
		return o, fmt.Errorf("redisstore: %s: WithFailover is an option of NewRuleStore only", fn)
	case o.leaseTTLSet && fn != "NewInFlight":
		return o, fmt.Errorf("redisstore: %s: WithLeaseTTL is an option of NewInFlight only", fn)
	}
	o.batching = o.maxBatch != 1 // batches of one: no batching
	return o, nil
}

// policySegment names p in its keys. A named policy's keys carry its name
// and algorithm alone, "<name>/<algorithm>", so that the same policy with
// other numbers (after [Limiter.SetPolicy], or in a process started with
// them) finds its keys' state, which records the numbers it was written
// under (see the scripts). An unnamed policy's keys carry everything that
// changes what the state means, "<algorithm>/<limit>/<window µs>[/<burst>]":
// two unnamed policies are two limits that must not share state, and only
// their numbers tell them apart, and an unnamed calendar policy's also
// its period and zone, "/month@Europe/Berlin". A named fixed window's keys
// are the same for epoch and calendar windows: its state records which
// (fixedwindow.lua, calendarwindow.lua). Names are letters, digits, '-',
// '_' and '.' ([core.Policy.Validate]), so no form can be another's.
func policySegment(p core.Policy) string {
	if carries(p) {
		return p.Name + "/" + p.Algorithm.String()
	}
	var b strings.Builder
	b.WriteString(p.Algorithm.String())
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(p.Limit, 10))
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(int64(p.Window/time.Microsecond), 10))
	if p.Algorithm.Burstable() {
		b.WriteByte('/')
		b.WriteString(strconv.FormatInt(p.Capacity(), 10))
	}
	if p.Calendar != 0 {
		// "/month@Europe/Berlin": a zone name has no ':', '{' or '}'.
		b.WriteByte('/')
		b.WriteString(p.Calendar.String())
		b.WriteByte('@')
		b.WriteString(zoneName(p))
	}
	return b.String()
}

// carries reports whether p's keys carry its usage across its numbers: a
// named policy's, with epoch or calendar windows ([core.Calendar]).
func carries(p core.Policy) bool { return p.Name != "" }

// Policy returns the policy the limiter enforces: the last one given to
// [Limiter.SetPolicy], or else to [New].
func (l *Limiter) Policy() core.Policy { return l.cur.Load().policy }

// SetPolicy makes the limiter enforce p from now on, keeping every key's
// usage as [core.Memory.SetPolicy] does, by the same definitions: a key
// that has used 80 of 100 and is given 200 has 120 left. p must be valid
// (the error names the field, see [core.Policy.Validate]) and have the
// limiter's algorithm and Name: a policy's keys are named by both. The
// Name must not be empty, unless p is the policy in force: an unnamed
// policy's keys embed its numbers, so another one would start every key
// afresh. A fixed window may change its Window, its calendar and zone
// ([core.Calendar]), between epoch and calendar windows too: the count of
// the window that held the change moves to the new window that holds it,
// as core's does. On error nothing changes.
//
// SetPolicy writes nothing to the keys: it loads p's script (waiting as
// [New] does) and publishes it. Each key's state records the numbers it
// was written under, and the first decision on it under p converts it as
// the memory store would have when SetPolicy was called (or, if the state
// was written later, by a limiter elsewhere still on another policy, as
// of that write). A key untouched since it became fresh under its old
// policy has expired from Redis, and starts afresh. A Limiter built by
// [New] with p over the same Redis and prefix (a restart with new numbers)
// finds and converts the same states as of the time it was built.
//
// A decision in flight when SetPolicy is called may finish under the old
// policy, counted and reported by it. SetPolicy to the policy in force
// changes nothing. It is safe for concurrent use.
func (l *Limiter) SetPolicy(p core.Policy) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("redisstore: SetPolicy: %w", err)
	}
	l.setMu.Lock()
	defer l.setMu.Unlock()
	old := l.cur.Load().policy
	if err := checkChange(old, p); err != nil {
		return fmt.Errorf("redisstore: SetPolicy: %w", err)
	}
	if p == old {
		return nil
	}
	c, err := l.confOf(p)
	if err != nil {
		return fmt.Errorf("redisstore: SetPolicy: %w", err)
	}
	l.load(c)
	l.cur.Store(c)
	return nil
}

// checkChange reports why a limiter that enforces old cannot be given p.
func checkChange(old, p core.Policy) error {
	switch {
	case p == old:
		return nil
	case p.Algorithm != old.Algorithm:
		return fmt.Errorf("the limiter runs %v and the policy %v: build a new limiter to change the algorithm", old.Algorithm, p.Algorithm)
	case p.Name != old.Name:
		return fmt.Errorf("the limiter's policy is named %q and the new one %q: the keys are named by the policy's Name, so usage would not carry over; build a new limiter", old.Name, p.Name)
	case p.Name == "":
		return fmt.Errorf("the policy has no Name: an unnamed policy's keys embed its limit and window, so usage would not carry over; give the policy a Name")
	}
	return nil
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (core.Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN reports whether n units may be spent for key now and, if so, counts
// them, in one round trip; a denied request counts nothing. See
// [core.Limiter]. Errors from Redis are wrapped; when one is returned, the
// units may have been counted (the script may have run before a timeout),
// never twice.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	return l.decide(ctx, key, n, true)
}

// Peek reports key's state as it is, and whether AllowN would allow n units
// now, counting nothing, exactly as the memory store's Peek (see
// [core.Limiter]). It writes nothing to Redis.
func (l *Limiter) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	return l.decide(ctx, key, n, false)
}

// Reset forgets key: it deletes the key's state from Redis.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("redisstore: %w", core.ErrEmptyKey)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	k := l.key(key)
	if err := l.client.Del(ctx, k).Err(); err != nil {
		return fmt.Errorf("redisstore: del: %w", err)
	}
	return nil
}

// Refund gives back n units that AllowN(ctx, key, n) counted for key at
// most elapsed ago, in one round trip, exactly as [core.Memory.Refund]
// does; see [core.Refunder]. A key that holds nothing is left alone; no key
// is created. It fails for the arguments AllowN rejects and for a negative
// elapsed ([core.ErrInvalidElapsed]). Errors from Redis are wrapped; when
// one is returned, the units may have been given back, never twice.
//
// The units count from now - elapsed on, now being the time the script
// reads. With the server's TIME (the default), that is after the refund's
// own trip to Redis, which may take longer than the AllowN's did; so the
// limiter adds to elapsed twice the longest recent script call it measured
// (a maximum that decays by a sixteenth per call) and a quarter of a
// millisecond, to keep now - elapsed at or before the time the units were
// counted. A longer elapsed never leaves more room; a trip slower than
// that allowance can make a sliding log miss the request's entry, and give
// back nothing. With [WithClock], elapsed is taken as it is.
func (l *Limiter) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	c := l.cur.Load()
	if err := checkCost(key, n, c.cost, -1); err != nil {
		return err
	}
	if err := checkElapsed(elapsed); err != nil {
		return err
	}
	now, err := l.now()
	if err != nil {
		return err
	}
	k := l.key(key)
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	e := elapsedMicros(l.padded(elapsed))
	if c.cal != nil {
		return l.refundCalendar(ctx, c, k, now, n, e)
	}
	verb, id := l.verb(c.sha, c.fn)
	args := []any{verb, id, "1", k, now, n, e}
	if c.since != nil {
		args = append(args, c.since)
	}
	cmd, err := l.process(ctx, redis.NewCmd(ctx, args...))
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	return refunded(cmd)
}

// checkCost validates a key and a cost as AllowN does, for a capacity of
// maxCost; a cost too high names the layer, unless it is negative.
func checkCost(key string, n, maxCost int64, layer int) error {
	switch {
	case key == "":
		return fmt.Errorf("redisstore: %w", core.ErrEmptyKey)
	case n <= 0:
		return fmt.Errorf("redisstore: cost %d: %w", n, core.ErrInvalidCost)
	case n > maxCost && layer >= 0:
		return fmt.Errorf("redisstore: cost %d, at most %d for layer %d: %w", n, maxCost, layer, core.ErrCostTooHigh)
	case n > maxCost:
		return fmt.Errorf("redisstore: cost %d, at most %d: %w", n, maxCost, core.ErrCostTooHigh)
	}
	return nil
}

// checkElapsed validates the elapsed time of a refund.
func checkElapsed(elapsed time.Duration) error {
	if elapsed < 0 {
		return fmt.Errorf("redisstore: refund: elapsed %v: %w", elapsed, core.ErrInvalidElapsed)
	}
	return nil
}

// elapsedMicros returns a refund's elapsed time in microseconds, rounded up
// as the memory store rounds it, and at most maxBacklog, 2^52: a longer one
// gives back what 2^52 µs does in every algorithm (it passes every window,
// and the refill of the largest bucket), and the scripts count it exactly.
func elapsedMicros(elapsed time.Duration) int64 {
	us := elapsed / time.Microsecond
	if elapsed%time.Microsecond != 0 {
		us++
	}
	return min(int64(us), maxBacklog)
}

// refunded checks the answer of a refund script.
func refunded(cmd *redis.Cmd) error {
	if v, ok := cmd.Val().(int64); !ok || v != 0 {
		return fmt.Errorf("redisstore: eval: refund script returned %v, want 0", cmd.Val())
	}
	return nil
}

// now returns the time argument of a script: the clock's reading in Unix
// microseconds with [WithClock], or "" for the server's TIME.
func (l *Limiter) now() (any, error) {
	if l.clock == nil {
		return "", nil
	}
	t := l.clock.Now()
	us := unixMicro(t)
	if us <= -maxMicros || us >= maxMicros {
		return nil, fmt.Errorf("redisstore: clock reads %v, outside the years 1685 to 2255 that Lua counts exactly", t)
	}
	return us, nil
}

func (l *Limiter) decide(ctx context.Context, key string, n int64, commit bool) (core.Decision, error) {
	cf := l.cur.Load()
	d := core.Decision{Limit: cf.policy.Limit, Policy: cf.policy}
	if err := checkCost(key, n, cf.cost, -1); err != nil {
		return d, err
	}
	now, err := l.now()
	if err != nil {
		return d, err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	c := l.callOf(ctx, cf, key, now, n, commit)
	cmd, err := l.processCmd(ctx, &c.cmd)
	if cf.cal != nil && err == nil {
		// The server's time lies in neither period sent: once more,
		// with the periods around it.
		if at, ok := resync(cmd.(*redis.StringCmd).Val()); ok {
			c = l.callAt(ctx, cf, key, now, n, commit, cf.cal.around(at))
			if cmd, err = l.processCmd(ctx, &c.cmd); err == nil {
				if _, ok := resync(cmd.(*redis.StringCmd).Val()); ok {
					return d, fmt.Errorf("redisstore: eval: the server's time left the calendar period it gave")
				}
			}
		}
	}
	return cf.decision(cmd, err)
}

// call returns the EVALSHA of a decision under the policy in force.
func (l *Limiter) call(ctx context.Context, key string, now any, n int64, commit bool) *call {
	return l.callOf(ctx, l.cur.Load(), key, now, n, commit)
}

// callOf returns the EVALSHA of a decision under cf: sha numkeys key now n
// (neither for a request of cost 1 on the server's TIME) and, for a named
// policy, an empty ARGV[3] (no refund) and since, built
// here rather than by Script.Run: the arguments and the command in one
// allocation, the constant arguments boxed once.
func (l *Limiter) callOf(ctx context.Context, cf *conf, key string, now any, n int64, commit bool) *call {
	if cf.cal != nil {
		return l.callAt(ctx, cf, key, now, n, commit, cf.cal.at(now))
	}
	if !commit {
		n = -n // a Peek
	}
	c := new(call)
	k := l.keyIn(c.key[:], key)
	args := c.args[:6]
	args[0], args[1] = l.verb(cf.sha, cf.fn)
	args[2], args[3], args[4], args[5] = "1", k, now, n
	if cf.since != nil {
		args = append(args, "", cf.since) // within c.args
	} else if n == 1 && now == "" {
		// The common call, a request of cost 1 on the server's TIME: no
		// arguments (prelude.lua), each of which costs Redis more than
		// the script's test of it.
		args = args[:4]
	}
	c.cmd = *redis.NewStringCmd(ctx, args...)
	return c
}

// callAt is callOf for a calendar policy, passing the periods w after an
// empty ARGV[3] (no refund), and then, for a named policy, since: see
// calendar.go.
func (l *Limiter) callAt(ctx context.Context, cf *conf, key string, now any, n int64, commit bool, w *windows) *call {
	if !commit {
		n = -n // a Peek
	}
	c := new(call)
	k := l.keyIn(c.key[:], key)
	args := c.args[:10]
	args[0], args[1] = l.verb(cf.sha, cf.fn)
	args[2], args[3], args[4], args[5] = "1", k, now, n
	args[6], args[7], args[8], args[9] = "", w.args[0], w.args[1], w.args[2]
	if cf.since != nil {
		// A named calendar policy's: one allocation more, rather than
		// one more argument in every call.
		args = append(args[:10:10], cf.since)
	}
	c.cmd = *redis.NewStringCmd(ctx, args...)
	return c
}

// decision returns the decision that cmd, a decision's EVALSHA (or its
// EVAL) under the policy in force, answered, or err.
func (l *Limiter) decision(cmd redis.Cmder, err error) (core.Decision, error) {
	return l.cur.Load().decision(cmd, err)
}

// decision returns the decision that cmd, a decision's EVALSHA (or its
// EVAL) under c, answered, or err.
func (c *conf) decision(cmd redis.Cmder, err error) (core.Decision, error) {
	d := core.Decision{Limit: c.policy.Limit, Policy: c.policy}
	if err != nil {
		return d, fmt.Errorf("redisstore: eval: %w", err)
	}
	r := cmd.(*redis.StringCmd).Val() // redo keeps the type
	if len(r) != answerLen {
		// A fresh answer (clock.lua's answer): its resetAfter, an integer
		// reply, or a batch script's packed -2 - resetAfter (batch.lua),
		// which starts with 0xff, as no decimal number does.
		var reset int64
		if len(r) == 8 && r[0] == 0xff {
			reset = -2 - be64(r)
		} else if reset, err = strconv.ParseInt(r, 10, 64); err != nil {
			reset = -1
		}
		// Only a request to count is answered fresh: its cost is the
		// call's sixth argument (see callOf), positive, or 1 when the call
		// has no ARGV.
		var n int64
		switch a := cmd.Args(); len(a) {
		case 4:
			n = 1
		case 6, 8, 10, 11:
			n, _ = a[5].(int64)
		}
		if reset < 0 || n <= 0 {
			return d, fmt.Errorf("redisstore: eval: script returned %q, want %d bytes or a resetAfter", r, answerLen)
		}
		return c.fresh(d, n, reset), nil
	}
	d.Allowed = be64(r) == 1
	d.Remaining = be64(r[8:])
	d.RetryAfter = time.Duration(be64(r[16:])) * time.Microsecond
	d.ResetAfter = time.Duration(be64(r[24:])) * time.Microsecond
	d.Delay = time.Duration(be64(r[32:])) * time.Microsecond
	return d, nil
}

// fresh completes d, the decision of a request of cost n that found no
// state and was counted (a fresh answer, clock.lua), given its resetAfter
// in µs: what every such request gets, as the scripts compute it.
func (c *conf) fresh(d core.Decision, n, reset int64) core.Decision {
	d.Allowed = true
	d.ResetAfter = time.Duration(reset) * time.Microsecond
	if e := c.emit; e.Capacity > 0 {
		// The scripts' floor((C - nT)/T) and, leaky, ceil((n-1)T/q), exactly:
		// nT <= C < 2^53.
		d.Remaining = (e.Capacity - n*e.Interval) / e.Interval
		if c.policy.Algorithm == core.LeakyBucket {
			d.Delay = time.Duration(((n-1)*e.Interval+e.Scale-1)/e.Scale) * time.Microsecond
		}
		return d
	}
	d.Remaining = c.policy.Limit - n
	return d
}

// answerLen is the length of a decision's answer (clock.lua): five
// big-endian int64s, allowed, remaining, retryAfter, resetAfter and delay,
// durations in microseconds.
const answerLen = 40

// be64 returns the big-endian int64 that s starts with; s holds at least
// 8 bytes.
func be64(s string) int64 {
	_ = s[7]
	return int64(uint64(s[0])<<56 | uint64(s[1])<<48 | uint64(s[2])<<40 | uint64(s[3])<<32 |
		uint64(s[4])<<24 | uint64(s[5])<<16 | uint64(s[6])<<8 | uint64(s[7]))
}

// process runs cmd, an EVALSHA, as processCmd does.
func (l *Limiter) process(ctx context.Context, cmd *redis.Cmd) (*redis.Cmd, error) {
	c, err := l.processCmd(ctx, cmd)
	return c.(*redis.Cmd), err
}

// processCmd runs cmd, an EVALSHA, batched unless batching is off (see
// run), and on the server's TIME records how long the call took (see
// Refund).
func (l *Limiter) processCmd(ctx context.Context, cmd redis.Cmder) (redis.Cmder, error) {
	var start time.Time
	if l.clock == nil {
		start = time.Now()
	}
	var err error
	if l.batch != nil {
		cmd, err = l.batch.run(ctx, cmd)
	} else {
		cmd, err = l.run(ctx, cmd)
	}
	if l.clock == nil && err == nil {
		took := int64(time.Since(start))
		if old := l.trip.Load(); took > old-old/16 {
			l.trip.Store(took)
		} else {
			l.trip.Store(old - old/16)
		}
	}
	return cmd, err
}

// padded returns elapsed plus, on the server's TIME, a recent call's
// duration (see Refund).
func (l *Limiter) padded(elapsed time.Duration) time.Duration {
	if l.clock != nil {
		return elapsed
	}
	return elapsed + 2*time.Duration(l.trip.Load()) + tripSlack
}

// tripSlack is added to a refund's elapsed on the server's TIME beyond
// twice the recent calls' duration (see Refund).
const tripSlack = 250 * time.Microsecond

// run sends cmd, an EVALSHA or FCALL, and returns the command that
// answered: cmd, or, if the server answered that it did not run it (it
// lacked the script or function, or refused FCALL), the command sent once
// in its place (see again, functions.go).
func (l *Limiter) run(ctx context.Context, cmd redis.Cmder) (redis.Cmder, error) {
	err := l.client.Process(ctx, cmd)
	if err != nil {
		if c := l.again(ctx, cmd, err, nil); c != nil {
			cmd = c
			err = l.client.Process(ctx, cmd)
		}
	}
	l.reloadAfter(err) // after a Cluster failover (cluster.go)
	return cmd, err
}

// call is one decision's EVALSHA: its arguments, its command and the bytes
// of its Redis key when they fit, allocated together.
type call struct {
	args [10]any
	cmd  redis.StringCmd
	key  [96]byte
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

func (l *Limiter) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout > 0 {
		return context.WithTimeout(ctx, l.timeout)
	}
	return ctx, func() {}
}

// key returns the Redis key of a caller's key: the limiter's prefix and the
// key as the hash tag, escaped so that it holds no brace.
func (l *Limiter) key(key string) string {
	if !strings.ContainsAny(key, "{}%") {
		return l.prefix + key + "}"
	}
	var b strings.Builder
	b.Grow(len(l.prefix) + len(key) + 8)
	b.WriteString(l.prefix)
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('}')
	return b.String()
}

// keyIn returns l.key(key), written into buf when it fits and needs no
// escaping. buf is never written again: the string shares its bytes.
func (l *Limiter) keyIn(buf []byte, key string) string {
	if len(l.prefix)+len(key)+1 > len(buf) || strings.ContainsAny(key, "{}%") {
		return l.key(key)
	}
	n := copy(buf, l.prefix)
	n += copy(buf[n:], key)
	buf[n] = '}'
	return unsafe.String(&buf[0], n+1)
}

// maxMicros is 2^53: the scripts count time in float64 microseconds, exact
// below it.
const maxMicros = 1 << 53

// unixMicro returns t in Unix microseconds, rounded down, as the memory
// store counts.
func unixMicro(t time.Time) int64 {
	ns := t.UnixNano()
	us := ns / 1000
	if ns%1000 < 0 {
		us--
	}
	return us
}
