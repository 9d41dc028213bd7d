// Package guardtest is the conformance suite of the login
// [github.com/ratekit/ratekit/guard.Guard]: a store that a Guard's
// limiters may live on runs [Run] with a [Factory] that builds a Guard on
// it, and gets the Guard's every behaviour checked, step by step, on a
// manual clock.
package guardtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/guardcheck"
)

// Factory builds the [guard.Guard] under test with opts, its limiters on
// the store under test reading clock. It should fail t if it cannot.
type Factory func(t *testing.T, clock *core.ManualClock, opts ...guard.Option) *guard.Guard

// start is where the clocks of [Run] start.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var ctx = context.Background()

// Run checks the behaviours of a [guard.Guard] whose limiters live on one
// store: failures block the account from every IP and the IP across
// accounts, Check counts an attempt until it is told and Peek counts
// nothing, parallel attempts never get more password checks than the
// limit, a success clears the account but not the IP, RetryAfter is the
// largest of the blocking limits, the account+IP limit, and the growing
// lockout (doubling, capped, never permanent, holding while failures go
// on, falling back after quiet hours, reset by a success, and 48 hours of
// guessing getting 245 guesses checked, never more than 10 in an hour). Every store the Guard runs on passes it. Each
// scenario builds its Guard with newGuard on a fresh clock, passing
// [guard.WithClock] of that clock first among opts.
func Run(t *testing.T, newGuard Factory) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			opts := append([]guard.Option{guard.WithClock(clock)}, sc.opts...)
			guardcheck.RunSteps(t, clock, newGuard(t, clock, opts...), sc.steps)
		})
	}
	t.Run("parallel guesses", func(t *testing.T) {
		clock := core.NewManualClock(start)
		parallel(t, newGuard(t, clock, guard.WithClock(clock)))
	})
	t.Run("48 hours of guessing from 250 addresses", func(t *testing.T) {
		clock := core.NewManualClock(start)
		siege(t, clock, newGuard(t, clock, guard.WithClock(clock), guard.WithLockout(time.Minute, time.Hour)))
	})
}

// siege guesses one account's password for 48 hours, from 250 addresses
// in turn, each guess as soon as the Guard allows one, on the default
// policies and WithLockout(time.Minute, time.Hour): 10 guesses are
// checked in the first hour (5, then one after each lock of 1, 2, 4, 8
// and 16 minutes, the first hidden by the account's 15 minutes), then 5
// an hour, the lock staying at an hour: 245 in all, and never more than
// 10 in any hour.
func siege(t *testing.T, clock *core.ManualClock, g *guard.Guard) {
	const (
		span  = 48 * time.Hour
		total = 10 + 47*5
	)
	began := clock.Now()
	var at []time.Duration // when each checked guess came
	for i := 0; ; i++ {
		d, err := g.Check(ctx, ana, fmt.Sprintf("10.0.%d.%d", i%250/100, i%250%100))
		if err != nil {
			t.Fatalf("check at +%v: %v", clock.Now().Sub(began), err)
		}
		if d.Allowed {
			at = append(at, clock.Now().Sub(began))
			if err := g.Fail(ctx, d); err != nil {
				t.Fatalf("fail at +%v: %v", clock.Now().Sub(began), err)
			}
			continue
		}
		if clock.Now().Sub(began)+d.RetryAfter >= span {
			break
		}
		clock.Advance(d.RetryAfter)
	}
	perHour := make([]int, span/time.Hour)
	for _, a := range at {
		perHour[a/time.Hour]++
	}
	for h, n := range perHour {
		want := 5
		if h == 0 {
			want = 10
		}
		if n != want {
			t.Errorf("hour %d: %d guesses checked, want %d (per hour: %v)", h, n, want, perHour)
			break
		}
	}
	// Any hour, not only the clock's: the most guesses in [a, a+1h).
	most, from := 0, time.Duration(0)
	for i, j := 0, 0; i < len(at); i++ {
		for at[i]-at[j] >= time.Hour {
			j++
		}
		if i-j+1 > most {
			most, from = i-j+1, at[j]
		}
	}
	if most > 10 || len(at) != total {
		t.Errorf("%d guesses checked in 48 hours, at most %d in the hour from +%v; want %d, at most 10", len(at), most, from, total)
	}
}

// parallel sends 40 attempts on one account at once, 39 wrong and one
// right, and tells their outcomes only once every Check has returned, as
// slow password checks would: at most the account's 5 may be allowed, the
// right password included or not.
func parallel(t *testing.T, g *guard.Guard) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	decisions := make([]guard.Decision, 40)
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

var allowed = guard.Decision{Allowed: true}

func blocked(retry time.Duration, by guard.Limit) guard.Decision {
	return guard.Decision{RetryAfter: retry, BlockedBy: by}
}

// lockoutRounds fails account n times per round, checks that the round
// locks it for each wait in turn, and waits it out.
func lockoutRounds(account, ip string, n int, by guard.Limit, waits ...time.Duration) []guardcheck.Step {
	var steps []guardcheck.Step
	for _, w := range waits {
		steps = append(steps,
			guardcheck.Step{Op: guardcheck.Fail, Account: account, IP: ip, N: n},
			guardcheck.Step{Op: guardcheck.Peek, Account: account, IP: ip, Want: blocked(w, by)},
			guardcheck.Step{Advance: w, Op: guardcheck.Peek, Account: account, IP: ip, Want: allowed},
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
var shortWindow = guard.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 10 * time.Second})

// scenarios are the Guard's behaviours, which [Run] checks on
// every store.
var scenarios = []struct {
	name  string
	opts  []guard.Option
	steps []guardcheck.Step
}{
	{"5 failures block the account from every IP for 15m", nil, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 4},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed},
		{Op: guardcheck.Fail, Account: ana, IP: ipA},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(15*time.Minute, guard.ByAccount)},
		{Op: guardcheck.Peek, Account: ana, IP: ipB, Want: blocked(15*time.Minute, guard.ByAccount)},
		{Op: guardcheck.Peek, Account: bob, IP: ipA, Want: allowed},
		{Advance: 15*time.Minute - time.Microsecond, Op: guardcheck.Peek, Account: ana, IP: ipB, Want: blocked(time.Microsecond, guard.ByAccount)},
		{Advance: time.Microsecond, Op: guardcheck.Peek, Account: ana, IP: ipB, Want: allowed},
	}},
	{"50 failures from one IP over 50 accounts block the IP only", nil, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: user, IP: ipA, N: 49},
		{Op: guardcheck.Peek, Account: "user50@example.com", IP: ipA, Want: allowed},
		{Op: guardcheck.Fail, Account: "user49@example.com", IP: ipA},
		{Op: guardcheck.Peek, Account: "user50@example.com", IP: ipA, Want: blocked(15*time.Minute, guard.ByIP)},
		{Op: guardcheck.Peek, Account: user, IP: ipA, N: 50, Want: blocked(15*time.Minute, guard.ByIP)},
		{Op: guardcheck.Peek, Account: user, IP: ipB, N: 50, Want: allowed},
		{Advance: 15 * time.Minute, Op: guardcheck.Peek, Account: "user50@example.com", IP: ipA, Want: allowed},
	}},
	{"peek counts nothing", nil, []guardcheck.Step{
		{Op: guardcheck.Peek, Account: ana, IP: ipA, N: 100, Want: allowed},
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 4},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, N: 100, Want: allowed},
		{Op: guardcheck.Fail, Account: ana, IP: ipA},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(15*time.Minute, guard.ByAccount)},
	}},
	{"a check counts its attempt until it is told", nil, []guardcheck.Step{
		{Op: guardcheck.Check, Account: ana, IP: ipA, N: 5, Want: allowed},
		{Op: guardcheck.Check, Account: ana, IP: ipB, Want: blocked(15*time.Minute, guard.ByAccount)},
		{Op: guardcheck.Succeed, Account: bob, IP: ipA, N: 45},
		{Op: guardcheck.Peek, Account: bob, IP: ipA, Want: allowed},
	}},
	{"a blocked check counts nothing anywhere", []guard.Option{
		guard.WithIPPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 2, Window: time.Minute}),
	}, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 2},
		{Op: guardcheck.Check, Account: bob, IP: ipA, N: 10, Want: blocked(time.Minute, guard.ByIP)},
		// bob's account holds none of the 10: 5 failures from elsewhere
		// still fit.
		{Op: guardcheck.Fail, Account: bob, IP: ipB, N: 2},
		{Op: guardcheck.Fail, Account: bob, IP: "192.0.2.1", N: 2},
		{Op: guardcheck.Peek, Account: bob, IP: "192.0.2.2", Want: allowed},
		{Op: guardcheck.Fail, Account: bob, IP: "192.0.2.2"},
		{Op: guardcheck.Peek, Account: bob, IP: "192.0.2.3", Want: blocked(15*time.Minute, guard.ByAccount)},
	}},
	{"success clears the account's failures", nil, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 4},
		{Advance: time.Minute, Op: guardcheck.Succeed, Account: ana, IP: ipA},
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 4},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed},
		{Op: guardcheck.Fail, Account: ana, IP: ipA},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(15*time.Minute, guard.ByAccount)},
	}},
	{"success leaves the IP's failures", nil, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: user, IP: ipA, N: 49},
		{Op: guardcheck.Succeed, Account: user, IP: ipA, N: 49},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed},
		{Op: guardcheck.Fail, Account: ana, IP: ipA},
		{Op: guardcheck.Peek, Account: bob, IP: ipA, Want: blocked(15*time.Minute, guard.ByIP)},
	}},
	{"retry-after is the largest of the blocking limits", nil, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: user, IP: ipA, N: 45},
		{Advance: 5 * time.Minute, Op: guardcheck.Fail, Account: ana, IP: ipA, N: 5},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(15*time.Minute, guard.ByAccount)},
		{Op: guardcheck.Peek, Account: bob, IP: ipA, Want: blocked(10*time.Minute, guard.ByIP)},
		{Advance: 5 * time.Minute, Op: guardcheck.Fail, Account: "other%d@example.com", IP: ipB, N: 50},
		{Op: guardcheck.Peek, Account: ana, IP: ipB, Want: blocked(15*time.Minute, guard.ByIP)},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(10*time.Minute, guard.ByAccount)}, // a tie: the account's
		{Advance: 6 * time.Minute, Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(4*time.Minute, guard.ByAccount)},
	}},
	{"account+IP limit", []guard.Option{
		guard.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 20, Window: 15 * time.Minute}),
		guard.WithAccountIPPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 15 * time.Minute}),
	}, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 3},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(15*time.Minute, guard.ByAccountIP)},
		{Op: guardcheck.Peek, Account: ana, IP: ipB, Want: allowed},
		{Op: guardcheck.Peek, Account: bob, IP: ipA, Want: allowed},
		{Op: guardcheck.Succeed, Account: ana, IP: ipB},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(15*time.Minute, guard.ByAccountIP)},
		{Op: guardcheck.Succeed, Account: ana, IP: ipA}, // blocked: never checked
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(15*time.Minute, guard.ByAccountIP)},
		{Advance: 15 * time.Minute, Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed},
	}},
	{"lockout doubles and caps, never permanent", []guard.Option{shortWindow, guard.WithLockout(time.Minute, time.Hour)},
		append(lockoutRounds(ana, ipA, 3, guard.ByLockout,
			time.Minute, 2*time.Minute, 4*time.Minute, 8*time.Minute, 16*time.Minute, 32*time.Minute, time.Hour, time.Hour, time.Hour),
			guardcheck.Step{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 2},
			guardcheck.Step{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed},
			guardcheck.Step{Op: guardcheck.Fail, Account: ana, IP: ipA},
			guardcheck.Step{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(time.Hour, guard.ByLockout)},
			guardcheck.Step{Advance: time.Hour - time.Microsecond, Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(time.Microsecond, guard.ByLockout)},
			guardcheck.Step{Advance: time.Microsecond, Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed},
		)},
	{"lockout on the default limits: after 5 failures, one per lock until the hour's are forgotten", []guard.Option{guard.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 5, guard.ByAccount, 15*time.Minute), // the first lock, 1m, hidden
			// 5 failures in the last hour: each one locks (the others wait).
			lockoutRounds(ana, ipB, 5, guard.ByLockout, 2*time.Minute, 4*time.Minute, 8*time.Minute, 16*time.Minute, 32*time.Minute)...),
			// At +77m the first 5 are forgotten: 5 again, then an hour.
			lockoutRounds(ana, ipA, 5, guard.ByLockout, time.Hour, time.Hour)...)},
	{"staying under the account's limit still locks", []guard.Option{guard.WithLockout(time.Minute, time.Hour)}, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 4},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed},
		{Advance: 15 * time.Minute, Op: guardcheck.Fail, Account: ana, IP: ipA, N: 4}, // the hour's 5th locks; the rest wait
		{Op: guardcheck.Peek, Account: ana, IP: ipB, Want: blocked(time.Minute, guard.ByLockout)},
		{Advance: time.Minute, Op: guardcheck.Fail, Account: ana, IP: ipA, N: 4},
		{Op: guardcheck.Peek, Account: ana, IP: ipB, Want: blocked(2*time.Minute, guard.ByLockout)},
	}},
	{"lockout level holds while the failures go on", []guard.Option{shortWindow, guard.WithLockout(time.Minute, time.Hour)},
		// Past the first lockout's day: every lock an hour.
		lockoutRounds(ana, ipA, 3, guard.ByLockout, append([]time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute},
			slices.Repeat([]time.Duration{time.Hour}, 30)...)...)},
	{"lockout level falls back a step per 2 hours without a lockout", []guard.Option{shortWindow, guard.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 3, guard.ByLockout, time.Minute, 2*time.Minute, 4*time.Minute, 8*time.Minute, 16*time.Minute, 32*time.Minute, time.Hour, time.Hour, time.Hour),
			guardcheck.Step{Advance: 4 * time.Hour, Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed}),
			lockoutRounds(ana, ipA, 3, guard.ByLockout, 16*time.Minute, 32*time.Minute, time.Hour)...)},
	{"lockout level forgotten after a quiet day", []guard.Option{shortWindow, guard.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 3, guard.ByLockout, time.Minute, 2*time.Minute, 4*time.Minute),
			guardcheck.Step{Advance: 24 * time.Hour, Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed}),
			lockoutRounds(ana, ipA, 3, guard.ByLockout, time.Minute, 2*time.Minute)...)},
	{"success resets the lockout level", []guard.Option{shortWindow, guard.WithLockout(time.Minute, time.Hour)},
		append(append(lockoutRounds(ana, ipA, 3, guard.ByLockout, time.Minute, 2*time.Minute, 4*time.Minute),
			guardcheck.Step{Op: guardcheck.Succeed, Account: ana, IP: ipA}),
			lockoutRounds(ana, ipA, 3, guard.ByLockout, time.Minute, 2*time.Minute)...)},
	{"attempts on a locked account count nothing", []guard.Option{shortWindow, guard.WithLockout(time.Minute, time.Hour)}, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 3},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(time.Minute, guard.ByLockout)},
		{Advance: 30 * time.Second, Op: guardcheck.Fail, Account: ana, IP: ipA, N: 3},
		{Op: guardcheck.Check, Account: ana, IP: ipB, Want: blocked(30*time.Second, guard.ByLockout)},
		{Advance: 30 * time.Second, Op: guardcheck.Peek, Account: ana, IP: ipA, Want: allowed},
		{Op: guardcheck.Fail, Account: ana, IP: ipA, N: 3},
		{Op: guardcheck.Peek, Account: ana, IP: ipA, Want: blocked(2*time.Minute, guard.ByLockout)},
	}},
	{"accounts are counted whether they exist or not", nil, []guardcheck.Step{
		{Op: guardcheck.Fail, Account: "nobody@example.com", IP: ipA, N: 5},
		{Op: guardcheck.Peek, Account: "nobody@example.com", IP: ipB, Want: blocked(15*time.Minute, guard.ByAccount)},
	}},
}
