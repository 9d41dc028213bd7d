package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/ratekit/ratekit/core"
)

// printTable writes what each algorithm made of the traffic, one row each.
func printTable(w io.Writer, p core.Policy, start time.Time, d time.Duration, t traffic, outcomes []outcome) error {
	fmt.Fprintf(w, "Pattern %s: %s.\n", t.name, t.about)
	fmt.Fprintf(w, "Policy %v, one key, from %s to %s %s.\n\n", p, clockTime(start, 0), clockTime(start, d), start.Format("MST"))
	win := formatWindow(p.Window)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "algorithm\tsent\tallowed\tdenied\tmost in any %s\tp50 Retry-After\tp99 Retry-After\tlongest Delay\n", win)
	for _, o := range outcomes {
		most, _ := worstBurst(o.allowed, p.Window)
		ras := retryAfters(o.denied)
		p50, _ := percentile(ras, 50)
		p99, ok := percentile(ras, 99)
		row := []string{o.algorithm.String(), fmt.Sprint(o.sent()), fmt.Sprint(len(o.allowed)), fmt.Sprint(len(o.denied)), fmt.Sprint(most), "-", "-", "-"}
		if ok {
			row[5], row[6] = formatDuration(p50), formatDuration(p99)
		}
		if o.algorithm == core.LeakyBucket {
			row[7] = formatDuration(longestDelay(o.allowed))
		}
		for i, cell := range row {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, cell)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nmost in any %s: the most units allowed in any %s span, counted exactly from the allowed times.\n", win, win)
	fmt.Fprintln(w, "Retry-After: over the denials, nearest rank. Delay: how long the leaky bucket queues an allowed request.")
	return nil
}

// formatDuration rounds d to the millisecond, or to the microsecond below
// one millisecond.
func formatDuration(d time.Duration) string {
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// formatWindow writes a window the short way: "1m", "1s", "15m", "1h30m".
func formatWindow(w time.Duration) string {
	s := w.String()
	for _, suffix := range []string{"m0s", "h0m"} {
		if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
			s = s[:len(s)-len(suffix)+1]
		}
	}
	return s
}
