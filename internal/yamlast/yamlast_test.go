package yamlast

import (
	"errors"
	"strings"
	"testing"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
)

func TestMessage(t *testing.T) {
	err := errors.New("must be positive")
	for _, c := range []struct {
		file         string
		line, column int
		path         string
		err          error
		want         string
	}{
		{"r.yaml", 3, 7, "rules[0].rate", err, "p: r.yaml:3:7: rules[0].rate: must be positive"},
		{"r.yaml", 0, 0, "rules[0].rate", err, "p: r.yaml: rules[0].rate: must be positive"},
		{"", 3, 7, "", err, "p: 3:7: must be positive"},
		{"", 0, 0, "rate", err, "p: rate: must be positive"},
		{"", 0, 0, "", nil, "p: "},
	} {
		if got := Message("p: ", c.file, c.line, c.column, c.path, c.err); got != c.want {
			t.Errorf("Message(%q, %d, %d, %q) = %q, want %q", c.file, c.line, c.column, c.path, got, c.want)
		}
	}
}

func body(t *testing.T, src string) ast.Node {
	t.Helper()
	f, err := parser.Parse(lexer.Tokenize(src), 0)
	if err != nil {
		t.Fatal(err)
	}
	return f.Docs[0].Body
}

// Mapping reports every mistake once, with the node at fault, and walks the
// rest in order. (The parser refuses a key given twice before Mapping sees
// it.)
func TestMapping(t *testing.T) {
	n := body(t, "a: 1\nb:\nzz: 2\n? x\n: 4\nc: {d: 5}\n")
	var walked, fails []string
	Mapping(n, "top", []string{"a", "b", "c"}, func(n ast.Node, path, msg string) {
		line := 0
		if tk := NodeToken(n); tk != nil && tk.Position != nil {
			line = tk.Position.Line
		}
		fails = append(fails, path+"@"+string(rune('0'+line))+": "+msg)
	}, func(f Field) {
		walked = append(walked, f.Path+"="+Kind(f.Value))
	})
	if got, want := strings.Join(walked, " "), "top.a=a number top.b=null top.c=a mapping"; got != want {
		t.Errorf("walked %s, want %s", got, want)
	}
	wantFails := []string{
		"top.zz@3: unknown field; want one of a, b, c",
		"top@4: complex keys (?) are not allowed",
	}
	if strings.Join(fails, "\n") != strings.Join(wantFails, "\n") {
		t.Errorf("fails:\n%s\nwant:\n%s", strings.Join(fails, "\n"), strings.Join(wantFails, "\n"))
	}

	var got []string
	Mapping(body(t, "- 1\n"), "list", nil, func(_ ast.Node, path, msg string) {
		got = append(got, path+": "+msg)
	}, func(Field) { t.Error("walked a list") })
	if len(got) != 1 || got[0] != "list: want a mapping, got a list" {
		t.Errorf("a list: %q", got)
	}
	Mapping(nil, "", nil, func(ast.Node, string, string) { t.Error("failed on null") }, func(Field) { t.Error("walked null") })
}
