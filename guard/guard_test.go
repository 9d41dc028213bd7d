package guard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/guard/guardtest"
	"github.com/ratekit/ratekit/internal/guardcheck"
)

// newMemoryGuard returns a Guard on memory limiters reading clock.
func newMemoryGuard(t *testing.T, clock *core.ManualClock, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(func(p core.Policy) (core.Limiter, error) {
		return core.New(p, core.WithClock(clock))
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var ctx = context.Background()

// epoch is where the tests' clocks start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	ana = "ana@example.com"
	ipA = "203.0.113.7"
	ipB = "198.51.100.9"
)

// shortWindow makes the account's own block (10 s) shorter than any lock.
var shortWindow = guard.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 10 * time.Second})

func blocked(retry time.Duration, by guard.Limit) guard.Decision {
	return guard.Decision{RetryAfter: retry, BlockedBy: by}
}

var allowed = guard.Decision{Allowed: true}

func TestGuardScenarios(t *testing.T) {
	guardtest.Run(t, newMemoryGuard)
}

// Concurrent attempts on one account count exactly: the limit is reached
// by one of them, which starts exactly one lockout, and a success gives
// its attempt back to the IP.
func TestGuardConcurrentFailures(t *testing.T) {
	clock := core.NewManualClock(epoch)
	g := newMemoryGuard(t, clock, guard.WithClock(clock), shortWindow, guard.WithLockout(time.Minute, time.Hour))
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
	guardcheck.RunSteps(t, clock, g, []guardcheck.Step{
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(time.Minute, guard.ByLockout)},
		{Advance: time.Minute, Op: guardcheck.Fail, Account: ana, IP: ipA, N: 3},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(2*time.Minute, guard.ByLockout)},
		{Op: guardcheck.Fail, Account: "v%d@example.com", IP: ipB, N: 49},
		{Op: guardcheck.Peek, Account: "u0@example.com", IP: ipB, Want: allowed},
	})
}

// Keys are namespaced: even on one shared limiter, an account and an IP
// spelled alike, or two account+IP pairs that concatenate alike, never
// share a count.
func TestGuardKeysNamespaced(t *testing.T) {
	clock := core.NewManualClock(epoch)
	shared, err := core.New(core.Policy{Algorithm: core.SlidingLog, Limit: 2, Window: time.Hour}, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(func(core.Policy) (core.Limiter, error) { return shared, nil },
		guard.WithAccountIPPolicy(core.Policy{Limit: 1, Window: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	guardcheck.RunSteps(t, clock, g, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: "x", IP: "a:b", N: 2},
		{Op: guardcheck.Peek, Account: "y", IP: "x", Want: allowed}, // account "x" is not IP "x"
		{Op: guardcheck.Peek, Account: "x", IP: "a:b", Want: blocked(time.Hour, guard.ByAccount)},
		{Op: guardcheck.Peek, Account: "xa", IP: ":b", Want: allowed}, // pair ("x", "a:b") is not ("xa", ":b")
		{Op: guardcheck.Peek, Account: "q", IP: "a:b", Want: blocked(time.Hour, guard.ByIP)},
	})
}

func TestGuardEmptyKeys(t *testing.T) {
	g := newMemoryGuard(t, core.NewManualClock(epoch))
	for _, args := range [][2]string{{"", ipA}, {ana, ""}} {
		_, cerr := g.Check(ctx, args[0], args[1])
		_, perr := g.Peek(ctx, args[0], args[1])
		for _, err := range []error{cerr, perr} {
			if !errors.Is(err, core.ErrEmptyKey) || !strings.HasPrefix(err.Error(), "guard: ") {
				t.Errorf("%q, %q: got %v, want guard: ... ErrEmptyKey", args[0], args[1], err)
			}
		}
	}
	// The outcome of an attempt that was never allowed is nothing to record.
	if err := g.Fail(ctx, guard.Decision{}); err != nil {
		t.Errorf("Fail of a zero decision: %v", err)
	}
	if err := g.Succeed(ctx, guard.Decision{}); err != nil {
		t.Errorf("Succeed of a zero decision: %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	memory := func(p core.Policy) (core.Limiter, error) { return core.New(p) }
	for _, tc := range []struct {
		name       string
		newLimiter func(core.Policy) (core.Limiter, error)
		opts       []guard.Option
		want       string
		wantIs     error
	}{
		{"no constructor", nil, nil, "guard: New: a limiter constructor is required", nil},
		{"constructor fails", func(core.Policy) (core.Limiter, error) { return nil, errBroken }, nil,
			"guard: account policy: store broken", errBroken},
		{"constructor returns nil", func(core.Policy) (core.Limiter, error) { return nil, nil }, nil,
			"guard: account policy: the constructor returned a nil limiter", nil},
		{"invalid account policy", memory, []guard.Option{guard.WithAccountPolicy(core.Policy{Window: time.Minute})},
			`guard: account policy: core: policy "login-account": Limit must be between 1 and 1000000000, got 0`, core.ErrInvalidPolicy},
		{"invalid IP policy", memory, []guard.Option{guard.WithIPPolicy(core.Policy{Limit: 5})},
			`guard: IP policy: core: policy "login-ip": Window must be between 1µs and 8784h0m0s, got 0s`, core.ErrInvalidPolicy},
		{"invalid pair policy", memory, []guard.Option{guard.WithAccountIPPolicy(core.Policy{Name: "x y", Limit: 5, Window: time.Minute})},
			`guard: account+IP policy: core: policy "x y": Name "x y" has " "; use letters, digits, '-', '_' or '.'`, core.ErrInvalidPolicy},
		{"lockout base zero", memory, []guard.Option{guard.WithLockout(0, time.Hour)},
			"guard: WithLockout(0s, 1h0m0s): base must be positive", nil},
		{"lockout max below base", memory, []guard.Option{guard.WithLockout(time.Hour, time.Minute)},
			"guard: WithLockout(1h0m0s, 1m0s): maxLock must be at least base", nil},
		{"lockout too long", memory, []guard.Option{guard.WithLockout(time.Hour, 200*24*time.Hour)},
			"guard: WithLockout(1h0m0s, 4800h0m0s): maxLock must be at most 4392h0m0s", nil},
		{"lockout not whole microseconds", memory, []guard.Option{guard.WithLockout(1500*time.Nanosecond, time.Hour)},
			"guard: WithLockout(1.5µs, 1h0m0s): base and maxLock must be whole microseconds", nil},
		{"lockout without a coarse enough tick", memory, []guard.Option{guard.WithLockout(7*time.Microsecond, 100*24*time.Hour+time.Microsecond)},
			"guard: WithLockout(7µs, 2400h0m0.000001s): core: NewLockout: For 7µs and Max 2400h0m0.000001s: the lock times need a common divisor of at least 8.64ms", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := guard.New(tc.newLimiter, tc.opts...)
			if g != nil || err == nil || err.Error() != tc.want {
				t.Fatalf("got %v, %v; want nil, %s", g, err, tc.want)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.wantIs)
			}
		})
	}
}

// A nil option is an error that names it, never a panic.
func TestNilOption(t *testing.T) {
	_, err := guard.New(func(p core.Policy) (core.Limiter, error) { return core.New(p) }, nil)
	if want := "guard: New: option 1 is nil"; err == nil || err.Error() != want {
		t.Errorf("New with a nil option: %v, want %s", err, want)
	}
	_, err = guard.New(func(p core.Policy) (core.Limiter, error) { return core.New(p) }, guard.WithClock(nil))
	if want := "guard: New: WithClock(nil): a clock is required"; err == nil || err.Error() != want {
		t.Errorf("New with WithClock(nil): %v, want %s", err, want)
	}
}

// onlyLimiter hides every method of a limiter but core.Limiter's.
type onlyLimiter struct{ core.Limiter }

// A limiter that cannot give units back is refused, bare or wrapped.
func TestNewRefusesNonRefunder(t *testing.T) {
	for name, wrap := range map[string]func(core.Limiter) (core.Limiter, error){
		"bare": func(l core.Limiter) (core.Limiter, error) { return onlyLimiter{l}, nil },
		"in a Failover": func(l core.Limiter) (core.Limiter, error) {
			return core.NewFailover(onlyLimiter{l}, core.WithErrorPolicy(core.FailClosed()))
		},
	} {
		t.Run(name, func(t *testing.T) {
			g, err := guard.New(func(p core.Policy) (core.Limiter, error) {
				m, err := core.New(p)
				if err != nil {
					return nil, err
				}
				return wrap(m)
			})
			if g != nil || err == nil || !strings.HasPrefix(err.Error(), "guard: account policy: ") ||
				!strings.HasSuffix(err.Error(), "cannot give attempts back (core.Refunder)") {
				t.Errorf("got %v, %v; want nil, guard: account policy: ... cannot give attempts back", g, err)
			}
		})
	}
}

// The defaults are values: changing one a caller got changes no Guard.
func TestDefaultPolicies(t *testing.T) {
	p := guard.DefaultAccountPolicy()
	p.Limit = 1000
	if got := guard.DefaultAccountPolicy().String(); got != "5/15m algorithm=sliding-log name=login-account" {
		t.Errorf("DefaultAccountPolicy() = %s", got)
	}
	if got := guard.DefaultIPPolicy().String(); got != "50/15m algorithm=sliding-log name=login-ip" {
		t.Errorf("DefaultIPPolicy() = %s", got)
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
	g, err := guard.New(func(p core.Policy) (core.Limiter, error) {
		m, err := core.New(p)
		b := &brokenLimiter{Memory: m}
		limiters = append(limiters, b)
		return b, err
	}, guard.WithAccountIPPolicy(core.Policy{Limit: 1, Window: time.Minute}), guard.WithLockout(time.Minute, time.Hour))
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
	if d.Allowed || !errors.Is(err, errBroken) || err.Error() != "guard: check lockout: core: lockout: store broken" {
		t.Errorf("Check: got %+v, %v", d, err)
	}
	d, err = g.Peek(ctx, ana, ipA)
	if d.Allowed || !errors.Is(err, errBroken) || err.Error() != "guard: peek lockout: core: lockout: store broken" {
		t.Errorf("Peek: got %+v, %v", d, err)
	}
	before := calls()
	err = g.Succeed(ctx, ok)
	if want := "guard: succeed ip: store broken"; !errors.Is(err, errBroken) || err.Error() != want || calls()-before != 6 {
		t.Errorf("Succeed: got %v after %d calls, want %s after 6", err, calls()-before, want)
	}
}

// The policies a Guard asks for: defaults, names, and the lockout's three.
func TestGuardPolicies(t *testing.T) {
	var got []string
	record := func(p core.Policy) (core.Limiter, error) {
		got = append(got, p.String())
		return core.New(p)
	}
	if _, err := guard.New(record,
		guard.WithAccountIPPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: time.Minute}),
		guard.WithLockout(time.Minute, time.Hour)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"5/15m algorithm=sliding-log name=login-account",
		"50/15m algorithm=sliding-log name=login-ip",
		"3/1m algorithm=sliding-log name=login-account-ip",
		"5/1h algorithm=sliding-log name=login-lockout-failures", // the account's Limit over max(1h, 15m)
		"7/14h name=login-lockout-level",                         // 1m 2m 4m 8m 16m 32m 1h, one a 2h
		"3600000/1h name=login-lockout",                          // 1 ms ticks
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("policies:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	got = nil
	if _, err := guard.New(record, guard.WithIPPolicy(core.Policy{Name: "ip", Limit: 100, Window: time.Hour}),
		guard.WithLockout(time.Hour, 300*time.Hour)); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"5/15m algorithm=sliding-log name=login-account",
		"100/1h name=ip",
		"5/300h algorithm=sliding-log name=login-lockout-failures",
		"10/250d name=login-lockout-level", // 1h … 256h, 300h, one a 600h
		"1080000/300h name=login-lockout",  // 1 s ticks
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("policies:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLimitString(t *testing.T) {
	for l, want := range map[guard.Limit]string{
		guard.ByNone: "none", guard.ByAccount: "account", guard.ByIP: "ip",
		guard.ByAccountIP: "account+ip", guard.ByLockout: "lockout", 9: "Limit(9)",
	} {
		if got := l.String(); got != want {
			t.Errorf("Limit(%d).String() = %q, want %q", l, got, want)
		}
	}
}

// Whatever an attacker does for 48 hours (guesses in turn or in parallel,
// as soon as allowed or after waits of its choosing), no hour sees more
// than 10 of its guesses checked on the default policies with
// WithLockout(time.Minute, time.Hour): 5 failures fill the last hour's,
// and each guess after them is checked alone and locks the account twice
// as long as the one before. guardtest's siege is the guesser that gets
// the most: 245.
func TestLockoutAnyStrategy(t *testing.T) {
	waits := []time.Duration{time.Microsecond, time.Second, time.Minute, 5 * time.Minute, 12 * time.Minute,
		15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour}
	for seed := range 400 {
		r := rand.New(rand.NewPCG(uint64(seed), 1))
		clock := core.NewManualClock(epoch)
		g := newMemoryGuard(t, clock, guard.WithClock(clock), guard.WithLockout(time.Minute, time.Hour))
		var at []time.Duration // when each checked guess came
		parallel, ip := 1+r.IntN(6), 0
		for clock.Now().Sub(epoch) < 48*time.Hour {
			var checked []guard.Decision
			var retry time.Duration
			for range 1 + r.IntN(parallel) { // checked together, told after
				ip++
				d, err := g.Check(ctx, ana, fmt.Sprint("10.0.0.", ip%250))
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					checked = append(checked, d)
					at = append(at, clock.Now().Sub(epoch))
				} else {
					retry = d.RetryAfter
				}
			}
			for _, d := range checked {
				if err := g.Fail(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
			switch {
			case retry > 0 && r.IntN(3) > 0:
				clock.Advance(retry)
			case r.IntN(2) == 0:
				clock.Advance(time.Duration(r.Int64N(int64(4 * time.Hour))).Truncate(time.Microsecond))
			default:
				clock.Advance(waits[r.IntN(len(waits))])
			}
		}
		for i, j := 0, 0; i < len(at); i++ {
			for at[i]-at[j] >= time.Hour {
				j++
			}
			if i-j+1 > 10 || len(at) > 245 {
				t.Fatalf("strategy %d: %d guesses checked in the hour from +%v, %d in all; want at most 10, 245", seed, i-j+1, at[j], len(at))
			}
		}
	}
}
