package limitertest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// NewGuard builds the [core.Guard] under test with opts, its limiters on
// the store under test reading clock. It should fail t if it cannot.
type NewGuard func(t *testing.T, clock *core.ManualClock, opts ...core.GuardOption) *core.Guard

// RunGuard checks the behaviours of a [core.Guard] whose limiters live on
// one store: failures block the account from every IP and the IP across
// accounts, Check counts an attempt until it is told and Peek counts
// nothing, parallel attempts never get more password checks than the
// limit, a success clears the account but not the IP, RetryAfter is the largest of the blocking limits, the account+IP
// limit, and the growing lockout (doubling, capped, never permanent,
// forgotten after a quiet day, reset by a success). Every store the Guard
// runs on passes it.
func RunGuard(t *testing.T, newGuard NewGuard) {
	for _, sc := range guardScenarios {
		t.Run(sc.name, func(t *testing.T) {
			clock := core.NewManualClock(Start)
			opts := append([]core.GuardOption{core.GuardClock(clock)}, sc.opts...)
			RunGuardSteps(t, clock, newGuard(t, clock, opts...), sc.steps)
		})
	}
	t.Run("parallel guesses", func(t *testing.T) {
		clock := core.NewManualClock(Start)
		guardParallel(t, newGuard(t, clock, core.GuardClock(clock)))
	})
}

// guardParallel sends 40 attempts on one account at once, 39 wrong and one
// right, and tells their outcomes only once every Check has returned, as
// slow password checks would: at most the account's 5 may be allowed, the
// right password included or not.
func guardParallel(t *testing.T, g *core.Guard) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	decisions := make([]core.GuardDecision, 40)
	for i := range decisions {
		wg.Go(func() {
			<-start
			d, err := g.Check(ctx, ana, fmt.Sprintf("203.0.113.%d", i))
			if err != nil {
				t.Errorf("check: %v", err)
			}
			decisions[i] = d
		})
	}
	close(start)
	wg.Wait()
	checked := 0
	for i, d := range decisions {
		if !d.Allowed {
			continue
		}
		checked++
		var err error
		if i == len(decisions)-1 {
			err = g.Succeed(ctx, d)
		} else {
			err = g.Fail(ctx, d)
		}
		if err != nil {
			t.Errorf("outcome: %v", err)
		}
	}
	if checked != 5 {
		t.Errorf("%d of 40 parallel attempts were allowed to check a password, want 5", checked)
	}
}

// GuardOp is what a [GuardStep] does.
type GuardOp uint8

// The steps of a Guard step table.
const (
	// GuardPeek calls Peek, which must decide the step's Want.
	GuardPeek GuardOp = iota
	// GuardCheck calls Check, which must decide Want; the attempt's
	// outcome is never told.
	GuardCheck
	// GuardFail calls Check and, if it allowed the attempt, Fail.
	GuardFail
	// GuardSucceed calls Check and, if it allowed the attempt, Succeed.
	GuardSucceed
)

// String returns "peek", "check", "fail" or "succeed".
func (o GuardOp) String() string { return [...]string{"peek", "check", "fail", "succeed"}[o] }

// GuardStep is one step of a Guard step table: move the clock by Advance,
// then run Op N times (at least once) for Account and IP; "%d" in Account
// is replaced by 0, 1, … N-1. A peek or a check must decide Want.
type GuardStep struct {
	Advance time.Duration
	Op      GuardOp
	Account string
	IP      string
	N       int
	Want    core.GuardDecision
}

var guardAllowed = core.GuardDecision{Allowed: true}

func guardBlocked(retry time.Duration, by core.GuardLimit) core.GuardDecision {
	return core.GuardDecision{RetryAfter: retry, BlockedBy: by}
}

// RunGuardSteps runs steps against g, whose limiters read clock, and fails
// t at the first step that errs or decides other than wanted.
func RunGuardSteps(t *testing.T, clock *core.ManualClock, g *core.Guard, steps []GuardStep) {
	t.Helper()
	for i, s := range steps {
		clock.Advance(s.Advance)
		for j := range max(s.N, 1) {
			account := s.Account
			if strings.Contains(account, "%d") {
				account = fmt.Sprintf(account, j)
			}
			var got core.GuardDecision
			var err error
			if s.Op == GuardPeek {
				got, err = g.Peek(ctx, account, s.IP)
			} else {
				got, err = g.Check(ctx, account, s.IP)
			}
			switch {
			case err != nil:
			case s.Op == GuardPeek || s.Op == GuardCheck:
				if got.Allowed != s.Want.Allowed || got.RetryAfter != s.Want.RetryAfter || got.BlockedBy != s.Want.BlockedBy {
					t.Fatalf("step %d (at +%v): %v(%q, %q) = %+v, want %+v",
						i, clock.Now().Sub(Start), s.Op, account, s.IP, got, s.Want)
				}
			case s.Op == GuardFail:
				err = g.Fail(ctx, got)
			case s.Op == GuardSucceed:
				err = g.Succeed(ctx, got)
			}
			if err != nil {
				t.Fatalf("step %d: %v(%q, %q): %v", i, s.Op, account, s.IP, err)
			}
		}
	}
}

// lockoutRounds fails account n times per round, checks that the round
// locks it for each wait in turn, and waits it out.
func lockoutRounds(account, ip string, n int, by core.GuardLimit, waits ...time.Duration) []GuardStep {
	var steps []GuardStep
	for _, w := range waits {
		steps = append(steps,
			GuardStep{Op: GuardFail, Account: account, IP: ip, N: n},
			GuardStep{Op: GuardPeek, Account: account, IP: ip, Want: guardBlocked(w, by)},
			GuardStep{Advance: w, Op: GuardPeek, Account: account, IP: ip, Want: guardAllowed},
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

// guardScenarios are the Guard's behaviours, which [RunGuard] checks on
// every store.
var guardScenarios = []struct {
	name  string
	opts  []core.GuardOption
	steps []GuardStep
}{
	{"5 failures block the account from every IP for 15m", nil, []GuardStep{
		{Op: GuardFail, Account: ana, IP: ipA, N: 4},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardAllowed},
		{Op: GuardFail, Account: ana, IP: ipA},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(15*time.Minute, core.GuardAccount)},
		{Op: GuardPeek, Account: ana, IP: ipB, Want: guardBlocked(15*time.Minute, core.GuardAccount)},
		{Op: GuardPeek, Account: bob, IP: ipA, Want: guardAllowed},
		{Advance: 15*time.Minute - time.Microsecond, Op: GuardPeek, Account: ana, IP: ipB, Want: guardBlocked(time.Microsecond, core.GuardAccount)},
		{Advance: time.Microsecond, Op: GuardPeek, Account: ana, IP: ipB, Want: guardAllowed},
	}},
	{"50 failures from one IP over 50 accounts block the IP only", nil, []GuardStep{
		{Op: GuardFail, Account: user, IP: ipA, N: 49},
		{Op: GuardPeek, Account: "user50@example.com", IP: ipA, Want: guardAllowed},
		{Op: GuardFail, Account: "user49@example.com", IP: ipA},
		{Op: GuardPeek, Account: "user50@example.com", IP: ipA, Want: guardBlocked(15*time.Minute, core.GuardIP)},
		{Op: GuardPeek, Account: user, IP: ipA, N: 50, Want: guardBlocked(15*time.Minute, core.GuardIP)},
		{Op: GuardPeek, Account: user, IP: ipB, N: 50, Want: guardAllowed},
		{Advance: 15 * time.Minute, Op: GuardPeek, Account: "user50@example.com", IP: ipA, Want: guardAllowed},
	}},
	{"peek counts nothing", nil, []GuardStep{
		{Op: GuardPeek, Account: ana, IP: ipA, N: 100, Want: guardAllowed},
		{Op: GuardFail, Account: ana, IP: ipA, N: 4},
		{Op: GuardPeek, Account: ana, IP: ipA, N: 100, Want: guardAllowed},
		{Op: GuardFail, Account: ana, IP: ipA},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(15*time.Minute, core.GuardAccount)},
	}},
	{"a check counts its attempt until it is told", nil, []GuardStep{
		{Op: GuardCheck, Account: ana, IP: ipA, N: 5, Want: guardAllowed},
		{Op: GuardCheck, Account: ana, IP: ipB, Want: guardBlocked(15*time.Minute, core.GuardAccount)},
		{Op: GuardSucceed, Account: bob, IP: ipA, N: 45},
		{Op: GuardPeek, Account: bob, IP: ipA, Want: guardAllowed},
	}},
	{"a blocked check counts nothing anywhere", []core.GuardOption{
		core.WithIPPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 2, Window: time.Minute}),
	}, []GuardStep{
		{Op: GuardFail, Account: ana, IP: ipA, N: 2},
		{Op: GuardCheck, Account: bob, IP: ipA, N: 10, Want: guardBlocked(time.Minute, core.GuardIP)},
		// bob's account holds none of the 10: 5 failures from elsewhere
		// still fit.
		{Op: GuardFail, Account: bob, IP: ipB, N: 2},
		{Op: GuardFail, Account: bob, IP: "192.0.2.1", N: 2},
		{Op: GuardPeek, Account: bob, IP: "192.0.2.2", Want: guardAllowed},
		{Op: GuardFail, Account: bob, IP: "192.0.2.2"},
		{Op: GuardPeek, Account: bob, IP: "192.0.2.3", Want: guardBlocked(15*time.Minute, core.GuardAccount)},
	}},
	{"success clears the account's failures", nil, []GuardStep{
		{Op: GuardFail, Account: ana, IP: ipA, N: 4},
		{Advance: time.Minute, Op: GuardSucceed, Account: ana, IP: ipA},
		{Op: GuardFail, Account: ana, IP: ipA, N: 4},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardAllowed},
		{Op: GuardFail, Account: ana, IP: ipA},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(15*time.Minute, core.GuardAccount)},
	}},
	{"success leaves the IP's failures", nil, []GuardStep{
		{Op: GuardFail, Account: user, IP: ipA, N: 49},
		{Op: GuardSucceed, Account: user, IP: ipA, N: 49},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardAllowed},
		{Op: GuardFail, Account: ana, IP: ipA},
		{Op: GuardPeek, Account: bob, IP: ipA, Want: guardBlocked(15*time.Minute, core.GuardIP)},
	}},
	{"retry-after is the largest of the blocking limits", nil, []GuardStep{
		{Op: GuardFail, Account: user, IP: ipA, N: 45},
		{Advance: 5 * time.Minute, Op: GuardFail, Account: ana, IP: ipA, N: 5},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(15*time.Minute, core.GuardAccount)},
		{Op: GuardPeek, Account: bob, IP: ipA, Want: guardBlocked(10*time.Minute, core.GuardIP)},
		{Advance: 5 * time.Minute, Op: GuardFail, Account: "other%d@example.com", IP: ipB, N: 50},
		{Op: GuardPeek, Account: ana, IP: ipB, Want: guardBlocked(15*time.Minute, core.GuardIP)},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(10*time.Minute, core.GuardAccount)}, // a tie: the account's
		{Advance: 6 * time.Minute, Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(4*time.Minute, core.GuardAccount)},
	}},
	{"account+IP limit", []core.GuardOption{
		core.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 20, Window: 15 * time.Minute}),
		core.WithAccountIPPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 15 * time.Minute}),
	}, []GuardStep{
		{Op: GuardFail, Account: ana, IP: ipA, N: 3},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(15*time.Minute, core.GuardAccountIP)},
		{Op: GuardPeek, Account: ana, IP: ipB, Want: guardAllowed},
		{Op: GuardPeek, Account: bob, IP: ipA, Want: guardAllowed},
		{Op: GuardSucceed, Account: ana, IP: ipB},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(15*time.Minute, core.GuardAccountIP)},
		{Op: GuardSucceed, Account: ana, IP: ipA}, // blocked: never checked
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(15*time.Minute, core.GuardAccountIP)},
		{Advance: 15 * time.Minute, Op: GuardPeek, Account: ana, IP: ipA, Want: guardAllowed},
	}},
	{"lockout doubles and caps, never permanent", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)},
		append(lockoutRounds(ana, ipA, 3, core.GuardLockout,
			time.Minute, 2*time.Minute, 4*time.Minute, 8*time.Minute, 16*time.Minute, 32*time.Minute, time.Hour, time.Hour, time.Hour),
			GuardStep{Op: GuardFail, Account: ana, IP: ipA, N: 2},
			GuardStep{Op: GuardPeek, Account: ana, IP: ipA, Want: guardAllowed},
			GuardStep{Op: GuardFail, Account: ana, IP: ipA},
			GuardStep{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(time.Hour, core.GuardLockout)},
			GuardStep{Advance: time.Hour - time.Microsecond, Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(time.Microsecond, core.GuardLockout)},
			GuardStep{Advance: time.Microsecond, Op: GuardPeek, Account: ana, IP: ipA, Want: guardAllowed},
		)},
	{"lockout on the default limits shows past 15m", []core.GuardOption{core.WithLockout(time.Minute, time.Hour)},
		append(lockoutRounds(ana, ipA, 5, core.GuardAccount, 15*time.Minute, 15*time.Minute, 15*time.Minute, 15*time.Minute),
			lockoutRounds(ana, ipB, 5, core.GuardLockout, 16*time.Minute, 32*time.Minute, time.Hour, time.Hour)...)},
	{"lockout level counts the last 24 hours", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute, 4*time.Minute), // locks at +0, +1m, +3m
			// At +24h1m the first two are forgotten, at +24h3m the third.
			GuardStep{Advance: 24*time.Hour - 6*time.Minute, Op: GuardPeek, Account: ana, IP: ipA, Want: guardAllowed}),
			lockoutRounds(ana, ipA, 3, core.GuardLockout, 2*time.Minute, 2*time.Minute, 4*time.Minute)...)},
	{"lockout level forgotten after a quiet day", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute, 4*time.Minute),
			GuardStep{Advance: 24 * time.Hour, Op: GuardPeek, Account: ana, IP: ipA, Want: guardAllowed}),
			lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute)...)},
	{"success resets the lockout level", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute, 4*time.Minute),
			GuardStep{Op: GuardSucceed, Account: ana, IP: ipA}),
			lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute)...)},
	{"attempts on a locked account count nothing", []core.GuardOption{shortWindow, core.WithLockout(time.Minute, time.Hour)}, []GuardStep{
		{Op: GuardFail, Account: ana, IP: ipA, N: 3},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(time.Minute, core.GuardLockout)},
		{Advance: 30 * time.Second, Op: GuardFail, Account: ana, IP: ipA, N: 3},
		{Op: GuardCheck, Account: ana, IP: ipB, Want: guardBlocked(30*time.Second, core.GuardLockout)},
		{Advance: 30 * time.Second, Op: GuardPeek, Account: ana, IP: ipA, Want: guardAllowed},
		{Op: GuardFail, Account: ana, IP: ipA, N: 3},
		{Op: GuardPeek, Account: ana, IP: ipA, Want: guardBlocked(2*time.Minute, core.GuardLockout)},
	}},
	{"accounts are counted whether they exist or not", nil, []GuardStep{
		{Op: GuardFail, Account: "nobody@example.com", IP: ipA, N: 5},
		{Op: GuardPeek, Account: "nobody@example.com", IP: ipB, Want: guardBlocked(15*time.Minute, core.GuardAccount)},
	}},
}
