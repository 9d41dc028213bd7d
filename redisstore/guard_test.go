package redisstore

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

// The core.Guard scenarios of core/guard_test.go on Redis: the Guard's
// limiters are Redis limiters reading a manual clock, on a single node and
// on a Cluster, so that every server sharing the Redis shares the counts.

var guardStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// newRedisGuard returns a Guard on Redis limiters with their own prefix.
func newRedisGuard(t *testing.T, client redis.UniversalClient, prefix string, clock *core.ManualClock, opts ...core.GuardOption) *core.Guard {
	t.Helper()
	g, err := core.NewGuard(func(p core.Policy) (core.Limiter, error) {
		return New(client, p, WithClock(clock), WithPrefix(prefix))
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

var guardAllowed = core.GuardDecision{Allowed: true}

func guardBlocked(retry time.Duration, by core.GuardLimit) core.GuardDecision {
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
			guardStep{op: opCheck, account: account, ip: ip, want: guardBlocked(w, by)},
			guardStep{advance: w, op: opCheck, account: account, ip: ip, want: guardAllowed},
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

var (
	shortWindow = core.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 10 * time.Second})
	lockout     = core.WithLockout(time.Minute, time.Hour)
)

var guardScenarios = []struct {
	name  string
	opts  []core.GuardOption
	steps []guardStep
}{
	{"5 failures block the account from every IP for 15m", nil, []guardStep{
		{op: opFail, account: ana, ip: ipA, n: 4},
		{op: opCheck, account: ana, ip: ipA, want: guardAllowed},
		{op: opFail, account: ana, ip: ipA},
		{op: opCheck, account: ana, ip: ipA, want: guardBlocked(15*time.Minute, core.GuardAccount)},
		{op: opCheck, account: ana, ip: ipB, want: guardBlocked(15*time.Minute, core.GuardAccount)},
		{op: opCheck, account: bob, ip: ipA, want: guardAllowed},
		{advance: 15*time.Minute - time.Microsecond, op: opCheck, account: ana, ip: ipB, want: guardBlocked(time.Microsecond, core.GuardAccount)},
		{advance: time.Microsecond, op: opCheck, account: ana, ip: ipB, want: guardAllowed},
	}},
	{"50 failures from one IP over 50 accounts block the IP only", nil, []guardStep{
		{op: opFail, account: user, ip: ipA, n: 50},
		{op: opCheck, account: "user50@example.com", ip: ipA, want: guardBlocked(15*time.Minute, core.GuardIP)},
		{op: opCheck, account: user, ip: ipB, n: 50, want: guardAllowed},
	}},
	{"check counts nothing", nil, []guardStep{
		{op: opCheck, account: ana, ip: ipA, n: 20, want: guardAllowed},
		{op: opFail, account: ana, ip: ipA, n: 4},
		{op: opCheck, account: ana, ip: ipA, n: 20, want: guardAllowed},
	}},
	{"success clears the account, not the IP", nil, []guardStep{
		{op: opFail, account: ana, ip: ipA, n: 4},
		{op: opSucceed, account: ana, ip: ipA},
		{op: opFail, account: ana, ip: ipA, n: 4},
		{op: opCheck, account: ana, ip: ipA, want: guardAllowed},
		{op: opFail, account: user, ip: ipA, n: 42}, // the IP's 50th failure
		{op: opCheck, account: bob, ip: ipA, want: guardBlocked(15*time.Minute, core.GuardIP)},
	}},
	{"retry-after is the largest of the blocking limits", nil, []guardStep{
		{op: opFail, account: user, ip: ipA, n: 45},
		{advance: 5 * time.Minute, op: opFail, account: ana, ip: ipA, n: 5},
		{op: opCheck, account: ana, ip: ipA, want: guardBlocked(15*time.Minute, core.GuardAccount)},
		{op: opCheck, account: bob, ip: ipA, want: guardBlocked(10*time.Minute, core.GuardIP)},
	}},
	{"account+IP limit", []core.GuardOption{
		core.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 20, Window: 15 * time.Minute}),
		core.WithAccountIPPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 15 * time.Minute}),
	}, []guardStep{
		{op: opFail, account: ana, ip: ipA, n: 3},
		{op: opCheck, account: ana, ip: ipA, want: guardBlocked(15*time.Minute, core.GuardAccountIP)},
		{op: opCheck, account: ana, ip: ipB, want: guardAllowed},
		{op: opSucceed, account: ana, ip: ipA},
		{op: opCheck, account: ana, ip: ipA, want: guardAllowed},
	}},
	{"lockout doubles and caps, never permanent", []core.GuardOption{shortWindow, lockout},
		append(lockoutRounds(ana, ipA, 3, core.GuardLockout,
			time.Minute, 2*time.Minute, 4*time.Minute, 8*time.Minute, 16*time.Minute, 32*time.Minute, time.Hour, time.Hour),
			guardStep{op: opFail, account: ana, ip: ipA, n: 3},
			guardStep{advance: time.Hour - time.Microsecond, op: opCheck, account: ana, ip: ipA, want: guardBlocked(time.Microsecond, core.GuardLockout)},
			guardStep{advance: time.Microsecond, op: opCheck, account: ana, ip: ipA, want: guardAllowed},
		)},
	{"lockout on the default limits shows past 15m", []core.GuardOption{lockout},
		append(lockoutRounds(ana, ipA, 5, core.GuardAccount, 15*time.Minute, 15*time.Minute, 15*time.Minute, 15*time.Minute),
			lockoutRounds(ana, ipB, 5, core.GuardLockout, 16*time.Minute, 32*time.Minute, time.Hour, time.Hour)...)},
	{"lockout level counts the last 24 hours", []core.GuardOption{shortWindow, lockout},
		append(append(lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute, 4*time.Minute),
			guardStep{advance: 24*time.Hour - 6*time.Minute, op: opCheck, account: ana, ip: ipA, want: guardAllowed}),
			lockoutRounds(ana, ipA, 3, core.GuardLockout, 2*time.Minute, 2*time.Minute, 4*time.Minute)...)},
	{"success resets the lockout level", []core.GuardOption{shortWindow, lockout},
		append(append(lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute, 2*time.Minute, 4*time.Minute),
			guardStep{op: opSucceed, account: ana, ip: ipA}),
			lockoutRounds(ana, ipA, 3, core.GuardLockout, time.Minute)...)},
	{"a running lock is extended to the next level, to the tick", []core.GuardOption{shortWindow, lockout}, []guardStep{
		{op: opFail, account: ana, ip: ipA, n: 3},
		{advance: 30 * time.Second, op: opFail, account: ana, ip: ipA, n: 3},
		{op: opCheck, account: ana, ip: ipA, want: guardBlocked(2*time.Minute, core.GuardLockout)},
		{advance: 30*time.Second + 500*time.Microsecond, op: opFail, account: ana, ip: ipA, n: 3},
		{op: opCheck, account: ana, ip: ipA, want: guardBlocked(4*time.Minute+500*time.Microsecond, core.GuardLockout)},
	}},
}

func TestGuard(t *testing.T) {
	for _, store := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return newClient(t, singleNode(t)) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return newClusterClient(t, cluster(t)) }},
	} {
		t.Run(store.name, func(t *testing.T) {
			client := store.client(t)
			for _, sc := range guardScenarios {
				t.Run(sc.name, func(t *testing.T) {
					clock := core.NewManualClock(guardStart)
					g := newRedisGuard(t, client, uniquePrefix(t.Name()), clock, sc.opts...)
					runGuardSteps(t, clock, g, sc.steps)
				})
			}
		})
	}
}

// Two servers, each with its own client and Guard on one Redis, fail one
// account concurrently: exactly Limit failures count, and exactly one of
// them starts a lockout, seen by both servers.
func TestGuardAcrossServers(t *testing.T) {
	addr := singleNode(t)
	prefix := uniquePrefix(t.Name())
	clock := core.NewManualClock(guardStart)
	guards := []*core.Guard{
		newRedisGuard(t, newClient(t, addr), prefix, clock, shortWindow, lockout),
		newRedisGuard(t, newClient(t, addr), prefix, clock, shortWindow, lockout),
	}
	const workers = 16
	var start, done sync.WaitGroup
	start.Add(1)
	errs := make(chan error, workers)
	for i := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			errs <- guards[i%2].Fail(ctx, ana, fmt.Sprint("192.0.2.", i))
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
	for _, g := range guards {
		runGuardSteps(t, clock, g, []guardStep{
			{op: opCheck, account: ana, ip: ipA, want: guardBlocked(time.Minute, core.GuardLockout)},
		})
	}
	runGuardSteps(t, clock, guards[1], append([]guardStep{
		{advance: time.Minute, op: opCheck, account: ana, ip: ipA, want: guardAllowed},
	}, lockoutRounds(ana, ipA, 3, core.GuardLockout, 2*time.Minute)...))
}
