// An echo server limited by echolimit, built outside the repository.
//
// go get github.com/ratekit/ratekit/echolimit@latest
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
)

func main() {
	limiter, err := core.New(core.Policy{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.Use(echolimit.New(limiter))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
	log.Fatal(e.Start("127.0.0.1:8080"))
}
