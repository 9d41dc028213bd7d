package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
)

// chartOf runs args through the simulation and returns the chart.
func chartOf(t *testing.T, args ...string) []byte {
	t.Helper()
	c, err := parseFlags(args, io.Discard)
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
	var buf bytes.Buffer
	if err := writeChart(&buf, c.policy, start, d, tr, outcomes); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkSVG parses an SVG document with encoding/xml and checks that it is
// one svg element in the SVG namespace, with a size, and one series per
// algorithm, each with allowed bars and an allowed-so-far line.
func checkSVG(t *testing.T, doc []byte) {
	t.Helper()
	if bytes.Contains(doc, []byte("NaN")) || bytes.Contains(doc, []byte("Inf")) {
		t.Error("the chart holds NaN or Inf coordinates")
	}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = true
	var (
		depth, roots int
		series       = map[string]map[string]int{} // algorithm -> class -> count
		current      string
		seriesDepth  int
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			attr := map[string]string{}
			for _, a := range tok.Attr {
				attr[a.Name.Local] = a.Value
			}
			if depth == 1 {
				roots++
				if tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root element %s in namespace %q, want svg in the SVG namespace", tok.Name.Local, tok.Name.Space)
				}
				for _, a := range []string{"width", "height", "viewBox"} {
					if attr[a] == "" {
						t.Errorf("root element without %s", a)
					}
				}
			}
			if tok.Name.Local == "g" && attr["class"] == "series" {
				current, seriesDepth = attr["data-algorithm"], depth
				if series[current] != nil {
					t.Errorf("two series for %q", current)
				}
				series[current] = map[string]int{}
			} else if current != "" && attr["class"] != "" {
				series[current][attr["class"]]++
			}
		case xml.EndElement:
			if depth == seriesDepth {
				current, seriesDepth = "", 0
			}
			depth--
		}
	}
	if roots != 1 {
		t.Errorf("%d root elements, want 1", roots)
	}
	if len(series) != len(core.Algorithms()) {
		t.Errorf("%d series, want %d", len(series), len(core.Algorithms()))
	}
	for _, a := range core.Algorithms() {
		s := series[a.String()]
		if s == nil {
			t.Errorf("no series for %v", a)
			continue
		}
		if s["allowed"] != 1 || s["cumulative"] != 1 {
			t.Errorf("series %v holds %v, want one allowed path and one cumulative line", a, s)
		}
	}
	if s := series[core.LeakyBucket.String()]; s["served"] != 1 {
		t.Errorf("the leaky bucket's series holds %v, want a served line", s)
	}
}

func TestChartIsSVG(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"-pattern=steady", "-policy=10/s", "-rate=1.5"},
		{"-pattern=sawtooth", "-duration=3m"},
		{"-pattern=retry-storm", "-policy=100/1m"},
		{"-pattern=boundary", "-policy=5/1h burst=10", "-duration=10h"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			checkSVG(t, chartOf(t, args...))
		})
	}
}
