package main

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// FuzzReadCSV feeds readCSV any file: it never panics, and what it accepts
// is a sorted list of non-negative times with positive costs. What it
// accepts also runs through the simulation, the table and the chart
// without failing, unless a cost exceeds what the policy can ever allow.
// Seeds are in testdata/fuzz/FuzzReadCSV.
func FuzzReadCSV(f *testing.F) {
	f.Add([]byte("time,cost\n1.5\n250ms, 3\n"))
	f.Add([]byte("2026-01-01T12:00:59.5Z\n2026-01-01T13:00:00+01:00\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		as, _, _, err := readCSV(bytes.NewReader(data))
		if err != nil {
			return
		}
		if len(as) == 0 || len(as) > maxArrivals {
			t.Fatalf("%d arrivals accepted", len(as))
		}
		if !slices.IsSortedFunc(as, func(a, b arrival) int { return cmp.Compare(a.at, b.at) }) {
			t.Fatalf("arrivals not in time order: %+v", as)
		}
		for _, a := range as {
			if a.at < 0 || a.cost < 1 {
				t.Fatalf("arrival %+v", a)
			}
		}
		if len(as) > 1000 || as[len(as)-1].at > 24*time.Hour {
			return // a valid file, but too long a run for a fuzz iteration
		}
		in := filepath.Join(dir, "in.csv")
		if err := os.WriteFile(in, data, 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"-pattern=csv", "-csv=" + in, "-policy=10/s", "-svg=" + filepath.Join(dir, "out.svg")}
		// A cost above the policy's capacity is refused with a clear
		// error: no algorithm could ever allow it.
		if err := run(args, io.Discard, io.Discard); err != nil && !errors.Is(err, core.ErrCostTooHigh) {
			t.Fatalf("run on an accepted file: %v", err)
		}
	})
}
