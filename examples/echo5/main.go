// Command echo5 is a reports API on echo v5 where what a request costs
// depends on what it asks for, read from echo's own context with
// echo5limit.WithCost:
//
//	go run ./examples/echo5          # serve on 127.0.0.1:8080 (-addr to change)
//
// Every client IP (the socket peer) has 60 units a minute, as a token
// bucket refilling one unit a second. GET /v1/items costs 1 unit;
// GET /v1/report?days=N costs N units, one per day of data (1 to 31; a
// request for anything else costs 1 and is answered 400). A refusal is an
// error that echo's error handler answers, as it answers the app's own
// errors, with the refusal's problem body. Try it:
//
//	curl -i 'http://127.0.0.1:8080/v1/report?days=30'
//	curl -i 'http://127.0.0.1:8080/v1/report?days=31'   # 429: 30 units left, 31 asked
//	curl -i http://127.0.0.1:8080/v1/items              # still served: it costs 1
package main

import (
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echo5limit"
)

// policy is every client's budget.
var policy = core.Policy{Name: "api", Limit: 60, Window: time.Minute}

// maxDays is the longest report; its cost must fit in the policy's burst.
const maxDays = 31

func main() {
	fs := flag.NewFlagSet("echo5", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	fs.Parse(os.Args[1:])
	e, err := newServer(core.SystemClock{})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("echo5: listening on http://%s (60 units a minute per client IP; a report costs its days)", *addr)
	srv := &http.Server{Addr: *addr, Handler: e, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// newServer returns the API, its limiter reading clock.
func newServer(clock core.Clock) (*echo.Echo, error) {
	limiter, err := core.New(policy, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.Use(echo5limit.New(limiter, echo5limit.WithCost(cost)))
	e.GET("/v1/items", func(c *echo.Context) error {
		return c.JSON(http.StatusOK, []string{"first", "second"})
	})
	e.GET("/v1/report", func(c *echo.Context) error {
		days, ok := reportDays(c.QueryParam("days"))
		if !ok {
			return echo.NewHTTPError(http.StatusBadRequest, "days must be 1 to 31")
		}
		return c.JSON(http.StatusOK, map[string]int{"days": days})
	})
	return e, nil
}

// cost is what a request spends of the policy: a report one unit per day,
// anything else 1. It never fails: a malformed report request costs 1 and
// its handler refuses it, so that bad input is counted but cannot be used
// to spend more than a valid request.
func cost(c *echo.Context) (int64, error) {
	if c.Path() != "/v1/report" {
		return 1, nil
	}
	if days, ok := reportDays(c.QueryParam("days")); ok {
		return int64(days), nil
	}
	return 1, nil
}

// reportDays reads the days of a report: 1 to maxDays, 7 when absent.
func reportDays(v string) (int, bool) {
	if v == "" {
		return 7, true
	}
	days, err := strconv.Atoi(v)
	return days, err == nil && days >= 1 && days <= maxDays
}
