// Command quickstart drives every ratekit algorithm through the same traffic
// against "100 per minute" on a manual clock and prints what each allowed:
//
//	go run ./examples/quickstart
//
// The traffic patterns are the questions users of rate limiters ask: what
// happens at a window boundary, what a client sending twice the rate gets,
// and how much a client idle for an hour may burst.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/ratekit/ratekit/core"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// start is 12:00:59, one second before a minute boundary.
var start = time.Date(2026, 1, 1, 12, 0, 59, 0, time.UTC)

// A pattern sends requests for one key, moving the clock as it goes, and
// returns how many were allowed and the first denial's RetryAfter.
type pattern struct {
	name string
	send func(l core.Limiter, clock *core.ManualClock) (allowed int, firstRetry time.Duration, err error)
}

var patterns = []pattern{
	{"100 at 12:00:59 + 100 at 12:01:00", func(l core.Limiter, clock *core.ManualClock) (int, time.Duration, error) {
		a, r, err := burst(l, 100)
		if err != nil {
			return 0, 0, err
		}
		clock.Advance(time.Second)
		b, r2, err := burst(l, 100)
		return a + b, first(r, r2), err
	}},
	{"every 300ms for 2 minutes (twice the rate)", func(l core.Limiter, clock *core.ManualClock) (int, time.Duration, error) {
		allowed, retry := 0, time.Duration(0)
		for range 400 {
			a, r, err := burst(l, 1)
			if err != nil {
				return 0, 0, err
			}
			allowed, retry = allowed+a, first(retry, r)
			clock.Advance(300 * time.Millisecond)
		}
		return allowed, retry, nil
	}},
	{"150 at once after an hour idle", func(l core.Limiter, clock *core.ManualClock) (int, time.Duration, error) {
		if _, _, err := burst(l, 100); err != nil {
			return 0, 0, err
		}
		clock.Advance(time.Hour)
		return burst(l, 150)
	}},
}

// burst sends n requests at the current time.
func burst(l core.Limiter, n int) (allowed int, firstRetry time.Duration, err error) {
	for range n {
		d, err := l.AllowN(context.Background(), "client", 1)
		if err != nil {
			return 0, 0, err
		}
		if d.Allowed {
			allowed++
		} else {
			firstRetry = first(firstRetry, d.RetryAfter)
		}
	}
	return allowed, firstRetry, nil
}

func first(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

func run(w io.Writer) error {
	fmt.Fprintln(w, `Policy "100/1m" on a manual clock starting at 12:00:59. Allowed, and the first denial's Retry-After:`)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "algorithm")
	for _, p := range patterns {
		fmt.Fprintf(tw, "\t%s", p.name)
	}
	fmt.Fprintln(tw)
	for _, a := range core.Algorithms() {
		fmt.Fprint(tw, a)
		for _, p := range patterns {
			clock := core.NewManualClock(start)
			l, err := core.New(core.Policy{Algorithm: a, Limit: 100, Window: time.Minute}, core.WithClock(clock))
			if err != nil {
				return err
			}
			allowed, retry, err := p.send(l, clock)
			if err != nil {
				return err
			}
			cell := fmt.Sprintf("%d", allowed)
			if retry > 0 {
				cell += fmt.Sprintf(" (retry in %v)", retry.Round(time.Millisecond))
			}
			fmt.Fprintf(tw, "\t%s", cell)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "fixed-window lets 200 through in one second at the boundary; the sliding log never more than 100 in any minute.")
	fmt.Fprintln(w, "The token bucket refills continuously, one request per 600ms: twice the rate for 2 minutes gets its burst")
	fmt.Fprintln(w, "of 100 plus one per 600ms, and an hour of idling buys 100, not 6000. The leaky bucket admits the same but")
	fmt.Fprintln(w, "queues: its allowed requests wait for their slot (Decision.Delay).")
	return nil
}
