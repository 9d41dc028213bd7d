package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
)

var update = flag.Bool("update", false, "rewrite testdata/default.golden and docs/simulate.svg")

// TestDefaultRun runs the command as `go run ./examples/simulate` does, with
// no flags, in an empty directory, and checks its table against
// testdata/default.golden and the chart it writes against
// docs/simulate.svg, the one the README shows.
func TestDefaultRun(t *testing.T) {
	goldenTable, err := filepath.Abs("testdata/default.golden")
	if err != nil {
		t.Fatal(err)
	}
	goldenSVG, err := filepath.Abs("../../docs/simulate.svg")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	var out, errs bytes.Buffer
	if err := run(nil, &out, &errs); err != nil {
		t.Fatalf("run: %v\n%s", err, errs.Bytes())
	}
	svg, err := os.ReadFile("simulate.svg")
	if err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg)
	for _, g := range []struct {
		path string
		got  []byte
	}{{goldenTable, out.Bytes()}, {goldenSVG, svg}} {
		if *update {
			if err := os.WriteFile(g.path, g.got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(g.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g.got, want) {
			t.Errorf("%s changed; got:\n%s\n(rerun with -update, or go generate ./examples/simulate, if the change is intended)", g.path, g.got)
		}
	}
}

// Every pattern runs, and what every algorithm allowed is what it promises.
func TestPatterns(t *testing.T) {
	csv := filepath.Join(t.TempDir(), "times.csv")
	if err := os.WriteFile(csv, []byte("# time,cost\n0\n0.5,2\n1m\n1m0.5s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-pattern=boundary", "-duration=4m"},
		{"-pattern=steady"},
		{"-pattern=steady", "-policy=7/3s", "-rate=0.5"},
		{"-pattern=sawtooth"},
		{"-pattern=retry-storm", "-seed=7"},
		{"-pattern=csv", "-csv=" + csv, "-policy=2/1m"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			c, err := parseFlags(append(args, "-svg="), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			tr, start, d, err := buildTraffic(c)
			if err != nil {
				t.Fatal(err)
			}
			outcomes, err := simulate(c.policy, start, d, tr)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range outcomes {
				most, _ := worstBurst(o.allowed, c.policy.Window)
				var bound int64
				switch o.algorithm {
				case core.SlidingLog:
					bound = c.policy.Limit // exact: never more in any window
				case core.FixedWindow:
					bound = 2 * c.policy.Limit
				default:
					bound = 2*c.policy.Limit + 1
				}
				if most > bound {
					t.Errorf("%v: %d in one window, at most %d", o.algorithm, most, bound)
				}
				if o.sent() < len(tr.arrivals) && tr.retry == nil {
					t.Errorf("%v: %d sent of %d", o.algorithm, o.sent(), len(tr.arrivals))
				}
				for _, e := range o.denied {
					if e.retry <= 0 {
						t.Fatalf("%v: a denial at %v with Retry-After %v", o.algorithm, e.at, e.retry)
					}
				}
			}
		})
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-pattern=zigzag"},
		{"-pattern=csv"},
		{"-csv=x.csv"},
		{"-policy=100"},
		{"-rate=0"},
		{"-duration=-1s"},
		{"extra"},
		{"-pattern=boundary", "-duration=10s"}, // no boundary in 10s of a minute window
		{"-pattern=csv", "-csv=does-not-exist.csv"},
	} {
		err := run(append(args, "-svg="), io.Discard, io.Discard)
		if err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// The retry storm's clients are the same for every algorithm: a fixed
// window lets them all in at the boundary, and the token bucket keeps
// them retrying.
func TestRetryStormStory(t *testing.T) {
	c, _ := parseFlags([]string{"-pattern=retry-storm"}, io.Discard)
	tr, start, d, err := buildTraffic(c)
	if err != nil {
		t.Fatal(err)
	}
	outcomes, err := simulate(c.policy, start, d, tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outcomes {
		if o.sent() <= len(tr.arrivals) {
			t.Errorf("%v: %d sent, want more than the %d first attempts", o.algorithm, o.sent(), len(tr.arrivals))
		}
		if len(o.allowed) > 4*100+100 {
			t.Errorf("%v: %d allowed in 4 minutes of 100/1m", o.algorithm, len(o.allowed))
		}
	}
}

// The README opens with `go run ./examples/simulate` and shows what it
// prints: that must be the default run's output, word for word.
func TestREADMEShowsTheDefaultRun(t *testing.T) {
	golden, err := os.ReadFile("testdata/default.golden")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("```sh\ngo run ./examples/simulate ")) {
		t.Error("README.md does not open with go run ./examples/simulate")
	}
	if !bytes.Contains(readme, []byte("```\n"+string(golden)+"```\n")) {
		t.Errorf("README.md does not show the default run's output (testdata/default.golden):\n%s", golden)
	}
}
