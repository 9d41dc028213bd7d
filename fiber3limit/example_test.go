package fiber3limit_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiber3limit"
)

// Two requests per minute per client IP, on a manual clock: the third gets
// 429 with Retry-After.
func Example() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, err := core.New(core.Policy{Name: "api", Limit: 2, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}

	app := fiber.New()
	app.Use(fiber3limit.New(limiter))
	app.Get("/hello", func(c fiber.Ctx) error { return c.SendString("hello") })

	for range 3 {
		resp, err := app.Test(httptest.NewRequest("GET", "/hello", nil))
		if err != nil {
			panic(err)
		}
		fmt.Print(resp.StatusCode, " ", resp.Header.Get("RateLimit"))
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Print(" Retry-After: ", ra)
		}
		fmt.Println()
	}
	// Output:
	// 200 "api";r=1;t=30
	// 200 "api";r=0;t=60
	// 429 "api";r=0;t=30 Retry-After: 30
}
