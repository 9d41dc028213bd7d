// An echo v5 server limited by echo5limit, built outside the repository.
//
// go get github.com/ratekit/ratekit/echo5limit@latest
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echo5limit"
)

func main() {
	limiter, err := core.New(core.Policy{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.Use(echo5limit.New(limiter))
	e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") })
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: e, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
