package guard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Guard counts the failed attempts to log in, per account, per client IP
// and optionally per account and IP together, and blocks an attempt while
// any of them is at its limit (or the account is locked, [WithLockout]).
//
// [Guard.Check] counts an attempt before its password is checked, in every
// limit or in none, so that parallel attempts cannot all pass; tell the
// outcome with [Guard.Fail], which keeps it counted, or [Guard.Succeed],
// which gives it back to the IP and clears the account. [Guard.Peek]
// counts nothing. Call Fail for an unknown account exactly as for a wrong
// password, so the two cannot be told apart. The caller normalizes the
// account and keys the IP (see the package doc).
//
// A Guard is safe for concurrent use. Create one with [New].
type Guard struct {
	account core.Refunder
	ip      core.Refunder
	pair    core.Refunder // nil unless WithAccountIPPolicy
	lockout *lockout      // nil unless WithLockout
	clock   core.Clock    // measures how long an attempt took, for Succeed
}

// Limit names a limit of a [Guard]: the one that blocked an attempt, in
// [Decision.BlockedBy].
type Limit uint8

const (
	// ByNone: no limit blocked; the attempt may proceed.
	ByNone Limit = iota
	// ByAccount: the account's failures reached its limit.
	ByAccount
	// ByIP: the client IP's failures reached its limit.
	ByIP
	// ByAccountIP: the failures of the account from this IP reached their
	// limit ([WithAccountIPPolicy]).
	ByAccountIP
	// ByLockout: the account is locked ([WithLockout]).
	ByLockout
)

var limitNames = [...]string{
	ByNone:      "none",
	ByAccount:   "account",
	ByIP:        "ip",
	ByAccountIP: "account+ip",
	ByLockout:   "lockout",
}

// String returns the limit's name: "none", "account", "ip", "account+ip" or
// "lockout".
func (l Limit) String() string {
	if int(l) < len(limitNames) {
		return limitNames[l]
	}
	return "Limit(" + strconv.Itoa(int(l)) + ")"
}

// Decision is what [Guard.Check] or [Guard.Peek] decides for one attempt.
// Give Check's Decision to [Guard.Fail] or [Guard.Succeed] to tell the
// attempt's outcome; for any other Decision (blocked, from Peek, the zero
// value, already told) they do nothing. A Decision holds no counter: how
// many failures an account has left is nobody's business but the Guard's,
// and must not reach a response.
type Decision struct {
	// Allowed reports whether the attempt may proceed to the password
	// check.
	Allowed bool
	// RetryAfter is zero when allowed. When blocked, it is the exact wait
	// after which every blocking limit lets the attempt through, if no
	// other failure arrives in between: the largest of their waits.
	RetryAfter time.Duration
	// BlockedBy is the limit whose wait is RetryAfter (the first of
	// account, IP, account+IP, lockout on a tie); [ByNone] when allowed.
	BlockedBy Limit

	attempt *attempt // the counted attempt; nil unless Check counted it
}

// attempt is what Fail and Succeed need of an attempt Check counted.
type attempt struct {
	account, ip string
	at          time.Time // the Guard's clock before counting
	done        atomic.Bool
}

// The default policies use the sliding log: exactly "at most Limit failures
// in any Window", with one timestamp per failure.

// DefaultAccountPolicy returns the limit on failures per account of a
// Guard without [WithAccountPolicy]: 5 in any 15 minutes, on a sliding
// log, named "login-account".
func DefaultAccountPolicy() core.Policy {
	return core.Policy{Name: accountName, Algorithm: core.SlidingLog, Limit: 5, Window: 15 * time.Minute}
}

// DefaultIPPolicy returns the limit on failures per client IP of a Guard
// without [WithIPPolicy]: 50 in any 15 minutes, on a sliding log, named
// "login-ip".
func DefaultIPPolicy() core.Policy {
	return core.Policy{Name: ipName, Algorithm: core.SlidingLog, Limit: 50, Window: 15 * time.Minute}
}

// Names of the policies a Guard gives to limiters whose policy has none.
const (
	accountName   = "login-account"
	ipName        = "login-ip"
	accountIPName = "login-account-ip"
	failuresName  = "login-lockout-failures"
	lockName      = "login-lockout" // and lockName+"-level" (core.Lockout)
)

// Option configures a [Guard]; pass options to [New].
type Option func(*config)

type config struct {
	account, ip, pair core.Policy
	lockBase, lockMax time.Duration
	clock             core.Clock
}

// WithAccountPolicy sets the limit on failures per account. A policy
// without a Name is named "login-account". Default (or the zero Policy):
// [DefaultAccountPolicy], 5 per 15 minutes.
func WithAccountPolicy(p core.Policy) Option { return func(c *config) { c.account = p } }

// WithIPPolicy sets the limit on failures per client IP. A policy without
// a Name is named "login-ip". Default (or the zero Policy):
// [DefaultIPPolicy], 50 per 15 minutes.
func WithIPPolicy(p core.Policy) Option { return func(c *config) { c.ip = p } }

// WithAccountIPPolicy adds a limit on the failures of one account from one
// client IP, for a limit tighter than the account's for one source while
// the account stays open to others (then raise the account's limit). A
// policy without a Name is named "login-account-ip". Default (or the zero
// Policy): none.
func WithAccountIPPolicy(p core.Policy) Option { return func(c *config) { c.pair = p } }

// WithLockout locks an account that keeps failing, for base the first
// time and twice as long each time after (base, 2·base, 4·base, …), at
// most maxLock. The account's Limit-th failure within S = max(maxLock,
// the account policy's Window) locks it, and so does each attempt after
// them while they are within S: the lock starts as [Guard.Check] counts
// the attempt, so that attempts in parallel wait for it, and
// [Guard.Succeed] lifts it. Staying under the account's limit does not
// avoid it, and once the lock has grown to maxLock an attacker gets at
// most Limit attempts per maxLock: with the default account policy and
// WithLockout(time.Minute, time.Hour), at most 10 in any hour and 5 an
// hour once the lock has grown, against 480 a day without a lockout.
//
// The level falls back one step per 2·S without a lock: a lock less than
// 2·S after the previous one is never shorter (a ramp may repeat a step, at
// most once per 2·S, rather than double), so the lock holds while the
// failures go on (docs/login.md has the figures). [Guard.Succeed]
// resets it. A lock always ends after its time: never permanent. A lock
// shorter than what is left of the account's Window changes nothing: the
// larger wait decides.
//
// base and maxLock must be whole microseconds with 0 < base <= maxLock <=
// [core.MaxWindow]/2. Default: no lockout.
func WithLockout(base, maxLock time.Duration) Option {
	// guardtest's siege and TestLockoutAnyStrategy check the bounds above;
	// the level is a token bucket (lockout.go).
	return func(c *config) { c.lockBase, c.lockMax = base, maxLock }
}

// WithClock sets the clock a Guard reads to measure how long an attempt
// took, so that [Guard.Succeed] gives back exactly what still counts; give
// it the clock of the Guard's limiters. [New] fails if c is nil.
//
// Default: [core.SystemClock].
func WithClock(c core.Clock) Option { return func(g *config) { g.clock = c } }

// New returns a Guard whose limiters newLimiter builds, one per policy
// (two more with [WithLockout]). newLimiter decides where the counts live:
//
//	func(p core.Policy) (core.Limiter, error) { return core.New(p) }               // this process
//	func(p core.Policy) (core.Limiter, error) { return redisstore.New(client, p) } // every server
//
// newLimiter must return a limiter that enforces the policy it is given
// and can give units back ([core.As] finds a [core.Refunder]); wrapping it, in a
// [core.Failover] for instance, is fine. Guards that share a store need
// their own policy names, or their own prefix on Redis.
//
// New fails if newLimiter is nil, fails (its error is wrapped) or returns
// a limiter that cannot give units back, or if an option is invalid.
func New(newLimiter func(core.Policy) (core.Limiter, error), opts ...Option) (*Guard, error) {
	if newLimiter == nil {
		return nil, errors.New("guard: New: a limiter constructor is required")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b := builder(newLimiter)
	g := &Guard{clock: c.clock}
	if g.account, err = b.refunder("account", c.account, DefaultAccountPolicy(), accountName); err != nil {
		return nil, err
	}
	if g.ip, err = b.refunder("IP", c.ip, DefaultIPPolicy(), ipName); err != nil {
		return nil, err
	}
	if c.pair != (core.Policy{}) {
		if g.pair, err = b.refunder("account+IP", c.pair, c.pair, accountIPName); err != nil {
			return nil, err
		}
	}
	if c.lockBase != 0 || c.lockMax != 0 {
		if g.lockout, err = newLockout(c.lockBase, c.lockMax, orDefault(c.account, DefaultAccountPolicy()), b, c.clock); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// newConfig applies opts to the defaults and checks the result.
func newConfig(opts []Option) (config, error) {
	c := config{clock: core.SystemClock{}}
	for i, opt := range opts {
		if opt == nil {
			return config{}, fmt.Errorf("guard: New: option %d is nil", i+1)
		}
		opt(&c)
	}
	if c.clock == nil {
		return config{}, errors.New("guard: New: WithClock(nil): a clock is required")
	}
	return c, nil
}

// orDefault returns p, or def when p is the zero Policy.
func orDefault(p, def core.Policy) core.Policy {
	if p == (core.Policy{}) {
		return def
	}
	return p
}

// builder is the limiter constructor given to [New].
type builder func(core.Policy) (core.Limiter, error)

// limiter builds the limiter of policy p (def when p is the zero Policy,
// named name when it has no Name), for the limit what names in errors.
func (b builder) limiter(what string, p, def core.Policy, name string) (core.Limiter, error) {
	p = orDefault(p, def)
	if p.Name == "" {
		p.Name = name
	}
	l, err := b(p)
	if err != nil {
		return nil, fmt.Errorf("guard: %s policy: %w", what, err)
	}
	if l == nil {
		return nil, fmt.Errorf("guard: %s policy: the constructor returned a nil limiter", what)
	}
	return l, nil
}

// refunder is [builder.limiter] for a limiter that must give units back.
func (b builder) refunder(what string, p, def core.Policy, name string) (core.Refunder, error) {
	l, err := b.limiter(what, p, def, name)
	if err != nil {
		return nil, err
	}
	r, ok := core.As[core.Refunder](l)
	if !ok {
		return nil, fmt.Errorf("guard: %s policy: %T cannot give attempts back (core.Refunder)", what, l)
	}
	return r, nil
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

func checkArgs(op, account, ip string) error {
	switch {
	case account == "":
		return fmt.Errorf("guard: %s: account: %w", op, core.ErrEmptyKey)
	case ip == "":
		return fmt.Errorf("guard: %s: ip: %w", op, core.ErrEmptyKey)
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
// With [WithLockout], an attempt that is a strike locks the account here,
// as it is counted: the lock holds while its password is checked, and
// stays unless [Guard.Succeed] lifts it.
//
// account and ip must not be empty. An error from a limiter is returned
// wrapped, with a zero Decision (what it counted is given back); to decide
// such attempts anyway, wrap the limiters in a [core.Failover] (for a
// login, one that fails closed or falls back to a local limit).
func (g *Guard) Check(ctx context.Context, account, ip string) (Decision, error) {
	return g.decide(ctx, account, ip, true)
}

// Peek reports what [Guard.Check] would decide now, counting nothing: for a
// page that shows a challenge before the form is sent, say. Its errors are
// Check's.
func (g *Guard) Peek(ctx context.Context, account, ip string) (Decision, error) {
	return g.decide(ctx, account, ip, false)
}

// limitCheck is one limit of a Guard, as decide asks it.
type limitCheck struct {
	by  Limit
	l   core.Refunder
	key string
	d   core.Decision
}

// decide is Check (count) and Peek (!count): it asks the lock, then every
// limit, and counts the attempt in all of them or in none.
func (g *Guard) decide(ctx context.Context, account, ip string, count bool) (Decision, error) {
	op := "peek"
	if count {
		op = "check"
	}
	if err := checkArgs(op, account, ip); err != nil {
		return Decision{}, err
	}
	ak := accountKey(account)
	var buf [3]limitCheck
	limits := g.limits(buf[:0], ak, account, ip)
	lock, err := g.peekLock(ctx, op, ak)
	if err != nil {
		return Decision{}, err
	}
	// A locked account counts nothing anywhere.
	if !count || !lock.Allowed {
		return peekAll(ctx, op, limits, lock)
	}
	return g.count(ctx, op, ak, account, ip, limits)
}

// limits appends to buf the limits an attempt on account (keyed ak) from
// ip is asked of, in order: the account's, the IP's and, with
// [WithAccountIPPolicy], the pair's.
func (g *Guard) limits(buf []limitCheck, ak, account, ip string) []limitCheck {
	limits := append(buf, limitCheck{by: ByAccount, l: g.account, key: ak}, limitCheck{by: ByIP, l: g.ip, key: ipKey(ip)})
	if g.pair != nil {
		limits = append(limits, limitCheck{by: ByAccountIP, l: g.pair, key: pairKey(account, ip)})
	}
	return limits
}

// peekLock returns the lock of the account keyed ak as it is, an allowed
// Decision without [WithLockout].
func (g *Guard) peekLock(ctx context.Context, op, ak string) (core.Decision, error) {
	if g.lockout == nil {
		return core.Decision{Allowed: true}, nil
	}
	wait, err := g.lockout.lock.Locked(ctx, ak)
	if err != nil {
		return core.Decision{}, fmt.Errorf("guard: %s %s: %w", op, ByLockout, err)
	}
	return core.Decision{Allowed: wait == 0, RetryAfter: wait}, nil
}

// peekAll decides an attempt that counts nothing (a Peek, or a Check of a
// locked account) by what every limit and the lock say as they are.
func peekAll(ctx context.Context, op string, limits []limitCheck, lock core.Decision) (Decision, error) {
	if _, err := ask(ctx, op, limits, false); err != nil {
		return Decision{}, err
	}
	return blocking(limits, lock), nil
}

// count decides an attempt that counts, on an account (keyed ak) no lock
// holds: it counts the attempt in every limit and, if they all allow it,
// in the lockout's failures; an attempt blocked, or met by an error, is
// given back to every limit that counted it.
func (g *Guard) count(ctx context.Context, op, ak, account, ip string, limits []limitCheck) (Decision, error) {
	at := g.clock.Now()
	counted, err := ask(ctx, op, limits, true)
	d := Decision{Allowed: true}
	if err == nil {
		if d = blocking(limits, core.Decision{Allowed: true}); d.Allowed {
			d, err = g.strike(ctx, op, ak, at)
		}
	}
	if err != nil || !d.Allowed {
		// All or nothing: give back what the limits that allowed counted.
		if err = giveBack(ctx, op, limits[:counted], g.clock.Now().Sub(at), err); err != nil {
			return Decision{}, err
		}
		return d, nil
	}
	d.attempt = &attempt{account: account, ip: ip, at: at}
	return d, nil
}

// ask asks each limit in turn about one attempt, counting it (AllowN) or
// not (Peek), and records its Decision. It stops at the first error and
// returns how many limits answered before it.
func ask(ctx context.Context, op string, limits []limitCheck, count bool) (answered int, err error) {
	for i := range limits {
		lc := &limits[i]
		if count {
			lc.d, err = lc.l.AllowN(ctx, lc.key, 1)
		} else {
			lc.d, err = lc.l.Peek(ctx, lc.key, 1)
		}
		if err != nil {
			return i, fmt.Errorf("guard: %s %s: %w", op, lc.by, err)
		}
	}
	return len(limits), nil
}

// blocking combines the Decisions of the limits and the lock: allowed if
// they all allow, else blocked for the largest RetryAfter, by the first
// limit on a tie (the lock last).
func blocking(limits []limitCheck, lock core.Decision) Decision {
	d := Decision{Allowed: true}
	for _, lc := range limits {
		d = longer(d, lc.by, lc.d)
	}
	return longer(d, ByLockout, lock)
}

// longer returns d, or a Decision blocked by by when cd denies for longer
// than d blocks (or d is allowed).
func longer(d Decision, by Limit, cd core.Decision) Decision {
	if !cd.Allowed && (d.Allowed || cd.RetryAfter > d.RetryAfter) {
		return Decision{RetryAfter: cd.RetryAfter, BlockedBy: by}
	}
	return d
}

// strike counts an attempt every limit allowed in the lockout's failures
// ([lockout.admit]): it returns it allowed, or blocked by the lock a
// parallel strike took. An attempt blocked, or met by an error, is given
// back to the failures log. Without [WithLockout], every attempt is
// allowed.
func (g *Guard) strike(ctx context.Context, op, key string, at time.Time) (Decision, error) {
	d := Decision{Allowed: true}
	if g.lockout == nil {
		return d, nil
	}
	ok, wait, held, err := g.lockout.admit(ctx, key)
	switch {
	case err != nil:
		err = fmt.Errorf("guard: %s %s: %w", op, ByLockout, err)
	case !ok:
		d = Decision{RetryAfter: wait, BlockedBy: ByLockout}
	}
	if (err != nil || !ok) && held {
		if rerr := g.lockout.failures.Refund(ctx, key, 1, g.clock.Now().Sub(at)); rerr != nil && err == nil {
			err = fmt.Errorf("guard: %s %s: give back: %w", op, ByLockout, rerr)
		}
	}
	return d, err
}

// giveBack gives back to each of the counted limits that allowed the
// attempt its unit, elapsed after it was counted. It returns err or, when
// err is nil, the first give-back error, wrapped.
func giveBack(ctx context.Context, op string, counted []limitCheck, elapsed time.Duration, err error) error {
	for _, lc := range counted {
		if lc.d.Allowed {
			if rerr := lc.l.Refund(ctx, lc.key, 1, elapsed); rerr != nil && err == nil {
				err = fmt.Errorf("guard: %s %s: give back: %w", op, lc.by, rerr)
			}
		}
	}
	return err
}

// Fail records that the attempt d, allowed by [Guard.Check], failed: a
// wrong password or an unknown account alike. Its failure stays counted
// against the account, the IP and the pair, and, with [WithLockout], the
// lock its Check started stays. Fail of any other Decision, or of one
// already told, does nothing.
//
// A handler should pass a context that the client cannot cancel by hanging
// up, such as context.WithoutCancel(r.Context()), with the store's own
// timeout bounding the calls.
func (g *Guard) Fail(ctx context.Context, d Decision) error {
	a := d.attempt
	if a == nil || !a.done.CompareAndSwap(false, true) {
		return nil
	}
	return nil
}

// Succeed records that the attempt d, allowed by [Guard.Check], succeeded:
// it gives the attempt back to the IP's limit (a right password is not a
// failure of the address) and forgets the account's failures, those of the
// account from that IP ([WithAccountIPPolicy]) and the account's lockout
// level and lock ([WithLockout]). The IP's earlier failures stay: one right
// password does not vouch for the other accounts an address tried. Succeed
// of any other Decision, or of one already told, does nothing.
//
// Every step is tried even when one fails; the first error is returned,
// wrapped. Pass a context the client cannot cancel, as for [Guard.Fail].
func (g *Guard) Succeed(ctx context.Context, d Decision) error {
	a := d.attempt
	if a == nil || !a.done.CompareAndSwap(false, true) {
		return nil
	}
	var first error
	note := func(by Limit, err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("guard: succeed %s: %w", by, err)
		}
	}
	elapsed := g.clock.Now().Sub(a.at)
	note(ByIP, g.ip.Refund(ctx, ipKey(a.ip), 1, elapsed))
	ak := accountKey(a.account)
	note(ByAccount, g.account.Reset(ctx, ak))
	if g.pair != nil {
		note(ByAccountIP, g.pair.Reset(ctx, pairKey(a.account, a.ip)))
	}
	if g.lockout != nil {
		note(ByLockout, g.lockout.failures.Reset(ctx, ak))
		note(ByLockout, g.lockout.lock.Reset(ctx, ak))
	}
	return first
}
