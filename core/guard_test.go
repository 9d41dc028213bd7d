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
	"github.com/ratekit/ratekit/core/limitertest"
)

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

const (
	ana = "ana@example.com"
	ipA = "203.0.113.7"
	ipB = "198.51.100.9"
)

// shortWindow makes the account's own block (10 s) shorter than any lock.
var shortWindow = core.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 10 * time.Second})

func blocked(retry time.Duration, by core.GuardLimit) core.GuardDecision {
	return core.GuardDecision{RetryAfter: retry, BlockedBy: by}
}

var allowed = core.GuardDecision{Allowed: true}

func TestGuardScenarios(t *testing.T) {
	limitertest.RunGuard(t, newMemoryGuard)
}

// Concurrent attempts on one account count exactly: the limit is reached
// by one of them, which starts exactly one lockout, and a success gives
// its attempt back to the IP.
func TestGuardConcurrentFailures(t *testing.T) {
	clock := core.NewManualClock(limitertest.Start)
	g := newMemoryGuard(t, clock, core.GuardClock(clock), shortWindow, core.WithLockout(time.Minute, time.Hour))
	const workers = 16
	var start, done sync.WaitGroup
	start.Add(1)
	errs := make(chan error, 3*workers)
	attempt := func(account, ip string, ok bool) error {
		d, err := g.Check(ctx, account, ip)
		if err != nil {
			return err
		}
		if ok {
			return g.Succeed(ctx, d)
		}
		return g.Fail(ctx, d)
	}
	for i := range workers {
		done.Add(3)
		go func() {
			defer done.Done()
			start.Wait()
			errs <- attempt(ana, fmt.Sprint("192.0.2.", i), false)
		}()
		go func() {
			defer done.Done()
			start.Wait()
			_, err := g.Peek(ctx, ana, ipA)
			errs <- err
		}()
		go func() {
			defer done.Done()
			start.Wait()
			errs <- attempt(fmt.Sprint("u", i, "@example.com"), ipB, true)
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
	// One lockout: the next is the second level. The successes left
	// nothing on ipB.
	limitertest.RunGuardSteps(t, clock, g, []limitertest.GuardStep{
		{Op: limitertest.GuardPeek, Account: ana, IP: ipA, Want: blocked(time.Minute, core.GuardLockout)},
		{Advance: time.Minute, Op: limitertest.GuardFail, Account: ana, IP: ipA, N: 3},
		{Op: limitertest.GuardPeek, Account: ana, IP: ipA, Want: blocked(2*time.Minute, core.GuardLockout)},
		{Op: limitertest.GuardFail, Account: "v%d@example.com", IP: ipB, N: 49},
		{Op: limitertest.GuardPeek, Account: "u0@example.com", IP: ipB, Want: allowed},
	})
}

// Keys are namespaced: even on one shared limiter, an account and an IP
// spelled alike, or two account+IP pairs that concatenate alike, never
// share a count.
func TestGuardKeysNamespaced(t *testing.T) {
	clock := core.NewManualClock(limitertest.Start)
	shared, err := core.New(core.Policy{Algorithm: core.SlidingLog, Limit: 2, Window: time.Hour}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	g, err := core.NewGuard(func(core.Policy) (core.Limiter, error) { return shared, nil },
		core.WithAccountIPPolicy(core.Policy{Limit: 1, Window: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	limitertest.RunGuardSteps(t, clock, g, []limitertest.GuardStep{
		{Op: limitertest.GuardFail, Account: "x", IP: "a:b", N: 2},
		{Op: limitertest.GuardPeek, Account: "y", IP: "x", Want: allowed}, // account "x" is not IP "x"
		{Op: limitertest.GuardPeek, Account: "x", IP: "a:b", Want: blocked(time.Hour, core.GuardAccount)},
		{Op: limitertest.GuardPeek, Account: "xa", IP: ":b", Want: allowed}, // pair ("x", "a:b") is not ("xa", ":b")
		{Op: limitertest.GuardPeek, Account: "q", IP: "a:b", Want: blocked(time.Hour, core.GuardIP)},
	})
}

func TestGuardEmptyKeys(t *testing.T) {
	g := newMemoryGuard(t, core.NewManualClock(limitertest.Start))
	for _, args := range [][2]string{{"", ipA}, {ana, ""}} {
		_, cerr := g.Check(ctx, args[0], args[1])
		_, perr := g.Peek(ctx, args[0], args[1])
		for _, err := range []error{cerr, perr} {
			if !errors.Is(err, core.ErrEmptyKey) || !strings.HasPrefix(err.Error(), "core: guard: ") {
				t.Errorf("%q, %q: got %v, want core: guard: ... ErrEmptyKey", args[0], args[1], err)
			}
		}
	}
	// The outcome of an attempt that was never allowed is nothing to record.
	if err := g.Fail(ctx, core.GuardDecision{}); err != nil {
		t.Errorf("Fail of a zero decision: %v", err)
	}
	if err := g.Succeed(ctx, core.GuardDecision{}); err != nil {
		t.Errorf("Succeed of a zero decision: %v", err)
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

// brokenLimiter is a memory limiter that fails every call once broken, and
// counts the calls it failed.
type brokenLimiter struct {
	*core.Memory
	mu     sync.Mutex
	broken bool
	calls  int
}

func (b *brokenLimiter) call() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.broken {
		return nil
	}
	b.calls++
	return errBroken
}

func (b *brokenLimiter) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	if err := b.call(); err != nil {
		return core.Decision{}, err
	}
	return b.Memory.AllowN(ctx, key, n)
}

func (b *brokenLimiter) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	if err := b.call(); err != nil {
		return core.Decision{}, err
	}
	return b.Memory.Peek(ctx, key, n)
}

func (b *brokenLimiter) Reset(ctx context.Context, key string) error {
	if err := b.call(); err != nil {
		return err
	}
	return b.Memory.Reset(ctx, key)
}

func (b *brokenLimiter) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	if err := b.call(); err != nil {
		return err
	}
	return b.Memory.Refund(ctx, key, n, elapsed)
}

// A broken store is an error from every method, and Succeed still tries
// every step.
func TestGuardStoreErrors(t *testing.T) {
	var limiters []*brokenLimiter
	g, err := core.NewGuard(func(p core.Policy) (core.Limiter, error) {
		m, err := core.New(p)
		b := &brokenLimiter{Memory: m}
		limiters = append(limiters, b)
		return b, err
	}, core.WithAccountIPPolicy(core.Policy{Limit: 1, Window: time.Minute}), core.WithLockout(time.Minute, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ok, err := g.Check(ctx, ana, ipA)
	if err != nil || !ok.Allowed {
		t.Fatalf("Check before the store broke: %+v, %v", ok, err)
	}
	calls := func() int {
		n := 0
		for _, b := range limiters {
			n += b.calls
		}
		return n
	}
	for _, b := range limiters {
		b.broken = true
	}
	d, err := g.Check(ctx, ana, ipA)
	if d.Allowed || !errors.Is(err, errBroken) || err.Error() != "core: guard: check lockout: store broken" {
		t.Errorf("Check: got %+v, %v", d, err)
	}
	d, err = g.Peek(ctx, ana, ipA)
	if d.Allowed || !errors.Is(err, errBroken) || err.Error() != "core: guard: peek lockout: store broken" {
		t.Errorf("Peek: got %+v, %v", d, err)
	}
	before := calls()
	err = g.Succeed(ctx, ok)
	if want := "core: guard: succeed ip: store broken"; !errors.Is(err, errBroken) || err.Error() != want || calls()-before != 5 {
		t.Errorf("Succeed: got %v after %d calls, want %s after 5", err, calls()-before, want)
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
