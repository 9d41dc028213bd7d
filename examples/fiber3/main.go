// Command fiber3 is a small API on fiber v3 with one limit on every /api route,
// served from its own listener:
//
//	go run ./examples/fiber3         # serve on 127.0.0.1:8080 (-addr to change)
//
// Every route under /api shares 100 requests a minute per client IP (the
// socket peer), as a token bucket; GET /healthz is outside the group and
// not limited. Try it:
//
//	curl -i http://127.0.0.1:8080/api/hello
//	for i in $(seq 101); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:8080/api/hello; done
//
// The 101st request gets 429 with Retry-After and a problem+json body.
// Interrupt (Ctrl-C) shuts the server down gracefully.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiber3limit"
)

// policy limits every /api route, per client IP.
var policy = core.Policy{Name: "api", Limit: 100, Window: time.Minute}

func main() {
	fs := flag.NewFlagSet("fiber3", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	fs.Parse(os.Args[1:])
	app, err := newApp(core.SystemClock{})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		app.ShutdownWithTimeout(5 * time.Second)
	}()
	log.Printf("fiber3: listening on http://%s (100 a minute per client IP under /api)", ln.Addr())
	if err := app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}); err != nil {
		log.Fatal(err)
	}
}

// newApp returns the API, its limiter reading clock.
func newApp(clock core.Clock) (*fiber.App, error) {
	limiter, err := core.New(policy, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	app := fiber.New(fiber.Config{ReadTimeout: 10 * time.Second})
	app.Get("/healthz", func(c fiber.Ctx) error { return c.SendString("ok\n") })
	api := app.Group("/api", fiber3limit.New(limiter))
	api.Get("/hello", func(c fiber.Ctx) error {
		return c.JSON(fiber.Map{"hello": "world"})
	})
	api.Post("/echo", func(c fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
		return c.Send(c.Body())
	})
	return app, nil
}
