package inflight_test

import (
	"context"
	"fmt"

	"github.com/ratekit/ratekit/inflight"
)

// Two exports per user at once: a third waits for one to end.
func ExampleMemory() {
	ctx := context.Background()
	limiter, err := inflight.New(2)
	if err != nil {
		panic(err)
	}
	first, _ := limiter.Acquire(ctx, "user-42")
	second, _ := limiter.Acquire(ctx, "user-42")
	third, _ := limiter.Acquire(ctx, "user-42")
	fmt.Println(first.Allowed, second.Allowed, third.Allowed, third.InFlight, third.RetryAfter)

	limiter.Release(ctx, first.Lease) // the first export ends
	again, _ := limiter.Acquire(ctx, "user-42")
	fmt.Println(again.Allowed, again.InFlight)
	// Output:
	// true true false 2 1s
	// true 2
}
