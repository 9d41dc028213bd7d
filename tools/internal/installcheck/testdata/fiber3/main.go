// A fiber v3 app limited by fiber3limit, built outside the repository.
//
// go get github.com/ratekit/ratekit/fiber3limit@latest
package main

import (
	"log"
	"time"

	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiber3limit"
)

func main() {
	limiter, err := core.New(core.Policy{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	app.Use(fiber3limit.New(limiter))
	app.Get("/hello", func(c fiber.Ctx) error { return c.SendString("hello") })
	log.Fatal(app.Listen("127.0.0.1:8080"))
}
