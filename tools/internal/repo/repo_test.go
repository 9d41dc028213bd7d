package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiles writes files (slash-separated names relative to dir) to dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
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

// goodTree is a small repository that follows every rule: the root, a
// library that needs it, a module of commands that needs both, and a tool
// module of its own.
func goodTree() map[string]string {
	return map[string]string{
		"go.mod":          "module github.com/ratekit/ratekit\n\ngo 1.26.0\n",
		"core/core.go":    "package core\n\n// Answer is the answer.\nconst Answer = 42\n",
		"internal/x/x.go": "package x\n\n// Twice doubles n.\nfunc Twice(n int) int { return 2 * n }\n",
		"go.work": `go 1.26.0

use (
	.
	./ginlimit
	./examples
)

// The tree's version, published only when tagged.
replace (
	github.com/ratekit/ratekit v0.1.0 => ./
	github.com/ratekit/ratekit/ginlimit v0.1.0 => ./ginlimit
)
`,
		"ginlimit/go.mod": `module github.com/ratekit/ratekit/ginlimit

go 1.26.0

require github.com/ratekit/ratekit v0.1.0

replace github.com/ratekit/ratekit => ../
`,
		"ginlimit/ginlimit.go": "package ginlimit\n\nimport (\n\t\"github.com/ratekit/ratekit/core\"\n\t\"github.com/ratekit/ratekit/internal/x\"\n)\n\n// Limit is twice the answer.\nconst Limit = core.Answer\n\n// Twice is x.Twice.\nfunc Twice(n int) int { return x.Twice(n) }\n",
		"examples/go.mod": `module github.com/ratekit/ratekit/examples

go 1.26.0

require (
	github.com/ratekit/ratekit v0.1.0
	github.com/ratekit/ratekit/ginlimit v0.1.0
)
`,
		"examples/hello/main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/ratekit/ratekit/core\"\n\t\"github.com/ratekit/ratekit/ginlimit\"\n)\n\nfunc main() { fmt.Println(core.Answer, ginlimit.Twice(ginlimit.Limit)) }\n",
		"tools/go.mod":           "module github.com/ratekit/ratekit/tools\n\ngo 1.26.0\n",
		"tools/go.work":          "go 1.26.0\n\nuse .\n",
		"tools/tool/main.go":     "package main\n\nfunc main() {}\n",
		"LICENSE":                "a license\n",
	}
}

func load(t *testing.T, files map[string]string) *Repo {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	r, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLoad(t *testing.T) {
	r := load(t, goodTree())
	var got []string
	for _, m := range r.Modules {
		got = append(got, m.Dir+" "+m.Path+" commands="+boolString(m.Commands)+" released="+boolString(m.Released))
	}
	want := []string{
		". github.com/ratekit/ratekit commands=false released=true",
		"examples github.com/ratekit/ratekit/examples commands=true released=true",
		"ginlimit github.com/ratekit/ratekit/ginlimit commands=false released=true",
		"tools github.com/ratekit/ratekit/tools commands=true released=false",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("modules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, want := r.Modules[2].Tag("v0.1.0"), "ginlimit/v0.1.0"; got != want {
		t.Errorf("Tag = %s, want %s", got, want)
	}
	if got, want := r.Modules[0].Tag("v0.1.0"), "v0.1.0"; got != want {
		t.Errorf("root Tag = %s, want %s", got, want)
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func TestCheckGood(t *testing.T) {
	v, errs := load(t, goodTree()).Check()
	if len(errs) > 0 || v != "v0.1.0" {
		t.Errorf("Check = %s, %v; want v0.1.0 and no error", v, errs)
	}
}

// TestCheckBad breaks one rule at a time and wants the error that names it.
func TestCheckBad(t *testing.T) {
	cases := []struct {
		name string
		edit func(files map[string]string)
		want string
	}{
		{"placeholder version", func(f map[string]string) {
			for _, n := range []string{"ginlimit/go.mod", "examples/go.mod", "go.work"} {
				f[n] = strings.ReplaceAll(f[n], "v0.1.0", "v0.0.0")
			}
		}, "v0.0.0 is a placeholder"},
		{"two versions", func(f map[string]string) {
			f["examples/go.mod"] = strings.Replace(f["examples/go.mod"], "ratekit v0.1.0", "ratekit v0.2.0", 1)
		}, "more than one version"},
		{"a command module with a replace", func(f map[string]string) {
			f["examples/go.mod"] += "\nreplace github.com/ratekit/ratekit => ../\n"
		}, "go install github.com/ratekit/ratekit/examples/...@version refuses"},
		{"a library without its replace", func(f map[string]string) {
			f["ginlimit/go.mod"] = strings.Replace(f["ginlimit/go.mod"], "replace github.com/ratekit/ratekit => ../\n", "", 1)
		}, "without replace github.com/ratekit/ratekit => ../"},
		{"a replace to another directory", func(f map[string]string) {
			f["ginlimit/go.mod"] = strings.Replace(f["ginlimit/go.mod"], "=> ../", "=> ../examples", 1)
		}, "want github.com/ratekit/ratekit => ../"},
		{"a replace of another module", func(f map[string]string) {
			f["ginlimit/go.mod"] += "replace golang.org/x/text => ../text\n"
		}, "replaces nothing outside this repository"},
		{"a released module needing an unreleased one", func(f map[string]string) {
			f["ginlimit/go.mod"] += "require github.com/ratekit/ratekit/tools v0.1.0\nreplace github.com/ratekit/ratekit/tools => ../tools\n"
		}, "which no release tags"},
		{"a module path that is not its directory", func(f map[string]string) {
			f["ginlimit/go.mod"] = strings.Replace(f["ginlimit/go.mod"], "ratekit/ginlimit\n", "ratekit/gin\n", 1)
		}, "a module's path names its directory"},
		{"another go directive", func(f map[string]string) {
			f["ginlimit/go.mod"] = strings.Replace(f["ginlimit/go.mod"], "go 1.26.0", "go 1.27.0", 1)
		}, "want go 1.26.0 as the root"},
		{"go.work without a released module", func(f map[string]string) {
			f["go.work"] = strings.Replace(f["go.work"], "\t./examples\n", "", 1)
		}, "no use of ./examples"},
		{"go.work using a tool module", func(f map[string]string) {
			f["go.work"] = strings.Replace(f["go.work"], "\t./examples\n", "\t./examples\n\t./tools\n", 1)
		}, "use of ./tools, which has a workspace of its own"},
		{"go.work without the tree's version", func(f map[string]string) {
			f["go.work"] = strings.Replace(f["go.work"], "\tgithub.com/ratekit/ratekit/ginlimit v0.1.0 => ./ginlimit\n", "", 1)
		}, "no replace github.com/ratekit/ratekit/ginlimit v0.1.0 => ./ginlimit"},
		{"go.work replacing another version", func(f map[string]string) {
			f["go.work"] = strings.Replace(f["go.work"], "ginlimit v0.1.0 =>", "ginlimit v0.0.9 =>", 1)
		}, "want github.com/ratekit/ratekit/ginlimit v0.1.0 => ./ginlimit"},
		{"go.work replacing a dependency", func(f map[string]string) {
			f["go.work"] += "replace golang.org/x/text => ../text\n"
		}, "go.work replaces only this repository's modules"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := goodTree()
			c.edit(files)
			_, errs := load(t, files).Check()
			var msgs []string
			found := false
			for _, err := range errs {
				msgs = append(msgs, err.Error())
				found = found || strings.Contains(err.Error(), c.want)
			}
			if !found {
				t.Errorf("Check errors:\n%s\nwant one containing %q", strings.Join(msgs, "\n"), c.want)
			}
		})
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"v0.1.0": true, "v1.2.3": true, "v0.2.0-rc.1": true,
		"v0.0.0": false, "0.1.0": false, "v0.1": false, "v2.0.0": false, "v0.1.0+meta": false,
	} {
		if err := CheckVersion(v); (err == nil) != ok {
			t.Errorf("CheckVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

func TestSetVersion(t *testing.T) {
	r := load(t, goodTree())
	wrote, err := r.SetVersion("v0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(wrote, " "), "examples/go.mod ginlimit/go.mod go.work"; got != want {
		t.Errorf("wrote %s, want %s", got, want)
	}
	r, err = Load(r.Root)
	if err != nil {
		t.Fatal(err)
	}
	if v, errs := r.Check(); len(errs) > 0 || v != "v0.2.0" {
		t.Errorf("after SetVersion: Check = %s, %v; want v0.2.0 and no error", v, errs)
	}
	work, err := os.ReadFile(filepath.Join(r.Root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(work), "// The tree's version, published only when tagged.\nreplace (") {
		t.Errorf("go.work lost its comment:\n%s", work)
	}
	if _, err := r.SetVersion("v0.0.0"); err == nil {
		t.Error("SetVersion(v0.0.0) did not fail")
	}
}

// offlineGo skips the test without a go command, and makes the ones it
// runs use no network: the test modules need nothing outside themselves.
func offlineGo(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOFLAGS", "-modcacherw")
	t.Setenv("GOMODCACHE", t.TempDir())
}

func TestTidy(t *testing.T) {
	offlineGo(t)
	files := goodTree()
	files["examples/go.mod"] = strings.Replace(files["examples/go.mod"], "\tgithub.com/ratekit/ratekit/ginlimit v0.1.0\n", "", 1)
	r := load(t, files)
	if err := r.Tidy(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(r.Root, "examples", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != goodTree()["examples/go.mod"] {
		t.Errorf("examples/go.mod after Tidy:\n%s\nwant:\n%s", got, goodTree()["examples/go.mod"])
	}
	if _, err := os.Stat(filepath.Join(r.Root, "examples", "go.sum")); err == nil {
		t.Error("examples/go.sum written, with no module outside the repository to hold")
	}
}

// TestPublish publishes a tree from git and from the working tree, and
// builds a module outside it against each proxy, with no other proxy.
func TestPublish(t *testing.T) {
	offlineGo(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	r := load(t, goodTree())
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "."},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "tree"},
	} {
		if _, err := Run(r.Root, os.Environ(), "git", args...); err != nil {
			t.Fatal(err)
		}
	}
	// A change after the commit: the working tree's proxy has it, HEAD's not.
	writeFiles(t, r.Root, map[string]string{"core/core.go": "package core\n\n// Answer is the answer.\nconst Answer = 43\n"})
	for rev, want := range map[string]string{"HEAD": "42 84\n", "": "43 86\n"} {
		proxy := t.TempDir()
		if _, err := r.Publish(proxy, rev, "v0.1.0"); err != nil {
			t.Fatal(err)
		}
		user := t.TempDir()
		writeFiles(t, user, map[string]string{
			"go.mod":  "module example.com/user\n\ngo 1.26.0\n",
			"main.go": goodTree()["examples/hello/main.go"],
		})
		env := ProxyEnv(proxy, t.TempDir(), t.TempDir(), "off")
		if _, err := Run(user, env, "go", "get", "github.com/ratekit/ratekit/ginlimit@latest"); err != nil {
			t.Fatal(err)
		}
		out, err := Run(user, env, "go", "run", ".")
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != want {
			t.Errorf("rev %q: the user's program printed %q, want %q", rev, out, want)
		}
		if _, err := os.Stat(filepath.Join(proxy, "github.com", "ratekit", "ratekit", "tools")); err == nil {
			t.Errorf("rev %q: the unreleased tools module was published", rev)
		}
	}
}
