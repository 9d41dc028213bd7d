package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core"
)

var ctx = context.Background()

// A token bucket of 100 per minute on a manual clock: a burst of 100, then
// one request every 600 ms.
func ExampleNew() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, err := core.New(core.Policy{Limit: 100, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	allowed := 0
	for range 150 {
		if d, _ := limiter.Allow(ctx, "203.0.113.7"); d.Allowed {
			allowed++
		}
	}
	d, _ := limiter.Allow(ctx, "203.0.113.7")
	fmt.Printf("%d of 150 allowed; next in %v\n", allowed, d.RetryAfter)

	clock.Advance(d.RetryAfter)
	d, _ = limiter.Allow(ctx, "203.0.113.7")
	fmt.Println("after waiting:", d.Allowed)
	// Output:
	// 100 of 150 allowed; next in 600ms
	// after waiting: true
}

func ExampleParsePolicy() {
	p, err := core.ParsePolicy("5/15m algorithm=sliding-log name=login")
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Name, p.Algorithm, p.Limit, p.Window)

	_, err = core.ParsePolicy("100/1m burst=20 algorithm=fixed-window")
	fmt.Println(err)
	// Output:
	// login sliding-log 5 15m0s
	// core: parse policy "100/1m burst=20 algorithm=fixed-window": Burst applies to token-bucket and leaky-bucket only, got 20 with fixed-window: invalid policy
}

// Expensive requests cost more units. A cost that can never fit is an
// error, not a denial.
func ExampleMemory_AllowN() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, _ := core.New(core.Policy{Limit: 100, Window: time.Minute}, core.WithClock(clock))

	d, _ := limiter.AllowN(ctx, "api-key-1", 50) // an export
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = limiter.AllowN(ctx, "api-key-1", 60)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)

	_, err := limiter.AllowN(ctx, "api-key-1", 500)
	fmt.Println(errors.Is(err, core.ErrCostTooHigh))
	// Output:
	// true 50
	// false 50 6s
	// true
}

// A fixed window lets 2×Limit through around a boundary; a sliding log
// never lets more than Limit through in any window.
func Example_boundaryBurst() {
	for _, a := range []core.Algorithm{core.FixedWindow, core.SlidingLog} {
		clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 59, 0, time.UTC))
		limiter, _ := core.New(core.Policy{Algorithm: a, Limit: 100, Window: time.Minute}, core.WithClock(clock))
		allowed := 0
		for range 100 {
			if d, _ := limiter.Allow(ctx, "k"); d.Allowed {
				allowed++
			}
		}
		clock.Advance(time.Second) // 12:01:00
		for range 100 {
			if d, _ := limiter.Allow(ctx, "k"); d.Allowed {
				allowed++
			}
		}
		fmt.Printf("%s: %d of 200 allowed\n", a, allowed)
	}
	// Output:
	// fixed-window: 200 of 200 allowed
	// sliding-log: 100 of 200 allowed
}

// The leaky bucket delays rather than rejects: each allowed request says
// how long to wait for its slot.
func ExampleLeakyBucket() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, _ := core.New(core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3}, core.WithClock(clock))
	for range 4 {
		d, _ := limiter.Allow(ctx, "backend")
		fmt.Println(d.Allowed, d.Delay)
	}
	// Output:
	// true 0s
	// true 100ms
	// true 200ms
	// false 0s
}

// Peek answers "would it pass?" and reports the key as it is, counting
// nothing.
func ExampleMemory_Peek() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, _ := core.New(core.Policy{Limit: 2, Window: time.Hour}, core.WithClock(clock))
	for range 2 {
		d, _ := limiter.Peek(ctx, "k", 1)
		fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	}
	limiter.Allow(ctx, "k")
	d, _ := limiter.Peek(ctx, "k", 1)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	// Output:
	// true 2 0s
	// true 2 0s
	// true 1 30m0s
}

// Stats shows how many keys are held and whether any usage was forgotten.
func ExampleMemory_Stats() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, _ := core.New(core.Policy{Limit: 10, Window: time.Second}, core.WithClock(clock), core.WithMaxKeys(100))
	for i := range 150 {
		limiter.Allow(ctx, fmt.Sprint("client-", i))
	}
	fmt.Printf("%+v\n", limiter.Stats())
	// Output: {Keys:100 FreshDrops:0 LossyEvictions:50}
}

func ExampleManualClock() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	clock.Advance(90 * time.Second)
	fmt.Println(clock.Now().Format(time.TimeOnly))
	// Output: 12:01:30
}

// A monthly quota in Berlin's time: the window is the calendar month, and
// a request denied on its last evening waits until midnight, local time.
func ExampleCalendar() {
	p, err := core.ParsePolicy("2/1mo tz=Europe/Berlin")
	if err != nil {
		panic(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	clock := core.NewManualClock(time.Date(2026, 3, 31, 21, 30, 0, 0, berlin))
	limiter, err := core.New(p, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	limiter.AllowN(ctx, "acct-42", 2)
	d, _ := limiter.Allow(ctx, "acct-42")
	fmt.Println(p.Algorithm, p.Calendar, "allowed:", d.Allowed, "retry after:", d.RetryAfter)
	clock.Advance(d.RetryAfter)
	d, _ = limiter.Allow(ctx, "acct-42")
	fmt.Println("April:", d.Allowed, "resets in:", d.ResetAfter)
	// Output:
	// fixed-window month allowed: false retry after: 2h30m0s
	// April: true resets in: 720h0m0s
}

// A worker sending e-mails in batches takes as many sends as its limit of
// 100 a minute has room for, and leaves the rest of the queue for later.
func ExampleMemory_AllowAtMost() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, err := core.New(core.Policy{Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	queue := int64(250)
	for queue > 0 {
		d, granted, err := limiter.AllowAtMost(ctx, "mailer", queue)
		if err != nil {
			panic(err)
		}
		if granted == 0 {
			fmt.Printf("%d waiting; retry in %v\n", queue, d.RetryAfter)
			clock.Advance(d.RetryAfter)
			continue
		}
		queue -= granted
		fmt.Printf("sent %d, %d left\n", granted, queue)
	}
	// Output:
	// sent 100, 150 left
	// 150 waiting; retry in 1m0s
	// sent 100, 50 left
	// 50 waiting; retry in 1m0s
	// sent 50, 0 left
}

// A client that breaks its limit of 3 a second is turned away for a minute,
// then two, while it keeps at it, instead of being let in at every refill.
func ExampleBlocking() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, err := core.New(core.Policy{Algorithm: core.FixedWindow, Limit: 3, Window: time.Second}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	lockout, err := core.NewLockout(core.Block{For: time.Minute, Max: time.Hour}, clock,
		func(p core.Policy) (core.Limiter, error) { return core.New(p, core.WithClock(clock)) })
	if err != nil {
		panic(err)
	}
	blocking, err := core.NewBlocking(limiter, lockout)
	if err != nil {
		panic(err)
	}
	for round := range 2 {
		for i := range 4 {
			d, err := blocking.AllowN(ctx, "client", 1)
			if err != nil {
				panic(err)
			}
			fmt.Printf("round %d request %d: allowed %v, retry after %v\n", round+1, i+1, d.Allowed, d.RetryAfter)
			if !d.Allowed && i == 3 {
				clock.Advance(d.RetryAfter)
			}
		}
	}
	// Output:
	// round 1 request 1: allowed true, retry after 0s
	// round 1 request 2: allowed true, retry after 0s
	// round 1 request 3: allowed true, retry after 0s
	// round 1 request 4: allowed false, retry after 1m0s
	// round 2 request 1: allowed true, retry after 0s
	// round 2 request 2: allowed true, retry after 0s
	// round 2 request 3: allowed true, retry after 0s
	// round 2 request 4: allowed false, retry after 2m0s
}

// A request whose cost is known only after it ran, such as the tokens an
// AI model used: it takes an estimate before and settles the actual cost
// after. Costing more puts the key into debt, which a token bucket repays
// at its refill rate.
func ExampleSettler() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	// 1,000 tokens a minute, a burst of 1,000.
	limiter, err := core.New(core.Policy{Name: "tokens", Limit: 1000, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	s, _ := core.As[core.Settler](limiter)

	d, _ := limiter.AllowN(ctx, "user-7", 200) // the estimate
	fmt.Println("estimate allowed:", d.Allowed, "left:", d.Remaining)
	start := clock.Now()
	clock.Advance(2 * time.Second)
	// The model used 1,500 tokens: 1,300 more than estimated.
	if err := s.Settle(ctx, "user-7", 200, 1500, clock.Now().Sub(start)); err != nil {
		panic(err)
	}
	d, _ = limiter.Peek(ctx, "user-7", 100)
	fmt.Println("in debt: allowed", d.Allowed, "left", d.Remaining, "retry after", d.RetryAfter)

	clock.Advance(d.RetryAfter)
	d, _ = limiter.AllowN(ctx, "user-7", 100)
	fmt.Println("debt repaid:", d.Allowed)

	// A request that used less than its estimate gives the rest back.
	clock.Advance(time.Minute)
	limiter.AllowN(ctx, "user-7", 500)
	s.Settle(ctx, "user-7", 500, 120, 0)
	d, _ = limiter.Peek(ctx, "user-7", 1)
	fmt.Println("after using 120 of 500:", d.Remaining, "left")
	// Output:
	// estimate allowed: true left: 800
	// in debt: allowed false left 0 retry after 34s
	// debt repaid: true
	// after using 120 of 500: 880 left
}
