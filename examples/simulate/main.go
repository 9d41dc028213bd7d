// Command simulate runs every ratekit algorithm over the same traffic on a
// manual clock, prints what each allowed and writes an SVG chart of it:
//
//	go run ./examples/simulate                       # boundary burst on 100/1m, chart in simulate.svg
//	go run ./examples/simulate -pattern=retry-storm  # clients that retry every second, ignoring Retry-After
//	go run ./examples/simulate -pattern=csv -csv=times.csv -policy=10/s -svg=out.svg
//
// Patterns (-pattern):
//
//   - boundary: Limit requests in the second before every other window
//     boundary and Limit in the second after (a sixtieth of the window,
//     for other windows), from half a window before the first boundary;
//     one window long by default. A fixed window lets both halves through.
//   - steady: one request every Window/(Limit × rate).
//   - sawtooth: a rate climbing from zero to 2 × rate × Limit per Window
//     over each window, then dropping back at the boundary.
//   - retry-storm: new clients at rate × Limit per Window, all sharing one
//     key; a denied client tries again a second later (±50 %), up to 10
//     times, whatever Retry-After says.
//   - csv: the times in the -csv file, one per line: seconds from the start
//     ("12.5"), a Go duration ("1m30s") or an RFC 3339 time, optionally
//     followed by ",cost".
//
// The policy (-policy, as [core.ParsePolicy] reads it) is enforced by each
// algorithm in turn, its own [core.New] limiter on its own
// [core.ManualClock]; every request is counted under one key. Time is
// integer (whole microseconds), the retry-storm jitter comes from -seed, and
// so a run is the same on every machine. The table shows, per algorithm, the
// requests sent (retries included), allowed and denied, the most units
// allowed in any span of one window (computed exactly from the allowed
// times), and the 50th and 99th percentile Retry-After of the denials. The
// chart (-svg, "" for none) plots requests allowed over time per algorithm,
// with the window boundaries marked; it is a standalone SVG file that a
// browser opens. docs/simulate.svg is the default run's chart, regenerated
// with go generate.
package main

//go:generate go run . -svg ../../docs/simulate.svg

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
)

func main() {
	switch err := run(os.Args[1:], os.Stdout, os.Stderr); {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "simulate:", err)
		os.Exit(1)
	}
}

// defaultStart is where the simulated clock starts, on a minute boundary,
// unless a CSV file of absolute times says otherwise.
var defaultStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// config is the command line's.
type config struct {
	pattern  string
	csvPath  string
	policy   core.Policy
	duration time.Duration // 0: one window for boundary, four for the others, through the last request for csv
	rate     float64
	seed     uint64
	svg      string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.pattern, "pattern", "boundary", "traffic: boundary, steady, sawtooth, retry-storm or csv")
	fs.StringVar(&c.csvPath, "csv", "", "`file` of request times for -pattern=csv")
	policy := fs.String("policy", "100/1m", "the `policy` every algorithm enforces, as core.ParsePolicy reads it (its algorithm is ignored)")
	fs.DurationVar(&c.duration, "duration", 0, "simulated time (default: one window for boundary, four for the others, through the last request for csv)")
	fs.Float64Var(&c.rate, "rate", 2, "steady, sawtooth and retry-storm: the `multiple` of the policy's rate sent")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the retry-storm jitter")
	fs.StringVar(&c.svg, "svg", "simulate.svg", "`file` to write the chart to; empty for none")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	p, err := core.ParsePolicy(*policy)
	if err != nil {
		return c, err
	}
	if p.Calendar != 0 {
		// Only the fixed window takes a calendar.
		return c, fmt.Errorf("-policy %q: a calendar window (1w, 1mo, tz=) is the fixed window's alone, and the simulator puts every algorithm through one Window: give a span such as 7d", *policy)
	}
	c.policy = p
	if c.duration < 0 {
		return c, fmt.Errorf("-duration %v is negative", c.duration)
	}
	if !(c.rate > 0 && c.rate <= 1000) {
		return c, fmt.Errorf("-rate %v: want more than 0 and at most 1000", c.rate)
	}
	if (c.pattern == "csv") != (c.csvPath != "") {
		return c, errors.New("-csv goes with -pattern=csv, and only with it")
	}
	return c, nil
}

// run simulates what args say and writes the table to stdout.
func run(args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	t, start, d, err := buildTraffic(c)
	if err != nil {
		return err
	}
	outcomes, err := simulate(c.policy, start, d, t)
	if err != nil {
		return err
	}
	if err := printTable(stdout, c.policy, start, d, t, outcomes); err != nil {
		return err
	}
	if c.svg == "" {
		return nil
	}
	f, err := os.Create(c.svg)
	if err != nil {
		return err
	}
	if err := writeChart(f, c.policy, start, d, t, outcomes); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nChart: %s (open it in a browser).\n", c.svg)
	return nil
}

// buildTraffic returns the traffic c asks for, the simulation's start and
// its length.
func buildTraffic(c config) (t traffic, start time.Time, d time.Duration, err error) {
	p, start, d := c.policy, defaultStart, c.duration
	if d == 0 {
		d = 4 * p.Window
	}
	switch c.pattern {
	case "boundary":
		// Half a window before a boundary, and by default one window long:
		// one burst, in the middle of the chart.
		start = start.Add((p.Window / 2).Truncate(time.Microsecond))
		if c.duration == 0 {
			d = p.Window
		}
		t.arrivals = boundaryBurst(p, start, d)
		var at []string
		for b := firstBoundary(start, p.Window); b+burstSpan(p.Window) <= d; b += 2 * p.Window {
			at = append(at, clockTime(start, b))
		}
		if len(at) == 0 {
			return t, start, d, fmt.Errorf("boundary: -duration %v holds no window boundary", d)
		}
		each := ""
		if len(at) > 1 {
			each = "each of "
		}
		t.about = fmt.Sprintf("%d requests in the %v before %s%s, and %d in the %v after", p.Limit, burstSpan(p.Window), each, list(at), p.Limit, burstSpan(p.Window))
	case "steady":
		t.arrivals, err = steady(p, d, c.rate)
		t.about = fmt.Sprintf("one request every %v (%v× the policy's rate)", interval(p, c.rate), c.rate)
	case "sawtooth":
		t.arrivals, err = sawtooth(p, start, d, c.rate)
		t.about = fmt.Sprintf("a rate climbing from 0 to %v× the policy's over each window, dropping back at each boundary", 2*c.rate)
	case "retry-storm":
		t, err = retryStorm(p, d, c.rate, c.seed)
		t.about = fmt.Sprintf("a new client every %v (%v× the policy's rate), all on one key; each retries a denial after %v ± 50%% (seed %d), up to %d times",
			interval(p, c.rate), c.rate, burstSpan(p.Window), c.seed, stormRetries)
	case "csv":
		f, ferr := os.Open(c.csvPath)
		if ferr != nil {
			return t, start, d, ferr
		}
		defer f.Close()
		var first time.Time
		var absolute bool
		t.arrivals, first, absolute, err = readCSV(f)
		if err != nil {
			return t, start, d, fmt.Errorf("%s: %w", c.csvPath, err)
		}
		if absolute {
			// Start on the window boundary at or before the first request.
			start = first.Add(firstBoundary(first, p.Window) - p.Window)
			for i := range t.arrivals {
				t.arrivals[i].at += first.Sub(start)
			}
		}
		if c.duration == 0 {
			last := t.arrivals[len(t.arrivals)-1].at
			d = (last/p.Window + 1) * p.Window
		}
		t.about = fmt.Sprintf("%d requests from %s", len(t.arrivals), c.csvPath)
	default:
		return t, start, d, fmt.Errorf("unknown -pattern %q: want boundary, steady, sawtooth, retry-storm or csv", c.pattern)
	}
	t.name = c.pattern
	return t, start, d, err
}

// clockTime returns the time of day at offset off from start, such as
// "12:01:00" or "12:00:59.5".
func clockTime(start time.Time, off time.Duration) string {
	return start.Add(off).Format("15:04:05.999999")
}

// list joins items as prose: "a", "a and b", "a, b and c".
func list(items []string) string {
	if len(items) > 4 {
		items = append(items[:3:3], "…")
	}
	if len(items) == 1 {
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}
