package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Guard protects a login, or any other check of a secret, against password
// guessing. It counts failed attempts only, under limits checked on every
// attempt:
//
//   - per account (default 5 failures in any 15 minutes), against many
//     passwords tried on one account from many addresses;
//   - per client IP (default 50 failures in any 15 minutes), against one
//     password tried on many accounts from one address;
//   - optionally per account and IP together ([WithAccountIPPolicy]).
//
// An attempt is counted before its password is checked and given back if
// it succeeds, so that at most Limit attempts per account are ever checked
// at once or have failed, however many arrive in parallel. A success also
// clears the account's count, so a real user who mistypes a few times is
// not held back; an attacker is stopped by whichever limit it reaches
// first. With [WithLockout], an account that keeps reaching its limit is
// locked for longer each time.
//
// The flow of a login handler:
//
//	d, err := guard.Check(ctx, account, ip) // counts the attempt
//	if !d.Allowed { /* 429, Retry-After: d.RetryAfter */ }
//	if !passwordOK { guard.Fail(ctx, d); /* 401 */ }
//	guard.Succeed(ctx, d) // gives the attempt back; 200
//
// The Guard never needs to know whether an account exists, and must not be
// told: call Fail for an unknown account exactly as for a wrong password, so
// that an unknown account is blocked exactly like a known one and the two
// cannot be told apart.
//
// The account must be normalized by the caller, or "Ana@Example.com" and
// "ana@example.com" would be counted apart: use
// [github.com/ratekit/ratekit/keyfunc.NormalizeEmail] (or keyfunc.Email on
// a request). Key the IP with [github.com/ratekit/ratekit/keyfunc.ClientIP]
// (keyfunc.PeerIP for a server clients reach directly), which groups an
// IPv6 client by its /64. Keys are namespaced by limit, so an account and
// an IP that are the same string never share a count.
//
// State lives in the limiters the Guard builds through the function given
// to [NewGuard], one per policy: [Memory] limiters in one process, Redis
// limiters ([github.com/ratekit/ratekit/redisstore.New]) shared by every
// server. They must be [Refunder]s.
//
// A Guard is safe for concurrent use. Create one with [NewGuard].
type Guard struct {
	account Refunder
	ip      Refunder
	pair    Refunder // nil unless WithAccountIPPolicy
	lockout *lockout // nil unless WithLockout
	clock   Clock    // measures how long an attempt took, for Succeed
}

// GuardLimit names the limit of a [Guard] that blocked an attempt.
type GuardLimit uint8

const (
	// GuardNone: no limit blocked; the attempt may proceed.
	GuardNone GuardLimit = iota
	// GuardAccount: the account's failures reached its limit.
	GuardAccount
	// GuardIP: the client IP's failures reached its limit.
	GuardIP
	// GuardAccountIP: the failures of the account from this IP reached
	// their limit ([WithAccountIPPolicy]).
	GuardAccountIP
	// GuardLockout: the account is locked ([WithLockout]).
	GuardLockout
)

var guardLimitNames = [...]string{
	GuardNone:      "none",
	GuardAccount:   "account",
	GuardIP:        "ip",
	GuardAccountIP: "account+ip",
	GuardLockout:   "lockout",
}

// String returns the limit's name: "none", "account", "ip", "account+ip" or
// "lockout".
func (l GuardLimit) String() string {
	if int(l) < len(guardLimitNames) {
		return guardLimitNames[l]
	}
	return "GuardLimit(" + strconv.Itoa(int(l)) + ")"
}

// GuardDecision is what [Guard.Check] decides for one attempt, and what
// [Guard.Fail] and [Guard.Succeed] are told the attempt's outcome with. It
// holds no counter: how many failures an account has left is nobody's
// business but the Guard's, and must not reach a response.
type GuardDecision struct {
	// Allowed reports whether the attempt may proceed to the password
	// check.
	Allowed bool
	// RetryAfter is zero when allowed. When blocked, it is the exact wait
	// after which every blocking limit lets the attempt through, if no
	// other failure arrives in between: the largest of their waits.
	RetryAfter time.Duration
	// BlockedBy is the limit whose wait is RetryAfter (the first of
	// account, IP, account+IP, lockout on a tie); [GuardNone] when
	// allowed.
	BlockedBy GuardLimit

	attempt *guardAttempt // the counted attempt; nil unless Check counted it
}

// guardAttempt is what Fail and Succeed need of an attempt Check counted.
type guardAttempt struct {
	account, ip string
	at          time.Time // the Guard's clock before counting
	last        bool      // it took the account's last unit: a failure locks
	done        atomic.Bool
}

// Default policies of a [Guard]. They use the sliding log: exactly "at most
// Limit failures in any Window", with one timestamp per failure.
var (
	// DefaultAccountPolicy allows 5 failures per account in any 15 minutes.
	DefaultAccountPolicy = Policy{Name: "login-account", Algorithm: SlidingLog, Limit: 5, Window: 15 * time.Minute}
	// DefaultIPPolicy allows 50 failures per client IP in any 15 minutes.
	DefaultIPPolicy = Policy{Name: "login-ip", Algorithm: SlidingLog, Limit: 50, Window: 15 * time.Minute}
)

// Names of the policies a [Guard] gives to limiters whose policy has none.
const (
	guardAccountIPName = "login-account-ip"
	guardLevelName     = "login-lockout-level"
	guardLockName      = "login-lockout"
)

// GuardOption configures a [Guard].
type GuardOption func(*guardConfig)

type guardConfig struct {
	account, ip, pair Policy
	lockBase, lockMax time.Duration
	clock             Clock
}

// WithAccountPolicy sets the limit on failures per account. A policy without
// a Name is named "login-account". Default (or the zero Policy):
// [DefaultAccountPolicy], 5 per 15 minutes.
func WithAccountPolicy(p Policy) GuardOption { return func(c *guardConfig) { c.account = p } }

// WithIPPolicy sets the limit on failures per client IP. A policy without a
// Name is named "login-ip". Default (or the zero Policy): [DefaultIPPolicy],
// 50 per 15 minutes.
func WithIPPolicy(p Policy) GuardOption { return func(c *guardConfig) { c.ip = p } }

// WithAccountIPPolicy adds a limit on the failures of one account from one
// client IP, for a limit tighter than the account's for one source while
// the account stays open to others (then raise the account's limit). A
// policy without a Name is named "login-account-ip". Default (or the zero
// Policy): none.
func WithAccountIPPolicy(p Policy) GuardOption { return func(c *guardConfig) { c.pair = p } }

// WithLockout locks an account for a growing time each time a failure
// brings it to its limit: base the first time, then twice as long each time
// (base, 2·base, 4·base, …), at most maxLock. The level counts the account's
// lockouts in the last 24 hours (or 2·maxLock, if longer; counting stops
// at the first lockout that lasts maxLock), so it falls back by itself
// once the account is left alone, and [Guard.Succeed] resets it. A lock
// always ends after its time: never permanent.
//
// Without it, a patient attacker may try the account's Limit every Window
// forever (480 passwords a day at 5 per 15 minutes); with
// WithLockout(time.Minute, time.Hour), once the lock has grown, about Limit
// an hour. A lock shorter than what is left of the account's Window changes
// nothing: the larger wait decides.
//
// base and maxLock must be whole microseconds with 0 < base <= maxLock <=
// [MaxWindow]/2. Default: no lockout.
func WithLockout(base, maxLock time.Duration) GuardOption {
	return func(c *guardConfig) { c.lockBase, c.lockMax = base, maxLock }
}

// GuardClock sets the clock a [Guard] reads to measure how long an attempt
// took, so that [Guard.Succeed] gives back exactly what still counts; give
// it the clock of the Guard's limiters in tests. Default (or nil): [SystemClock].
func GuardClock(c Clock) GuardOption { return func(g *guardConfig) { g.clock = c } }

// NewGuard returns a Guard whose limiters newLimiter builds, one per policy
// (two more with [WithLockout]). newLimiter decides where the counts live:
//
//	func(p core.Policy) (core.Limiter, error) { return core.New(p) } // this process
//	func(p core.Policy) (core.Limiter, error) { return redisstore.New(client, p) } // shared
//
// newLimiter must return a [Refunder] that enforces the policy it is
// given; wrapping it, in a [Failover] for instance, is fine. Guards that share a
// store need their own policy names, or their own prefix on Redis.
//
// NewGuard fails if newLimiter is nil or fails (its error is wrapped), or
// an option is invalid.
func NewGuard(newLimiter func(Policy) (Limiter, error), opts ...GuardOption) (*Guard, error) {
	if newLimiter == nil {
		return nil, errors.New("core: guard: NewGuard: a limiter constructor is required")
	}
	var c guardConfig
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("core: NewGuard: option %d is nil", i+1)
		}
		opt(&c)
	}
	build := func(what string, p, def Policy, name string) (Limiter, error) {
		if p == (Policy{}) {
			p = def
		}
		if p.Name == "" {
			p.Name = name
		}
		l, err := newLimiter(p)
		if err != nil {
			return nil, fmt.Errorf("core: guard: %s policy: %w", what, err)
		}
		if l == nil {
			return nil, fmt.Errorf("core: guard: %s policy: the constructor returned a nil limiter", what)
		}
		return l, nil
	}
	refunder := func(what string, p, def Policy, name string) (Refunder, error) {
		l, err := build(what, p, def, name)
		if err != nil {
			return nil, err
		}
		r, ok := AsRefunder(l)
		if !ok {
			return nil, fmt.Errorf("core: guard: %s policy: %T cannot give attempts back (Refunder)", what, l)
		}
		return r, nil
	}
	if c.clock == nil {
		c.clock = SystemClock{}
	}
	g := &Guard{clock: c.clock}
	var err error
	if g.account, err = refunder("account", c.account, DefaultAccountPolicy, DefaultAccountPolicy.Name); err != nil {
		return nil, err
	}
	if g.ip, err = refunder("IP", c.ip, DefaultIPPolicy, DefaultIPPolicy.Name); err != nil {
		return nil, err
	}
	if c.pair != (Policy{}) {
		if g.pair, err = refunder("account+IP", c.pair, c.pair, guardAccountIPName); err != nil {
			return nil, err
		}
	}
	if c.lockBase != 0 || c.lockMax != 0 {
		if g.lockout, err = newLockout(c.lockBase, c.lockMax, build); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Keys, namespaced per limit so that an account and an IP never share one,
// even in a single limiter.
func accountKey(account string) string { return "acct:" + account }
func ipKey(ip string) string           { return "ip:" + ip }

// pairKey joins the two length-prefixed, so that ("a:b", "c") and ("a",
// "b:c") differ.
func pairKey(account, ip string) string {
	return "acct+ip:" + strconv.Itoa(len(account)) + ":" + account + ip
}

func checkGuardArgs(op, account, ip string) error {
	switch {
	case account == "":
		return fmt.Errorf("core: guard: %s: account: %w", op, ErrEmptyKey)
	case ip == "":
		return fmt.Errorf("core: guard: %s: ip: %w", op, ErrEmptyKey)
	}
	return nil
}

// Check decides whether an attempt to log in to account from ip may
// proceed and, if so, counts it as a failure against every limit, before
// its password is checked: so that attempts running in parallel cannot all
// pass. Tell the Guard the attempt's outcome with [Guard.Fail] or
// [Guard.Succeed]. A blocked attempt counts nothing; do not check its
// password.
//
// account and ip must not be empty. An error from a limiter is returned
// wrapped, with a zero GuardDecision (what it counted is given back); to
// decide such attempts anyway, wrap the limiters in a [Failover] (for a
// login, [FailClosed] or [Fallback]).
func (g *Guard) Check(ctx context.Context, account, ip string) (GuardDecision, error) {
	return g.decide(ctx, account, ip, true)
}

// Peek reports what [Guard.Check] would decide now, counting nothing: for a
// page that shows a challenge before the form is sent, say.
func (g *Guard) Peek(ctx context.Context, account, ip string) (GuardDecision, error) {
	return g.decide(ctx, account, ip, false)
}

// guardLimit is one limit of a Guard, as decide asks it.
type guardLimit struct {
	by  GuardLimit
	l   Refunder
	key string
	d   Decision
}

func (g *Guard) decide(ctx context.Context, account, ip string, count bool) (GuardDecision, error) {
	op := "peek"
	if count {
		op = "check"
	}
	if err := checkGuardArgs(op, account, ip); err != nil {
		return GuardDecision{}, err
	}
	ak := accountKey(account)
	limits := make([]guardLimit, 0, 3)
	limits = append(limits, guardLimit{by: GuardAccount, l: g.account, key: ak}, guardLimit{by: GuardIP, l: g.ip, key: ipKey(ip)})
	if g.pair != nil {
		limits = append(limits, guardLimit{by: GuardAccountIP, l: g.pair, key: pairKey(account, ip)})
	}
	// A locked account counts nothing anywhere.
	var lock Decision
	if g.lockout != nil {
		var err error
		if lock, err = g.lockout.lock.Peek(ctx, ak, g.lockout.full); err != nil {
			return GuardDecision{}, fmt.Errorf("core: guard: %s %s: %w", op, GuardLockout, err)
		}
		count = count && lock.Allowed
	}
	var at time.Time
	if count {
		at = g.clock.Now()
	}
	counted := 0
	var err error
	for i := range limits {
		gl := &limits[i]
		if count {
			gl.d, err = gl.l.AllowN(ctx, gl.key, 1)
		} else {
			gl.d, err = gl.l.Peek(ctx, gl.key, 1)
		}
		if err != nil {
			err = fmt.Errorf("core: guard: %s %s: %w", op, gl.by, err)
			break
		}
		counted++
	}
	gd := GuardDecision{Allowed: true}
	if err == nil {
		for _, gl := range limits {
			if !gl.d.Allowed && (gd.Allowed || gl.d.RetryAfter > gd.RetryAfter) {
				gd = GuardDecision{RetryAfter: gl.d.RetryAfter, BlockedBy: gl.by}
			}
		}
		if !lock.Allowed && g.lockout != nil && (gd.Allowed || lock.RetryAfter > gd.RetryAfter) {
			gd = GuardDecision{RetryAfter: lock.RetryAfter, BlockedBy: GuardLockout}
		}
	}
	if !count {
		if err != nil {
			return GuardDecision{}, err
		}
		return gd, nil
	}
	if err != nil || !gd.Allowed {
		// All or nothing: give back what the limits that allowed counted.
		elapsed := g.clock.Now().Sub(at)
		for _, gl := range limits[:counted] {
			if gl.d.Allowed {
				if rerr := gl.l.Refund(ctx, gl.key, 1, elapsed); rerr != nil && err == nil {
					err = fmt.Errorf("core: guard: %s %s: give back: %w", op, gl.by, rerr)
				}
			}
		}
		if err != nil {
			return GuardDecision{}, err
		}
		return gd, nil
	}
	gd.attempt = &guardAttempt{account: account, ip: ip, at: at, last: limits[0].d.Remaining == 0}
	return gd, nil
}

// Fail records that the attempt d, allowed by [Guard.Check], failed: a
// wrong password or an unknown account alike. Its failure stays counted
// against the account, the IP and the pair; with [WithLockout], the
// failure that brought the account to its limit locks it. Fail of a
// blocked attempt, or of one already told, does nothing.
//
// A handler should pass a context that the client cannot cancel by hanging
// up, such as context.WithoutCancel(r.Context()), with the store's own
// timeout bounding the calls.
func (g *Guard) Fail(ctx context.Context, d GuardDecision) error {
	a := d.attempt
	if a == nil || !a.done.CompareAndSwap(false, true) {
		return nil
	}
	if g.lockout != nil && a.last {
		if err := g.lockout.start(ctx, accountKey(a.account)); err != nil {
			return fmt.Errorf("core: guard: fail %s: %w", GuardLockout, err)
		}
	}
	return nil
}

// Succeed records that the attempt d, allowed by [Guard.Check], succeeded:
// it gives the attempt back to the IP's limit (a right password is not a
// failure of the address) and forgets the account's failures, those of the
// account from that IP ([WithAccountIPPolicy]) and the account's lockout
// level and lock ([WithLockout]). The IP's earlier failures stay: one right
// password does not vouch for the other accounts an address tried. Succeed
// of a blocked attempt, or of one already told, does nothing.
//
// Every step is tried even when one fails; the first error is returned,
// wrapped.
func (g *Guard) Succeed(ctx context.Context, d GuardDecision) error {
	a := d.attempt
	if a == nil || !a.done.CompareAndSwap(false, true) {
		return nil
	}
	var first error
	note := func(by GuardLimit, err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("core: guard: succeed %s: %w", by, err)
		}
	}
	elapsed := g.clock.Now().Sub(a.at)
	note(GuardIP, g.ip.Refund(ctx, ipKey(a.ip), 1, elapsed))
	ak := accountKey(a.account)
	note(GuardAccount, g.account.Reset(ctx, ak))
	if g.pair != nil {
		note(GuardAccountIP, g.pair.Reset(ctx, pairKey(a.account, a.ip)))
	}
	if g.lockout != nil {
		note(GuardLockout, g.lockout.level.Reset(ctx, ak))
		note(GuardLockout, g.lockout.lock.Reset(ctx, ak))
	}
	return first
}

// lockout is the growing lock of [WithLockout], kept in two limiters so
// that it works on any store:
//
//   - level, a sliding log of Limit len(steps) over the memory period,
//     holds one entry per lockout: the lockouts so far are Limit less
//     Remaining, and the log forgets each one after the memory period;
//   - lock, a token bucket of full tokens of tick each (full·tick = max),
//     is drained to lock the account: the time until it is full again is
//     the time left locked, which a Peek of full tokens reports exactly as
//     its RetryAfter. A bucket never takes longer than max to refill, so
//     no lock outlasts max, whatever races happen.
type lockout struct {
	level Limiter
	lock  Limiter
	steps []time.Duration // lock time by level: base·2^k, the last one max
	tick  time.Duration   // one token's refill time; divides every step
	full  int64           // the bucket's capacity: max/tick
}

func newLockout(base, maxLock time.Duration, build func(what string, p, def Policy, name string) (Limiter, error)) (*lockout, error) {
	bad := func(reason string) error {
		return fmt.Errorf("core: guard: WithLockout(%v, %v): %s", base, maxLock, reason)
	}
	switch {
	case base <= 0:
		return nil, bad("base must be positive")
	case maxLock < base:
		return nil, bad("maxLock must be at least base")
	case maxLock > MaxWindow/2:
		return nil, bad(fmt.Sprintf("maxLock must be at most %v", MaxWindow/2))
	case base%time.Microsecond != 0 || maxLock%time.Microsecond != 0:
		return nil, bad("base and maxLock must be whole microseconds")
	}
	// The tick is the finest common divisor of base and maxLock down to a
	// millisecond, for locks exact to the microsecond even when one extends
	// another; a second, or their greatest common divisor, when the bucket
	// would otherwise pass MaxLimit tokens.
	b, m := uint64(base/time.Microsecond), uint64(maxLock/time.Microsecond)
	var tick uint64
	for _, t := range []uint64{uint64(time.Millisecond / time.Microsecond), uint64(time.Second / time.Microsecond), m} {
		if tick = gcd(gcd(b, m), t); m/tick <= MaxLimit {
			break
		}
	}
	if m/tick > MaxLimit {
		return nil, bad(fmt.Sprintf("base and maxLock need a common divisor of at least %v", maxLock/MaxLimit))
	}
	l := &lockout{tick: time.Duration(tick) * time.Microsecond, full: int64(m / tick)}
	for d := base; d < maxLock; d *= 2 {
		l.steps = append(l.steps, d)
		if d > maxLock/2 {
			break
		}
	}
	l.steps = append(l.steps, maxLock)
	memory := 2 * maxLock
	if memory < 24*time.Hour {
		memory = 24 * time.Hour
	}
	var err error
	levelPolicy := Policy{Name: guardLevelName, Algorithm: SlidingLog, Limit: int64(len(l.steps)), Window: memory}
	if l.level, err = build("lockout level", levelPolicy, levelPolicy, guardLevelName); err != nil {
		return nil, err
	}
	lockPolicy := Policy{Name: guardLockName, Algorithm: TokenBucket, Limit: l.full, Window: maxLock}
	if l.lock, err = build("lockout", lockPolicy, lockPolicy, guardLockName); err != nil {
		return nil, err
	}
	return l, nil
}

// start locks the account of key for the time its level calls for, and
// raises the level. A lock already running that is as long stays as it
// is; a shorter one is extended (exactly, up to one tick when it does not
// end on a tick).
func (l *lockout) start(ctx context.Context, key string) error {
	lv, err := l.level.AllowN(ctx, key, 1)
	if err != nil {
		return err
	}
	k := len(l.steps) - 1 // the log is full: the level is at max
	if lv.Allowed {
		k = min(max(int(lv.Limit-lv.Remaining-1), 0), k) // lockouts before this one
	}
	want := l.steps[k]
	cur, err := l.lock.Peek(ctx, key, l.full)
	if err != nil {
		return err
	}
	var left time.Duration
	if !cur.Allowed {
		left = cur.RetryAfter
	}
	if left >= want {
		return nil
	}
	n := int64((want - left + l.tick - 1) / l.tick)
	n = min(n, int64((time.Duration(l.full)*l.tick-left)/l.tick)) // what the bucket holds
	if n <= 0 {
		return nil
	}
	_, err = l.lock.AllowN(ctx, key, n)
	return err
}
