package guard_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

// A login handler's use of a Guard, on a manual clock. Five wrong
// passwords block the account for 15 minutes, from every address and
// whatever the password; a success clears its count.
func ExampleGuard() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	g, err := guard.New(func(p core.Policy) (core.Limiter, error) {
		return core.New(p, core.WithClock(clock)) // or redisstore.New(client, p)
	}, guard.WithClock(clock))
	if err != nil {
		panic(err)
	}
	login := func(account, ip string, passwordOK bool) string {
		d, err := g.Check(ctx, account, ip)
		switch {
		case err != nil:
			return "503"
		case !d.Allowed:
			return fmt.Sprintf("429 (%v, retry in %v)", d.BlockedBy, d.RetryAfter)
		case !passwordOK:
			g.Fail(ctx, d)
			return "401"
		}
		g.Succeed(ctx, d)
		return "200"
	}

	var got []string
	for range 5 {
		got = append(got, login("ana@example.com", "203.0.113.7", false))
	}
	fmt.Println(strings.Join(got, " "))
	fmt.Println(login("ana@example.com", "198.51.100.9", true))
	clock.Advance(15 * time.Minute)
	fmt.Println(login("ana@example.com", "198.51.100.9", true))
	// Output:
	// 401 401 401 401 401
	// 429 (account, retry in 15m0s)
	// 200
}

// With a growing lockout, each time the account reaches its limit it is
// locked twice as long as the time before, up to the maximum. Here the
// account's own window (3 failures in 10 seconds) is short, so each lock
// shows as it is.
func ExampleWithLockout() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	g, err := guard.New(func(p core.Policy) (core.Limiter, error) {
		return core.New(p, core.WithClock(clock))
	},
		guard.WithClock(clock),
		guard.WithAccountPolicy(core.Policy{Algorithm: core.SlidingLog, Limit: 3, Window: 10 * time.Second}),
		guard.WithLockout(time.Minute, time.Hour))
	if err != nil {
		panic(err)
	}
	var locks []string
	for range 8 {
		for range 3 {
			d, _ := g.Check(ctx, "ana@example.com", "203.0.113.7")
			g.Fail(ctx, d)
		}
		d, _ := g.Peek(ctx, "ana@example.com", "203.0.113.7")
		locks = append(locks, d.RetryAfter.String())
		clock.Advance(d.RetryAfter)
	}
	fmt.Println(strings.Join(locks, " "))
	// Output: 1m0s 2m0s 4m0s 8m0s 16m0s 32m0s 1h0m0s 1h0m0s
}
