package metricstest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/metricsview"
)

// CheckBucketsDoc checks that the doc comment of WithLatencyBuckets in the
// exporter's source file lists the default bounds, written as durations
// ("1µs, 2.5µs, ... and 1s") so that go doc shows them without naming the
// internal package they come from.
func CheckBucketsDoc(t *testing.T, file string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "WithLatencyBuckets" && fn.Doc != nil {
			doc = strings.Join(strings.Fields(fn.Doc.Text()), " ")
		}
	}
	if doc == "" {
		t.Fatalf("%s: no documented WithLatencyBuckets", file)
	}
	b := metricsview.DefaultLatencyBuckets()
	names := make([]string, len(b))
	for i, x := range b {
		names[i] = time.Duration(math.Round(x * 1e9)).String()
	}
	want := "Default: " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + ":"
	if !strings.Contains(doc, want) {
		t.Errorf("%s: WithLatencyBuckets's doc does not say %q:\n%s", file, want, doc)
	}
}
