package fiberlimit_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
)

// A handler that panics, behind fiber's recover, gives its lease back.
func TestInFlightPanicReleases(t *testing.T) {
	rate, _ := core.New(core.Policy{Limit: 100, Window: time.Minute})
	cap1, _ := inflight.New(1)
	app := fiber.New()
	app.Use(recover.New(), fiberlimit.New(rate, httplimit.WithInFlight(cap1)))
	app.Get("/panic", func(*fiber.Ctx) error { panic("boom") })
	app.Get("/ok", func(c *fiber.Ctx) error { return c.SendStatus(200) })
	for _, path := range []string{"/panic", "/panic", "/ok"} {
		resp, err := app.Test(httptest.NewRequest("GET", path, nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[string]int{"/panic": 500, "/ok": 200}[path]; resp.StatusCode != want {
			t.Fatalf("GET %s: %d, want %d (a panic's lease held would make it 429)", path, resp.StatusCode, want)
		}
	}
}
