package rlconfig

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: no input panics, and a refusal is an *Error.
func FuzzParse(f *testing.F) {
	names, _ := filepath.Glob(filepath.Join("testdata", "envoy", "*.yaml"))
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("f", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is no *Error", err)
			}
			return
		}
		c, err := Build(false, file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range c.Limits() {
			c.Match(l.Domain, []string{"k"}, []string{"v"}, nil)
		}
	})
}
