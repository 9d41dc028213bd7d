package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// Successes are never counted and a success clears the account's count, so
// a real user who mistypes a few times is not held back; an attacker is
// stopped by whichever limit it reaches first. With [WithLockout], an
// account that keeps reaching its limit is locked for longer each time.
//
// The flow of a login handler:
//
//	d, err := guard.Check(ctx, account, ip) // counts nothing
//	if !d.Allowed { /* 429, Retry-After: d.RetryAfter */ }
//	if !passwordOK { guard.Fail(ctx, account, ip); /* 401 */ }
//	guard.Succeed(ctx, account, ip) // 200
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
// server. Each method is a few
// calls to them, one per limit (Check: one Peek each; Fail: one AllowN
// each, three more calls when a lockout starts; Succeed: one Reset each).
//
// A Guard is safe for concurrent use. Create one with [NewGuard].
type Guard struct {
	account Limiter
	ip      Limiter
	pair    Limiter  // nil unless WithAccountIPPolicy
	lockout *lockout // nil unless WithLockout
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

// GuardDecision is what [Guard.Check] decides for one attempt. It holds no
// counter: how many failures an account has left is nobody's business but
// the Guard's, and must not reach a response.
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

// NewGuard returns a Guard whose limiters newLimiter builds, one per policy
// (two more with [WithLockout]). newLimiter decides where the counts live:
//
//	func(p core.Policy) (core.Limiter, error) { return core.New(p) } // this process
//	func(p core.Policy) (core.Limiter, error) { return redisstore.New(client, p) } // shared
//
// newLimiter must return a limiter that enforces the policy it is given;
// wrapping it, in a [Failover] for instance, is fine. Guards that share a
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
	g := &Guard{}
	var err error
	if g.account, err = build("account", c.account, DefaultAccountPolicy, DefaultAccountPolicy.Name); err != nil {
		return nil, err
	}
	if g.ip, err = build("IP", c.ip, DefaultIPPolicy, DefaultIPPolicy.Name); err != nil {
		return nil, err
	}
	if c.pair != (Policy{}) {
		if g.pair, err = build("account+IP", c.pair, c.pair, guardAccountIPName); err != nil {
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

// Check reports whether an attempt to log in to account from ip may
// proceed, counting nothing: it peeks at every limit (and the lock), and
// the attempt is blocked when any of them is exhausted. Call it before
// checking the password, and do not check the password of a blocked
// attempt.
//
// account and ip must not be empty. An error from a limiter is returned
// wrapped, with a zero GuardDecision; to decide such attempts anyway, wrap
// the limiters in a [Failover] (for a login, [FailClosed] or [Fallback]).
func (g *Guard) Check(ctx context.Context, account, ip string) (GuardDecision, error) {
	if err := checkGuardArgs("check", account, ip); err != nil {
		return GuardDecision{}, err
	}
	gd := GuardDecision{Allowed: true}
	peek := func(by GuardLimit, l Limiter, key string, n int64) error {
		d, err := l.Peek(ctx, key, n)
		if err != nil {
			return fmt.Errorf("core: guard: check %s: %w", by, err)
		}
		if !d.Allowed && (gd.Allowed || d.RetryAfter > gd.RetryAfter) {
			gd = GuardDecision{RetryAfter: d.RetryAfter, BlockedBy: by}
		}
		return nil
	}
	ak := accountKey(account)
	if err := peek(GuardAccount, g.account, ak, 1); err != nil {
		return GuardDecision{}, err
	}
	if err := peek(GuardIP, g.ip, ipKey(ip), 1); err != nil {
		return GuardDecision{}, err
	}
	if g.pair != nil {
		if err := peek(GuardAccountIP, g.pair, pairKey(account, ip), 1); err != nil {
			return GuardDecision{}, err
		}
	}
	if g.lockout != nil {
		if err := peek(GuardLockout, g.lockout.lock, ak, g.lockout.full); err != nil {
			return GuardDecision{}, err
		}
	}
	return gd, nil
}

// Fail records a failed attempt on account from ip: one failure against
// the account, the IP and, with [WithAccountIPPolicy], the pair. Call it
// for every wrong password and every unknown account alike. With
// [WithLockout], the failure that brings the account to its limit locks
// it.
//
// A limit that is already exhausted simply does not count the failure (an
// attempt that raced past [Guard.Check]); that is not an error. Every limit
// is tried even when one fails; the first error is returned, wrapped. A
// handler should pass a context that the client cannot cancel by hanging
// up, such as context.WithoutCancel(r.Context()), with the store's own
// timeout bounding the calls.
func (g *Guard) Fail(ctx context.Context, account, ip string) error {
	if err := checkGuardArgs("fail", account, ip); err != nil {
		return err
	}
	var first error
	note := func(by GuardLimit, err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("core: guard: fail %s: %w", by, err)
		}
	}
	ak := accountKey(account)
	d, accErr := g.account.AllowN(ctx, ak, 1)
	note(GuardAccount, accErr)
	_, err := g.ip.AllowN(ctx, ipKey(ip), 1)
	note(GuardIP, err)
	if g.pair != nil {
		_, err := g.pair.AllowN(ctx, pairKey(account, ip), 1)
		note(GuardAccountIP, err)
	}
	if g.lockout != nil && accErr == nil && d.Allowed && d.Remaining == 0 {
		note(GuardLockout, g.lockout.start(ctx, ak))
	}
	return first
}

// Succeed records a successful login to account from ip: it forgets the
// account's failures, those of the account from ip ([WithAccountIPPolicy])
// and the account's lockout level and lock ([WithLockout]). The IP's
// failures stay: one right password does not vouch for the other accounts
// an address tried.
//
// Every reset is tried even when one fails; the first error is returned,
// wrapped.
func (g *Guard) Succeed(ctx context.Context, account, ip string) error {
	if err := checkGuardArgs("succeed", account, ip); err != nil {
		return err
	}
	var first error
	reset := func(by GuardLimit, l Limiter, key string) {
		if err := l.Reset(ctx, key); err != nil && first == nil {
			first = fmt.Errorf("core: guard: succeed %s: %w", by, err)
		}
	}
	ak := accountKey(account)
	reset(GuardAccount, g.account, ak)
	if g.pair != nil {
		reset(GuardAccountIP, g.pair, pairKey(account, ip))
	}
	if g.lockout != nil {
		reset(GuardLockout, g.lockout.level, ak)
		reset(GuardLockout, g.lockout.lock, ak)
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
