package snippets

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// imports maps the package qualifiers the docs use to import paths. A
// qualifier that is missing here shows up as "undefined: name" at the line
// that uses it.
var imports = map[string]string{
	"core":         "github.com/ratekit/ratekit/core",
	"limitertest":  "github.com/ratekit/ratekit/core/limitertest",
	"guard":        "github.com/ratekit/ratekit/guard",
	"observe":      "github.com/ratekit/ratekit/observe",
	"hotkey":       "github.com/ratekit/ratekit/hotkey",
	"guardtest":    "github.com/ratekit/ratekit/guard/guardtest",
	"keyfunc":      "github.com/ratekit/ratekit/keyfunc",
	"inflight":     "github.com/ratekit/ratekit/inflight",
	"httplimit":    "github.com/ratekit/ratekit/httplimit",
	"ginlimit":     "github.com/ratekit/ratekit/ginlimit",
	"echolimit":    "github.com/ratekit/ratekit/echolimit",
	"echo5limit":   "github.com/ratekit/ratekit/echo5limit",
	"chilimit":     "github.com/ratekit/ratekit/chilimit",
	"fiberlimit":   "github.com/ratekit/ratekit/fiberlimit",
	"fiber3limit":  "github.com/ratekit/ratekit/fiber3limit",
	"redisstore":   "github.com/ratekit/ratekit/redisstore",
	"region":       "github.com/ratekit/ratekit/redisstore/region",
	"ratekitprom":  "github.com/ratekit/ratekit/ratekitprom",
	"ratekitotel":  "github.com/ratekit/ratekit/ratekitotel",
	"grpclimit":    "github.com/ratekit/ratekit/grpclimit",
	"connectlimit": "github.com/ratekit/ratekit/connectlimit",
	"clientlimit":  "github.com/ratekit/ratekit/clientlimit",
	"rules":        "github.com/ratekit/ratekit/rules",

	"redis":      "github.com/redis/go-redis/v9",
	"gin":        "github.com/gin-gonic/gin",
	"echo":       "github.com/labstack/echo/v4",
	"echo5":      "github.com/labstack/echo/v5",
	"chi":        "github.com/go-chi/chi/v5",
	"middleware": "github.com/go-chi/chi/v5/middleware",
	"fiber":      "github.com/gofiber/fiber/v2",
	"fiber3":     "github.com/gofiber/fiber/v3",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"grpc":       "google.golang.org/grpc",
	"codes":      "google.golang.org/grpc/codes",
	"status":     "google.golang.org/grpc/status",
	"metadata":   "google.golang.org/grpc/metadata",
	"errdetails": "google.golang.org/genproto/googleapis/rpc/errdetails",
	"connect":    "connectrpc.com/connect",
	"sdkmetric":  "go.opentelemetry.io/otel/sdk/metric",

	"context":  "context",
	"errors":   "errors",
	"fmt":      "fmt",
	"http":     "net/http",
	"httptest": "net/http/httptest",
	"io":       "io",
	"json":     "encoding/json",
	"log":      "log",
	"math":     "math",
	"netip":    "net/netip",
	"os":       "os",
	"signal":   "os/signal",
	"slog":     "log/slog",
	"strconv":  "strconv",
	"strings":  "strings",
	"sync":     "sync",
	"testing":  "testing",
	"time":     "time",
}

// A snippet is one ```go block of a Markdown file.
type snippet struct {
	file   string // the Markdown file, relative to the repository root
	abs    string // its absolute path, for //line directives
	line   int    // the line of the block's first line of code
	col    int    // the column of its code (1 unless the fence is indented)
	code   string // the block's code, without the fence's indentation
	decls  string // Go declarations from a <!-- snippet: --> comment
	dline  int    // where decls starts in the file
	dcol   int
	skip   string // the reason from a <!-- snippet-skip: --> comment
	expect bool   // a harness test: // ERROR "regexp" lines must fail
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line-1) }

// TestSnippets builds every ```go block in README.md and docs/*.md, and those
// in testdata, in one go build; see the package doc.
func TestSnippets(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("the repository root %s has no go.work: %v", root, err)
	}

	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(root, "README.md")}, docs...)
	harness, err := filepath.Glob(filepath.Join("testdata", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var snippets []snippet
	for _, path := range append(files, harness...) {
		abs, err := filepath.Abs(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(root, abs)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(abs)
		if err != nil {
			t.Fatal(err)
		}
		found, errs := extract(filepath.ToSlash(rel), abs, string(data))
		for _, err := range errs {
			t.Error(err)
		}
		for i := range found {
			found[i].expect = slices.Contains(harness, path)
		}
		snippets = append(snippets, found...)
	}

	dir := t.TempDir()
	writeWorkspace(t, root, dir)
	var built []snippet
	for _, s := range snippets {
		if s.skip != "" {
			t.Logf("%s: skipped: %s", s, s.skip)
			continue
		}
		pkg := fmt.Sprintf("s%03d", len(built))
		gen := filepath.Join(dir, pkg, "snippet.go")
		if err := os.Mkdir(filepath.Dir(gen), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(gen, generate(s, pkg, gen), 0o644); err != nil {
			t.Fatal(err)
		}
		built = append(built, s)
	}

	cmd := exec.Command("go", "build", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"))
	out, err := cmd.CombinedOutput()
	if err != nil && len(out) == 0 {
		t.Fatalf("go build: %v", err)
	}
	got, other := attribute(out, dir, root, built)
	if len(other) > 0 {
		t.Errorf("go build:\n%s", strings.Join(other, "\n"))
	}

	docsBuilt := 0
	for i, s := range built {
		if !s.expect {
			docsBuilt++
			if len(got[i]) > 0 {
				t.Errorf("the ```go block at %s does not compile:\n%s", s, strings.Join(got[i], "\n"))
				if testing.Verbose() || strings.Contains(strings.Join(got[i], "\n"), "(generated)") {
					t.Logf("generated source of %s:\n%s", s, numbered(filepath.Join(dir, fmt.Sprintf("s%03d", i), "snippet.go")))
				}
			}
			continue
		}
		checkExpected(t, s, got[i])
	}
	if docsBuilt == 0 {
		t.Error("found no ```go block in README.md or docs/*.md")
	}
	t.Logf("built %d snippets from README.md and docs/*.md, and %d from testdata", docsBuilt, len(built)-docsBuilt)
}

var (
	fenceRE  = regexp.MustCompile("^( *)(`{3,}|~{3,})[ \t]*([^ \t`]*)")
	markerRE = regexp.MustCompile(`^\s*<!--\s*snippet`)
)

// extract returns the ```go blocks of a Markdown file, with the declarations
// and skip reasons of the comments before them.
func extract(file, abs, text string) ([]snippet, []error) {
	lines := strings.Split(text, "\n")
	var (
		out  []snippet
		errs []error
		mark *snippet // a marker comment waiting for its block
	)
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if markerRE.MatchString(line) {
			if mark != nil {
				errs = append(errs, fmt.Errorf("%s:%d: a snippet comment is not followed by a ```go block", file, mark.dline))
			}
			start := i
			comment := line
			for !strings.Contains(lines[i], "-->") && i+1 < len(lines) {
				i++
				comment += "\n" + lines[i]
			}
			end := strings.Index(comment, "-->")
			if end < 0 {
				errs = append(errs, fmt.Errorf("%s:%d: unterminated snippet comment", file, start+1))
				break
			}
			if rest := strings.TrimSpace(comment[end+len("-->"):]); rest != "" {
				errs = append(errs, fmt.Errorf("%s:%d: text after a snippet comment on its line", file, i+1))
			}
			body := comment[strings.Index(comment, "<!--")+len("<!--") : end]
			m := &snippet{dline: start + 1}
			switch kw := strings.TrimSpace(body); {
			case strings.HasPrefix(kw, "snippet-skip:"):
				m.skip = strings.TrimSpace(strings.TrimPrefix(kw, "snippet-skip:"))
				if m.skip == "" {
					errs = append(errs, fmt.Errorf("%s:%d: snippet-skip needs a reason", file, start+1))
					m.skip = "no reason given"
				}
			case strings.HasPrefix(kw, "snippet:"):
				m.decls = body[strings.Index(body, "snippet:")+len("snippet:"):]
				// The column where the declarations start, on the first line.
				m.dcol = strings.Index(line, "snippet:") + len("snippet:") + 1
			default:
				errs = append(errs, fmt.Errorf("%s:%d: unknown snippet comment (want <!-- snippet: declarations --> or <!-- snippet-skip: reason -->)", file, start+1))
				continue
			}
			mark = m
			continue
		}
		f := fenceRE.FindStringSubmatch(line)
		if f == nil {
			if mark != nil && strings.TrimSpace(line) != "" {
				errs = append(errs, fmt.Errorf("%s:%d: a snippet comment is not followed by a ```go block", file, mark.dline))
				mark = nil
			}
			continue
		}
		indent, fence, lang := len(f[1]), f[2], strings.ToLower(f[3])
		start := i + 1
		var code []string
		for i++; i < len(lines); i++ {
			l := lines[i]
			if t := strings.TrimLeft(l, " "); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]+" \t") == "" {
				break
			}
			for k := 0; k < indent && strings.HasPrefix(l, " "); k++ {
				l = l[1:]
			}
			code = append(code, l)
		}
		if lang != "go" && lang != "golang" {
			if mark != nil {
				errs = append(errs, fmt.Errorf("%s:%d: a snippet comment is not followed by a ```go block", file, mark.dline))
				mark = nil
			}
			continue
		}
		s := snippet{file: file, abs: abs, line: start + 1, col: indent + 1, code: strings.Join(code, "\n")}
		if mark != nil {
			s.decls, s.dline, s.dcol, s.skip = mark.decls, mark.dline, mark.dcol, mark.skip
			mark = nil
		}
		out = append(out, s)
	}
	if mark != nil {
		errs = append(errs, fmt.Errorf("%s:%d: a snippet comment is not followed by a ```go block", file, mark.dline))
	}
	return out, errs
}

// generate returns the source of package pkg, to be written at path gen, that
// compiles s.
func generate(s snippet, pkg, gen string) []byte {
	// The import declarations the snippet starts with go to the top.
	code := strings.Split(s.code, "\n")
	var own []string
	for i := 0; i < len(code); i++ {
		l := code[i]
		if strings.TrimSpace(l) == "" {
			continue
		}
		if !strings.HasPrefix(l, "import ") && !strings.HasPrefix(l, "import(") {
			break
		}
		block := strings.HasSuffix(strings.TrimSpace(l), "(")
		for {
			own = append(own, code[i])
			code[i] = "" // keeps the other lines where they are
			if !block || strings.TrimSpace(own[len(own)-1]) == ")" || i+1 == len(code) {
				break
			}
			i++
		}
	}
	fileLevel := isFile(strings.Join(code, "\n"))

	// The declarations after the imports. The line that follows the snippet
	// in the wrapper function is a directive naming the generated file, so
	// that an error in what the test adds is not put on a Markdown line.
	const reset = "//line reset"
	var body []string
	if fileLevel {
		body = append(body, directive(s.abs, s.line, s.col))
		body = append(body, code...)
	} else {
		body = append(body, "func _() error {", directive(s.abs, s.line, s.col))
		body = append(body, code...)
		body = append(body, reset)
		for _, name := range declared(strings.Join(code, "\n")) {
			body = append(body, "\t_ = "+name)
		}
		body = append(body, "\treturn nil", "}")
	}
	if s.decls != "" {
		body = append(body, directive(s.abs, s.dline, s.dcol), s.decls)
	}

	head := []string{"package " + pkg, ""}
	add := qualifiers("package p\n" + strings.Join(own, "\n") + "\n" + strings.Join(body, "\n"))
	if len(add) > 0 {
		head = append(head, "import (")
		for _, q := range add {
			head = append(head, fmt.Sprintf("\t%s %q", q, imports[q]))
		}
		head = append(head, ")", "")
	}
	head = append(head, own...)
	head = append(head, "")

	src := strings.Join(append(head, body...), "\n") + "\n"
	if i := strings.Index(src, reset); i >= 0 {
		next := strings.Count(src[:i], "\n") + 2 // the line after the directive
		src = src[:i] + directive(gen, next, 1) + src[i+len(reset):]
	}
	return []byte(src)
}

// isFile reports whether code is a list of declarations rather than of
// statements: whether it parses as a file, or, if it parses as neither, starts
// with a func or type declaration.
func isFile(code string) bool {
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+code, parser.SkipObjectResolution); err == nil {
		return true
	}
	if _, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+code+"\n}", parser.SkipObjectResolution); err == nil {
		return false
	}
	for l := range strings.Lines(code) {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "func ") || strings.HasPrefix(l, "type ")
	}
	return false
}

// directive returns a //line directive that puts the next line at file:line:col.
func directive(file string, line, col int) string {
	return fmt.Sprintf("//line %s:%d:%d", file, line, col)
}

// declared returns the names a list of statements declares at its top level.
func declared(stmts string) []string {
	f, _ := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+stmts+"\n}", parser.SkipObjectResolution)
	if f == nil || len(f.Decls) == 0 {
		return nil
	}
	fn, ok := f.Decls[0].(*ast.FuncDecl)
	if !ok || fn.Body == nil {
		return nil
	}
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" && !slices.Contains(names, id.Name) {
			names = append(names, id.Name)
		}
	}
	for _, st := range fn.Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, spec := range g.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	return names
}

// qualifiers returns the known package qualifiers that src uses without
// declaring or importing them, sorted.
func qualifiers(src string) []string {
	f, _ := parser.ParseFile(token.NewFileSet(), "", src, 0)
	if f == nil {
		return nil
	}
	have := map[string]bool{}
	for _, spec := range f.Imports {
		path, _ := strconv.Unquote(spec.Path.Value)
		name := pathName(path)
		if spec.Name != nil {
			name = spec.Name.Name
		}
		have[name] = true
	}
	var add []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		// An identifier the parser resolved is declared in src.
		if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil && imports[id.Name] != "" && !have[id.Name] {
			have[id.Name] = true
			add = append(add, id.Name)
		}
		return true
	})
	slices.Sort(add)
	return add
}

// pathName returns the name a package is imported under by default.
func pathName(path string) string {
	elems := strings.Split(path, "/")
	name := elems[len(elems)-1]
	if len(elems) > 1 && regexp.MustCompile(`^v[0-9]+$`).MatchString(name) {
		name = elems[len(elems)-2]
	}
	return strings.TrimPrefix(name, "go-")
}

// writeWorkspace makes dir a module in a workspace of its own that uses every
// module of the repository's go.work, so the snippets build against the
// repository's code and the versions its modules require.
func writeWorkspace(t *testing.T, root, dir string) {
	t.Helper()
	cmd := exec.Command("go", "work", "edit", "-json", filepath.Join(root, "go.work"))
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var work struct {
		Go      string
		Use     []struct{ DiskPath string }
		Replace []struct {
			Old, New struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "go %s\n\nuse (\n\t.\n", work.Go)
	for _, u := range work.Use {
		path := u.DiskPath
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		fmt.Fprintf(&b, "\t%q\n", path)
	}
	b.WriteString(")\n")
	// And its replace directives: they name the version of the repository's
	// modules that the tree requires, which is published only when tagged.
	for _, r := range work.Replace {
		to := r.New.Path
		if r.New.Version == "" && !filepath.IsAbs(to) {
			to = filepath.Join(root, to)
		}
		fmt.Fprintf(&b, "replace %s %s => %q %s\n", r.Old.Path, r.Old.Version, to, r.New.Version)
	}
	mod := fmt.Sprintf("module ratekit.invalid/snippets\n\ngo %s\n", work.Go)
	if err := os.WriteFile(filepath.Join(dir, "go.work"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	// The workspace's own checksums, where the developer has them.
	if sum, err := os.ReadFile(filepath.Join(root, "go.work.sum")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "go.work.sum"), sum, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var diagRE = regexp.MustCompile(`^(.+?\.(?:md|go)):(\d+)(?::(\d+))?: (.*)$`)

// attribute splits go build's output by snippet: got[i] holds the messages of
// built[i], with positions relative to the repository root; other holds what
// names no snippet.
func attribute(out []byte, dir, root string, built []snippet) (got map[int][]string, other []string) {
	got = map[int][]string{}
	cur := -1
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		if pkg, ok := strings.CutPrefix(line, "# ratekit.invalid/snippets/s"); ok {
			cur = -1
			if n, err := strconv.Atoi(pkg); err == nil && n < len(built) {
				cur = n
			}
			continue
		}
		if m := diagRE.FindStringSubmatch(line); m != nil {
			path := m[1]
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			if rel, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(rel, "..") {
				line = filepath.ToSlash(rel) + line[len(m[1]):]
			} else if rel, err := filepath.Rel(dir, path); err == nil && !strings.HasPrefix(rel, "..") {
				line = "(generated) " + filepath.ToSlash(rel) + line[len(m[1]):]
			}
		}
		if cur >= 0 {
			got[cur] = append(got[cur], line)
		} else {
			other = append(other, line)
		}
	}
	return got, other
}

var wantRE = regexp.MustCompile(`// ERROR "((?:[^"\\]|\\.)*)"`)

// checkExpected checks a harness snippet: each line marked // ERROR "regexp"
// has an error that matches, and there is no other.
func checkExpected(t *testing.T, s snippet, got []string) {
	t.Helper()
	type want struct {
		line int
		re   *regexp.Regexp
	}
	var wants []want
	scan := func(text string, first int) {
		for i, l := range strings.Split(text, "\n") {
			if m := wantRE.FindStringSubmatch(l); m != nil {
				pat, err := strconv.Unquote(`"` + m[1] + `"`)
				if err != nil {
					t.Fatalf("%s:%d: bad // ERROR pattern: %v", s.file, first+i, err)
				}
				wants = append(wants, want{first + i, regexp.MustCompile(pat)})
			}
		}
	}
	scan(s.code, s.line)
	scan(s.decls, s.dline)
	prefix := s.file + ":"
	for _, msg := range got {
		rest, ok := strings.CutPrefix(msg, prefix)
		matched := false
		if ok {
			n, _ := strconv.Atoi(rest[:strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })])
			for i, w := range wants {
				if w.line == n && w.re.MatchString(msg) {
					wants = slices.Delete(wants, i, i+1)
					matched = true
					break
				}
			}
		}
		if !matched && !strings.HasPrefix(msg, "\t") {
			t.Errorf("%s: unexpected: %s", s, msg)
		}
	}
	for _, w := range wants {
		t.Errorf("%s:%d: no error matching %q", s.file, w.line, w.re)
	}
}

func numbered(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, l := range lines {
		lines[i] = fmt.Sprintf("%4d  %s", i+1, l)
	}
	return strings.Join(lines, "\n")
}

func TestExtractErrors(t *testing.T) {
	for _, tt := range []struct {
		name, md, want string
	}{
		{"marker before text", "<!-- snippet: var r *gin.Engine -->\nSome text.\n```go\nr.Use()\n```\n", "x.md:1: a snippet comment is not followed by a ```go block"},
		{"marker before sh", "<!-- snippet: var r *gin.Engine -->\n```sh\nls\n```\n", "x.md:1: a snippet comment is not followed by a ```go block"},
		{"marker at the end", "```go\nr.Use()\n```\n<!-- snippet: var r *gin.Engine -->\n", "x.md:4: a snippet comment is not followed by a ```go block"},
		{"two markers", "<!-- snippet: var a int -->\n<!-- snippet: var b int -->\n```go\n_ = a\n```\n", "x.md:1: a snippet comment is not followed by a ```go block"},
		{"skip without reason", "<!-- snippet-skip: -->\n```go\nx\n```\n", "x.md:1: snippet-skip needs a reason"},
		{"unknown marker", "<!-- snippets: var a int -->\n```go\n_ = a\n```\n", "x.md:1: unknown snippet comment"},
		{"unterminated", "<!-- snippet: var a int\n```go\n_ = a\n```\n", "x.md:1: unterminated snippet comment"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := extract("x.md", "/x.md", tt.md)
			if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), tt.want) {
				t.Errorf("errors %q, want one starting %q", errs, tt.want)
			}
		})
	}
}

func TestExtract(t *testing.T) {
	md := "# T\n\n<!-- snippet: var r *gin.Engine -->\n\n```go\nr.Use()\n```\n\n- item\n\n  ```golang\n  x := 1\n    y := 2\n  ```\n\n```Go\n```\n"
	got, errs := extract("x.md", "/x.md", md)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := []snippet{
		{file: "x.md", abs: "/x.md", line: 6, col: 1, code: "r.Use()", decls: " var r *gin.Engine ", dline: 3, dcol: 14},
		{file: "x.md", abs: "/x.md", line: 12, col: 3, code: "x := 1\n  y := 2"},
		{file: "x.md", abs: "/x.md", line: 17, col: 1, code: ""},
	}
	if !slices.Equal(got, want) {
		t.Errorf("extract:\n got %+v\nwant %+v", got, want)
	}
}
