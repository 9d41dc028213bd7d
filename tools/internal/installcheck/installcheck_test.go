package installcheck

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/tools/internal/repo"
)

func TestOnlyRepoSums(t *testing.T) {
	header := "diff current/go.sum tidy/go.sum\n--- current/go.sum\n+++ tidy/go.sum\n@@ -1,2 +1,4 @@\n a v1.0.0 h1:x=\n"
	cases := map[string]bool{
		header + "+github.com/ratekit/ratekit v0.1.0 h1:y=\n+github.com/ratekit/ratekit/ginlimit v0.1.0/go.mod h1:z=\n": true,
		header + "+github.com/ratekit/ratekit v0.1.0 h1:y=\n+golang.org/x/text v0.44.0 h1:z=\n":                         false,
		header + "-a v1.0.0 h1:x=\n":                       false,
		"diff current/go.mod tidy/go.mod\n+require b v1\n": false,
		"": false,
	}
	for diff, want := range cases {
		if got := onlyRepoSums([]byte(diff)); got != want {
			t.Errorf("onlyRepoSums(%q) = %v, want %v", diff, got, want)
		}
	}
}

// tree is a repository of a root whose internal package a library module
// uses, and a module of commands; core is the root's internal package.
func tree(internal string) map[string]string {
	return map[string]string{
		"go.mod": "module github.com/ratekit/ratekit\n\ngo 1.26.0\n",
		"go.work": "go 1.26.0\n\nuse (\n\t.\n\t./ginlimit\n\t./examples\n)\n\nreplace (\n" +
			"\tgithub.com/ratekit/ratekit v0.1.0 => ./\n\tgithub.com/ratekit/ratekit/ginlimit v0.1.0 => ./ginlimit\n)\n",
		"internal/httpview/httpview.go": internal,
		"ginlimit/go.mod":               "module github.com/ratekit/ratekit/ginlimit\n\ngo 1.26.0\n\nrequire github.com/ratekit/ratekit v0.1.0\n\nreplace github.com/ratekit/ratekit => ../\n",
		"examples/go.mod":               "module github.com/ratekit/ratekit/examples\n\ngo 1.26.0\n\nrequire github.com/ratekit/ratekit/ginlimit v0.1.0\n\nrequire github.com/ratekit/ratekit v0.1.0 // indirect\n",
		"examples/hello/main.go":        "package main\n\nimport \"github.com/ratekit/ratekit/ginlimit\"\n\nfunc main() { println(ginlimit.Wrap(\"hello\")) }\n",
	}
}

const (
	// v1 is the internal API of the first release.
	v1 = "package httpview\n\n// Name names a request.\nfunc Name(s string) string { return \"[\" + s + \"]\" }\n"
	// grown adds to it: the previous adapter still builds.
	grown = v1 + "\n// Method names a method.\nfunc Method(s string) string { return s }\n"
	// changed renames Name: the previous adapter no longer builds.
	changed = "package httpview\n\n// Label names a request.\nfunc Label(s string) string { return \"[\" + s + \"]\" }\n"
)

func adapter(fn string) string {
	return "package ginlimit\n\nimport \"github.com/ratekit/ratekit/internal/httpview\"\n\n// Wrap labels s.\nfunc Wrap(s string) string { return httpview." + fn + "(s) }\n"
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	args = append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)
	if _, err := repo.Run(dir, os.Environ(), "git", args...); err != nil {
		t.Fatal(err)
	}
}

// TestCompat releases an adapter that uses an internal package of the
// root, then changes that package: growing it keeps the released adapter
// building against the new root, renaming a function breaks it, and the
// check says so, though the tree itself builds.
func TestCompat(t *testing.T) {
	for _, tool := range []string{"go", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("no " + tool)
		}
	}
	t.Setenv("GOPROXY", "off") // nothing outside the test's modules
	t.Setenv("GOFLAGS", "-modcacherw")
	t.Setenv("GOMODCACHE", t.TempDir())

	dir := t.TempDir()
	files := tree(v1)
	files["ginlimit/ginlimit.go"] = adapter("Name")
	write(t, dir, files)
	git(t, dir, "init", "-q")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "first release")

	check := func() error {
		t.Helper()
		c, err := newChecker(Options{Root: dir, Rev: "HEAD", Work: t.TempDir(), ModCache: t.TempDir(), Log: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.layout(); err != nil {
			t.Fatal(err)
		}
		return c.compat()
	}
	if err := check(); err != nil {
		t.Fatalf("no release tagged yet: %v", err)
	}
	for _, tag := range []string{"v0.1.0", "ginlimit/v0.1.0", "examples/v0.1.0"} {
		git(t, dir, "tag", tag)
	}

	write(t, dir, map[string]string{"internal/httpview/httpview.go": grown})
	git(t, dir, "commit", "-q", "-am", "grown")
	if err := check(); err != nil {
		t.Errorf("the internal API grew: %v", err)
	}

	write(t, dir, map[string]string{"internal/httpview/httpview.go": changed, "ginlimit/ginlimit.go": adapter("Label")})
	git(t, dir, "commit", "-q", "-am", "renamed")
	err := check()
	t.Logf("after the rename: %v", err)
	if err == nil || !strings.Contains(err.Error(), "ginlimit/v0.1.0") || !strings.Contains(err.Error(), "undefined: httpview.Name") {
		t.Errorf("the internal API changed: compat = %v, want ginlimit/v0.1.0 failing on undefined: httpview.Name", err)
	}
}
