package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

var guardStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// newMemoryGuard returns a Guard on memory limiters reading clock.
func newMemoryGuard(t *testing.T, clock *core.ManualClock, opts ...core.GuardOption) *core.Guard {
	t.Helper()
	g, err := core.NewGuard(func(p core.Policy) (core.Limiter, error) {
		return core.New(p, core.WithClock(clock))
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

type guardOp uint8

const (
	opCheck guardOp = iota
	opFail
	opSucceed
)

func (o guardOp) String() string { return [...]string{"check", "fail", "succeed"}[o] }

// guardStep moves the clock by advance, then runs op n times (at least
// once) for account and ip; "%d" in account is replaced by 0, 1, … n-1.
// A check must decide want.
type guardStep struct {
	advance time.Duration
	op      guardOp
	account string
	ip      string
	n       int
	want    core.GuardDecision
}

var allowed = core.GuardDecision{Allowed: true}

func blocked(retry time.Duration, by core.GuardLimit) core.GuardDecision {
	return core.GuardDecision{RetryAfter: retry, BlockedBy: by}
}

func runGuardSteps(t *testing.T, clock *core.ManualClock, g *core.Guard, steps []guardStep) {
	t.Helper()
	for i, s := range steps {
		clock.Advance(s.advance)
		for j := range max(s.n, 1) {
			account := s.account
			if strings.Contains(account, "%d") {
				account = fmt.Sprintf(account, j)
			}
			var err error
			switch s.op {
			case opCheck:
				var got core.GuardDecision
				got, err = g.Check(ctx, account, s.ip)
				if err == nil && got != s.want {
					t.Fatalf("step %d (at +%v): check(%q, %q) = %+v, want %+v",
						i, clock.Now().Sub(guardStart), account, s.ip, got, s.want)
				}
			case opFail:
				err = g.Fail(ctx, account, s.ip)
			case opSucceed:
				err = g.Succeed(ctx, account, s.ip)
			}
			if err != nil {
				t.Fatalf("step %d: %v(%q, %q): %v", i, s.op, account, s.ip, err)
			}
		}
	}
}

// lockoutRounds fails account n times per round, checks that the round
// locks it for each wait in turn, and waits it out.
func lockoutRounds(account, ip string, n int, by core.GuardLimit, waits ...time.Duration) []guardStep {
	var steps []guardStep
	for _, w := range waits {
		steps = append(steps,
			guardStep{op: opFail, account: account, ip: ip, n: n},
			guardStep{op: opCheck, account: account, ip: ip, want: blocked(w, by)},
			guardStep{advance: w, op: opCheck, account: account, ip: ip, want: allowed},
		)
	}
	return steps
}

const (
	ana  = "ana@example.com"
	bob  = "bob@example.com"
	ipA  = "203.0.113.7"
	ipB  = "198.51.100.9"
	user = "user%d@example.com"
)

// shortWindow makes the account's own block (10 s) shorter than any
// lock, so that each lock shows as it is.
var shortWindow = core.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 10 * time.Second})

// guardScenarios are the Guard's behaviours, run on the memory store here
// and on Redis in redisstore.
var guardScenarios = []struct {
	name  string
	opts  []core.GuardOption
	steps []guardStep
}{
	{"5 failures block the account from every IP for 15m", nil, []guardStep{
		{op: opFail, account: ana, ip: ipA, n: 4},
		{op: opCheck, account: ana, ip: ipA, want: allowed},
		{op: opFail, account: ana, ip: ipA},
		{op: opCheck, account: ana, ip: ipA, want: blocked(15*time.Minute, core.GuardAccount)},
		{op: opCheck, account: ana, ip: ipB, want: blocked(15*time.Minute, core.GuardAccount)},
		{op: opCheck, account: bob, ip: ipA, want: allowed},
		{advance: 15*time.Minute - time.Microsecond, op: opCheck, account: ana, ip: ipB, want: blocked(time.Microsecond, core.GuardAccount)},
		{advance: time.Microsecond, op: opCheck, account: ana, ip: ipB, want: allowed},
	}},
	{"50 failures from one IP over 50 accounts block the IP only", nil, []guardStep{
		{op: opFail, account: user, ip: ipA, n: 49},
		{op: opCheck, account: "user50@example.com", ip: ipA, want: allowed},
		{op: opFail, account: "user49@example.com", ip: ipA},
		{op: opCheck, account: "user50@example.com", ip: ipA, want: blocked(15*time.Minute, core.GuardIP)},
		{op: opCheck, account: user, ip: ipA, n: 50, want: blocked(15*time.Minute, core.GuardIP)},
		{op: opCheck, account: user, ip: ipB, n: 50, want: allowed},
		{advance: 15 * time.Minute, op: opCheck, account: "user50@example.com", ip: ipA, want: allowed},
	}},
	{"check counts nothing", nil, []guardStep{
		{op: opCheck, account: ana, ip: ipA, n: 100, want: allowed},
		{op: opFail, account: ana, ip: ipA, n: 4},
		{op: opCheck, account: ana, ip: ipA, n: 100, want: allowed},
		{op: opFail, account: ana, ip: ipA},
		{op: opCheck, account: ana, ip: ipA, want: blocked(15*time.Minute, core.GuardAccount)},
	}},
	{"success clears the account's failures", nil, []guardStep{
		{op: opFail, account: ana, ip: ipA, n: 4},
		{advance: time.Minute, op: opSucceed, account: ana, ip: ipA},
		{op: opFail, account: ana, ip: ipA, n: 4},
		{op: opCheck, account: ana, ip: ipA, want: allowed},
		{op: opFail, account: ana, ip: ipA},
		{op: opCheck, account: ana, ip: ipA, want: blocked(15*time.Minute, core.GuardAccount)},
	}},
	{"success leaves the IP's failures", nil, []guardStep{
		{op: opFail, account: user, ip: ipA, n: 49},
		{op: opSucceed, account: user, ip: ipA, n: 49},
		{op: opCheck, account: ana, ip: ipA, want: allowed},
		{op: opFail, account: ana, ip: ipA},
		{op: opCheck, account: bob, ip: ipA, want: blocked(15*time.Minute, core.GuardIP)},
	}},
	{"retry-after is the largest of the blocking limits", nil, []guardStep{
		{op: opFail, account: user, ip: ipA, n: 45},
		{advance: 5 * time.Minute, op: opFail, account: ana, ip: ipA, n: 5},
		{op: opCheck, account: ana, ip: ipA, want: blocked(15*time.Minute, core.GuardAccount)},
		{op: opCheck, account: bob, ip: ipA, want: blocked(10*time.Minute, core.GuardIP)},
		{advance: 5 * time.Minute, op: opFail, account: "other%d@example.com", ip: ipB, n: 50},
		{op: opCheck, account: ana, ip: ipB, want: blocked(15*time.Minute, core.GuardIP)},
		{op: opCheck, account: ana, ip: ipA, want: blocked(10*time.Minute, core.GuardAccount)}, // a tie: the account's
		{advance: 6 * time.Minute, op: opCheck, account: ana, ip: ipA, want: blocked(4*time.Minute, core.GuardAccount)},
	}},
	{"account+IP limit", []core.GuardOption{
		core.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 20, Window: 15 * time.Minute}),
		core.WithAccountIPPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 15 * time.Minute}),
	}, []guardStep{
		{op: opFail, account: ana, ip: ipA, n: 3},
		{op: opCheck, account: ana, ip: ipA, want: blocked(15*time.Minute, core.GuardAccountIP)},
		{op: opCheck, account: ana, ip: ipB, want: allowed},
		{op: opCheck, account: bob, ip: ipA, want: allowed},
		{op: opSucceed, account: ana, ip: ipB},
		{op: opCheck, account: ana, ip: ipA, want: blocked(15*time.Minute, core.GuardAccountIP)},
		{op: opSucceed, account: ana, ip: ipA},
		{op: opCheck, account: ana, ip: ipA, want: allowed},
	}},
	{"lockout doubles and caps, never permanent", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)},
		append(lockoutRounds(ana, ipA, 3, core.GuardLockout,
			time.Minute, 2*time.Minute, 4*time.Minute, 8*time.Minute, 16*time.Minute, 32*time.Minute, time.Hour, time.Hour, time.Hour),
			guardStep{op: opFail, account: ana, ip: ipA, n: 2},
			guardStep{op: opCheck, account: ana, ip: ipA, want: allowed},
			guardStep{op: opFail, account: ana, ip: ipA},
			guardStep{op: opCheck, account: ana, ip: ipA, want: blocked(time.Hour, core.GuardLockout)},
			guardStep{advance: time.Hour - time.Microsecond, op: opCheck, account: ana, ip: ipA, want: blocked(time.Microsecond, core.GuardLockout)},
			guardStep{advance: time.Microsecond, op: opCheck, account: ana, ip: ipA, want: allowed},
		)},
	{"lockout on the default limits shows past 15m", []core.GuardOption{core.WithLockout(time.Minute, time.Hour)},
		append(lockoutRounds(ana, ipA, 5, core.GuardAccount, 15*time.Minute, 15*time.Minute, 15*time.Minute, 15*time.Minute),
			lockoutRounds(ana, ipB, 5, core.GuardLockout, 16*time.Minute, 32*time.Minute, time.Hour, time.Hour)...)},
	{"lockout level counts the last 24 hours", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute, 4*time.Minute), // locks at +0, +1m, +3m
			// At +24h1m the first two are forgotten, at +24h3m the third.
			guardStep{advance: 24*time.Hour - 6*time.Minute, op: opCheck, account: ana, ip: ipA, want: allowed}),
			lockoutRounds(ana, ipA, 3, core.GuardLockout, 2*time.Minute, 2*time.Minute, 4*time.Minute)...)},
	{"lockout level forgotten after a quiet day", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute, 4*time.Minute),
			guardStep{advance: 24 * time.Hour, op: opCheck, account: ana, ip: ipA, want: allowed}),
			lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute)...)},
	{"success resets the lockout level", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute, 4*time.Minute),
			guardStep{op: opSucceed, account: ana, ip: ipA}),
			lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute)...)},
	{"a running lock is extended to the next level, to the tick", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)}, []guardStep{
		{op: opFail, account: ana, ip: ipA, n: 3},
		{op: opCheck, account: ana, ip: ipA, want: blocked(time.Minute, core.GuardLockout)},
		// Failures that raced past Check while the lock ran.
		{advance: 30 * time.Second, op: opFail, account: ana, ip: ipA, n: 3},
		{op: opCheck, account: ana, ip: ipA, want: blocked(2*time.Minute, core.GuardLockout)},
		{advance: 30*time.Second + 500*time.Microsecond, op: opFail, account: ana, ip: ipA, n: 3},
		{op: opCheck, account: ana, ip: ipA, want: blocked(4*time.Minute+500*time.Microsecond, core.GuardLockout)},
		{advance: 4*time.Minute + 500*time.Microsecond, op: opCheck, account: ana, ip: ipA, want: allowed},
	}},
	{"accounts are counted whether they exist or not", nil, []guardStep{
		{op: opFail, account: "nobody@example.com", ip: ipA, n: 5},
		{op: opCheck, account: "nobody@example.com", ip: ipB, want: blocked(15*time.Minute, core.GuardAccount)},
	}},
}

func TestGuardScenarios(t *testing.T) {
	for _, sc := range guardScenarios {
		t.Run(sc.name, func(t *testing.T) {
			clock := core.NewManualClock(guardStart)
			runGuardSteps(t, clock, newMemoryGuard(t, clock, sc.opts...), sc.steps)
		})
	}
}

// Concurrent failures on one account count exactly: the limit is reached
// by one of them, which starts exactly one lockout.
func TestGuardConcurrentFailures(t *testing.T) {
	clock := core.NewManualClock(guardStart)
	g := newMemoryGuard(t, clock, shortWindow, core.WithLockout(time.Minute, time.Hour))
	const workers = 16
	var start, done sync.WaitGroup
	start.Add(1)
	errs := make(chan error, 3*workers)
	for i := range workers {
		done.Add(3)
		go func() {
			defer done.Done()
			start.Wait()
			errs <- g.Fail(ctx, ana, fmt.Sprint("192.0.2.", i))
		}()
		go func() {
			defer done.Done()
			start.Wait()
			_, err := g.Check(ctx, ana, ipA)
			errs <- err
		}()
		go func() {
			defer done.Done()
			start.Wait()
			who := fmt.Sprint("u", i, "@example.com")
			if err := g.Fail(ctx, who, ipB); err != nil {
				errs <- err
				return
			}
			errs <- g.Succeed(ctx, who, ipB)
		}()
	}
	start.Done()
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// One lockout: the next is the second level.
	runGuardSteps(t, clock, g, []guardStep{
		{op: opCheck, account: ana, ip: ipA, want: blocked(time.Minute, core.GuardLockout)},
		{advance: time.Minute, op: opFail, account: ana, ip: ipA, n: 3},
		{op: opCheck, account: ana, ip: ipA, want: blocked(2*time.Minute, core.GuardLockout)},
		{op: opCheck, account: "u0@example.com", ip: ipB, want: allowed},
	})
}

// Keys are namespaced: even on one shared limiter, an account and an IP
// spelled alike, or two account+IP pairs that concatenate alike, never
// share a count.
func TestGuardKeysNamespaced(t *testing.T) {
	clock := core.NewManualClock(guardStart)
	shared, err := core.New(core.Policy{Algorithm: core.SlidingLog, Limit: 2, Window: time.Hour}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	g, err := core.NewGuard(func(core.Policy) (core.Limiter, error) { return shared, nil },
		core.WithAccountIPPolicy(core.Policy{Limit: 1, Window: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	runGuardSteps(t, clock, g, []guardStep{
		{op: opFail, account: "x", ip: "a:b", n: 2},
		{op: opCheck, account: "y", ip: "x", want: allowed}, // account "x" is not IP "x"
		{op: opCheck, account: "x", ip: "a:b", want: blocked(time.Hour, core.GuardAccount)},
		{op: opCheck, account: "xa", ip: ":b", want: allowed}, // pair ("x", "a:b") is not ("xa", ":b")
		{op: opCheck, account: "q", ip: "a:b", want: blocked(time.Hour, core.GuardIP)},
	})
}

func TestGuardEmptyKeys(t *testing.T) {
	g := newMemoryGuard(t, core.NewManualClock(guardStart))
	for _, args := range [][2]string{{"", ipA}, {ana, ""}} {
		_, err := g.Check(ctx, args[0], args[1])
		for _, err := range []error{err, g.Fail(ctx, args[0], args[1]), g.Succeed(ctx, args[0], args[1])} {
			if !errors.Is(err, core.ErrEmptyKey) || !strings.HasPrefix(err.Error(), "core: guard: ") {
				t.Errorf("%q, %q: got %v, want core: guard: ... ErrEmptyKey", args[0], args[1], err)
			}
		}
	}
}

func TestNewGuardErrors(t *testing.T) {
	memory := func(p core.Policy) (core.Limiter, error) { return core.New(p) }
	for _, tc := range []struct {
		name       string
		newLimiter func(core.Policy) (core.Limiter, error)
		opts       []core.GuardOption
		want       string
		wantIs     error
	}{
		{"no constructor", nil, nil, "core: guard: NewGuard: a limiter constructor is required", nil},
		{"constructor fails", func(core.Policy) (core.Limiter, error) { return nil, errBroken }, nil,
			"core: guard: account policy: store broken", errBroken},
		{"constructor returns nil", func(core.Policy) (core.Limiter, error) { return nil, nil }, nil,
			"core: guard: account policy: the constructor returned a nil limiter", nil},
		{"invalid account policy", memory, []core.GuardOption{core.WithAccountPolicy(core.Policy{Window: time.Minute})},
			`core: guard: account policy: core: policy "login-account": Limit must be between 1 and 1000000000, got 0`, core.ErrInvalidPolicy},
		{"invalid IP policy", memory, []core.GuardOption{core.WithIPPolicy(core.Policy{Limit: 5})},
			`core: guard: IP policy: core: policy "login-ip": Window must be between 1µs and 8784h0m0s, got 0s`, core.ErrInvalidPolicy},
		{"invalid pair policy", memory, []core.GuardOption{core.WithAccountIPPolicy(core.Policy{Name: "x y", Limit: 5, Window: time.Minute})},
			`core: guard: account+IP policy: core: policy "x y": Name "x y" has " "; use letters, digits, '-', '_' or '.'`, core.ErrInvalidPolicy},
		{"lockout base zero", memory, []core.GuardOption{core.WithLockout(0, time.Hour)},
			"core: guard: WithLockout(0s, 1h0m0s): base must be positive", nil},
		{"lockout max below base", memory, []core.GuardOption{core.WithLockout(time.Hour, time.Minute)},
			"core: guard: WithLockout(1h0m0s, 1m0s): maxLock must be at least base", nil},
		{"lockout too long", memory, []core.GuardOption{core.WithLockout(time.Hour, 200*24*time.Hour)},
			"core: guard: WithLockout(1h0m0s, 4800h0m0s): maxLock must be at most 4392h0m0s", nil},
		{"lockout not whole microseconds", memory, []core.GuardOption{core.WithLockout(1500*time.Nanosecond, time.Hour)},
			"core: guard: WithLockout(1.5µs, 1h0m0s): base and maxLock must be whole microseconds", nil},
		{"lockout without a coarse enough tick", memory, []core.GuardOption{core.WithLockout(7*time.Microsecond, 100*24*time.Hour+time.Microsecond)},
			"core: guard: WithLockout(7µs, 2400h0m0.000001s): base and maxLock need a common divisor of at least 8.64ms", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := core.NewGuard(tc.newLimiter, tc.opts...)
			if g != nil || err == nil || err.Error() != tc.want {
				t.Fatalf("got %v, %v; want nil, %s", g, err, tc.want)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.wantIs)
			}
		})
	}
}

var errBroken = errors.New("store broken")

// brokenLimiter fails every call, and counts them.
type brokenLimiter struct {
	mu    sync.Mutex
	calls int
}

func (b *brokenLimiter) call() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	return errBroken
}

func (b *brokenLimiter) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, b.call()
}

func (b *brokenLimiter) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, b.call()
}
func (b *brokenLimiter) Reset(context.Context, string) error { return b.call() }

// A broken store is an error from every method, and Fail and Succeed
// still try every limit.
func TestGuardStoreErrors(t *testing.T) {
	b := &brokenLimiter{}
	g, err := core.NewGuard(func(core.Policy) (core.Limiter, error) { return b, nil },
		core.WithAccountIPPolicy(core.Policy{Limit: 1, Window: time.Minute}), core.WithLockout(time.Minute, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	d, err := g.Check(ctx, ana, ipA)
	if d != (core.GuardDecision{}) || !errors.Is(err, errBroken) || err.Error() != "core: guard: check account: store broken" {
		t.Errorf("Check: got %+v, %v", d, err)
	}
	for _, tc := range []struct {
		name      string
		call      func() error
		want      string
		wantCalls int
	}{
		{"Fail", func() error { return g.Fail(ctx, ana, ipA) }, "core: guard: fail account: store broken", 3},
		{"Succeed", func() error { return g.Succeed(ctx, ana, ipA) }, "core: guard: succeed account: store broken", 4},
	} {
		b.calls = 0
		err := tc.call()
		if !errors.Is(err, errBroken) || err.Error() != tc.want || b.calls != tc.wantCalls {
			t.Errorf("%s: got %v after %d calls, want %s after %d", tc.name, err, b.calls, tc.want, tc.wantCalls)
		}
	}
}

// The policies a Guard asks for: defaults, names, and the lockout's two.
func TestGuardPolicies(t *testing.T) {
	var got []string
	record := func(p core.Policy) (core.Limiter, error) {
		got = append(got, p.String())
		return core.New(p)
	}
	if _, err := core.NewGuard(record,
		core.WithAccountIPPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: time.Minute}),
		core.WithLockout(time.Minute, time.Hour)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"5/15m algorithm=sliding-log name=login-account",
		"50/15m algorithm=sliding-log name=login-ip",
		"3/1m algorithm=sliding-log name=login-account-ip",
		"7/1d algorithm=sliding-log name=login-lockout-level", // 1m 2m 4m 8m 16m 32m 1h
		"3600000/1h name=login-lockout",                       // 1 ms ticks
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("policies:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	got = nil
	if _, err := core.NewGuard(record, core.WithIPPolicy(core.Policy{Name: "ip", Limit: 100, Window: time.Hour}),
		core.WithLockout(time.Hour, 300*time.Hour)); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"5/15m algorithm=sliding-log name=login-account",
		"100/1h name=ip",
		"10/25d algorithm=sliding-log name=login-lockout-level", // 1h … 256h, 300h; remembered 2·300h
		"1080000/300h name=login-lockout",                       // 1 s ticks
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("policies:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestGuardLimitString(t *testing.T) {
	for l, want := range map[core.GuardLimit]string{
		core.GuardNone: "none", core.GuardAccount: "account", core.GuardIP: "ip",
		core.GuardAccountIP: "account+ip", core.GuardLockout: "lockout", 9: "GuardLimit(9)",
	} {
		if got := l.String(); got != want {
			t.Errorf("GuardLimit(%d).String() = %q, want %q", l, got, want)
		}
	}
}
