// Package repo knows the modules of the ratekit repository: where they are,
// which of them a release tags, the rules their go.mod files follow so that
// the committed tree is a release, and how to rewrite and tidy them.
//
// The rules (see CONTRIBUTING.md, "Modules" and "Releasing"):
//
//   - Every requirement of a module of this repository, in any go.mod, names
//     the same version: the release the tree is, or will be when tagged.
//   - A library module replaces each module of this repository it requires
//     with its directory (replace github.com/ratekit/ratekit => ../), so that
//     go mod tidy and GOWORK=off builds work before the version is published.
//     The go command ignores a dependency's replace directives, so users get
//     the required version.
//   - A released module that holds a main package has no replace directive
//     at all, since go install path@version refuses one; go.work covers its
//     development.
//   - A released module requires no unreleased one, and replaces nothing
//     outside this repository (users would build other code than ours).
//   - go.work uses exactly the released modules, and replaces each released
//     module that a go.mod requires, at the tree's version, with its
//     directory: in workspace mode the go command still reads the go.mod of
//     every version required, and examples' requirements have no replace
//     directive to find it by.
package repo

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// RootPath is the root module's path.
const RootPath = "github.com/ratekit/ratekit"

// unreleased are the modules a release does not tag: the peer comparison,
// the fault harness and these tools, whose only users are the maintainers.
// They follow the version rule all the same, so the tree stays one release.
var unreleased = map[string]bool{"benchmarks": true, "faults": true, "tools": true}

// Module is one go.mod of the repository.
type Module struct {
	// Dir is the module's directory, slash-separated and relative to the
	// repository root: "." for the root, "ginlimit", "redisstore".
	Dir string
	// Path is the module path.
	Path string
	// File is the parsed go.mod.
	File *modfile.File
	// Commands reports whether the module holds a main package (outside
	// testdata and tests), which users install with go install.
	Commands bool
	// Released reports whether a release tags the module.
	Released bool
}

// Tag returns the tag that releases m at version v: "v0.1.0" for the root,
// "ginlimit/v0.1.0" for a nested module.
func (m Module) Tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// Repo is the repository's modules and its go.work.
type Repo struct {
	// Root is the repository's absolute directory.
	Root string
	// Modules are every go.mod found, the root first, then by directory.
	Modules []Module
	// Work is the root's parsed go.work, nil when there is none.
	Work *modfile.WorkFile
}

// Load finds every module under root, skipping what the go command skips
// (directories named testdata or vendor, or starting with "." or "_").
func Load(root string) (*Repo, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("repo: %w", err)
	}
	r := &Repo{Root: root}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		dir, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		dir = filepath.ToSlash(dir)
		if f.Module == nil {
			return fmt.Errorf("%s: no module directive", p)
		}
		r.Modules = append(r.Modules, Module{
			Dir:      dir,
			Path:     f.Module.Mod.Path,
			File:     f,
			Released: !unreleased[dir],
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("repo: %w", err)
	}
	slices.SortFunc(r.Modules, func(a, b Module) int {
		if a.Dir == "." || b.Dir == "." {
			return boolInt(b.Dir == ".") - boolInt(a.Dir == ".")
		}
		return strings.Compare(a.Dir, b.Dir)
	})
	if len(r.Modules) == 0 || r.Modules[0].Dir != "." {
		return nil, fmt.Errorf("repo: %s has no go.mod", root)
	}
	dirs := map[string]bool{}
	for _, m := range r.Modules {
		dirs[m.Dir] = true
	}
	for i := range r.Modules {
		r.Modules[i].Commands, err = hasMain(filepath.Join(root, filepath.FromSlash(r.Modules[i].Dir)), dirs, r.Modules[i].Dir)
		if err != nil {
			return nil, fmt.Errorf("repo: %w", err)
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("repo: %w", err)
	default:
		if r.Work, err = modfile.ParseWork("go.work", data, nil); err != nil {
			return nil, fmt.Errorf("repo: %w", err)
		}
	}
	return r, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// hasMain reports whether the module in dir (moduleDir relative to the
// repository) has a non-test Go file in package main, outside the nested
// modules listed in modDirs.
func hasMain(dir string, modDirs map[string]bool, moduleDir string) (bool, error) {
	found := false
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		if d.IsDir() {
			if p == dir {
				return nil
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			if skipDir(d.Name()) || modDirs[path.Join(moduleDir, filepath.ToSlash(rel))] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		found = f.Name.Name == "main"
		return nil
	})
	return found, err
}

// Module returns the module with the given path, if the repository has one.
func (r *Repo) Module(modPath string) (Module, bool) {
	for _, m := range r.Modules {
		if m.Path == modPath {
			return m, true
		}
	}
	return Module{}, false
}

// Released returns the modules a release tags, the root first.
func (r *Repo) Released() []Module {
	var out []Module
	for _, m := range r.Modules {
		if m.Released {
			out = append(out, m)
		}
	}
	return out
}

// inRepo reports whether modPath is the root's path or below it, a path
// only this repository may publish.
func inRepo(modPath string) bool {
	return modPath == RootPath || strings.HasPrefix(modPath, RootPath+"/")
}

// Version returns the version that every requirement of a module of this
// repository names, with an error when they disagree or when there are none.
func (r *Repo) Version() (string, error) {
	seen := map[string][]string{}
	for _, m := range r.Modules {
		for _, req := range m.File.Require {
			if inRepo(req.Mod.Path) {
				seen[req.Mod.Version] = append(seen[req.Mod.Version], m.Dir+"/go.mod: "+req.Mod.Path)
			}
		}
	}
	switch len(seen) {
	case 0:
		return "", errors.New("repo: no module requires another module of the repository")
	case 1:
		for v := range seen {
			return v, nil
		}
	}
	var b strings.Builder
	b.WriteString("repo: the requirements of this repository's modules name more than one version:")
	for _, v := range slices.Sorted(maps.Keys(seen)) {
		fmt.Fprintf(&b, "\n  %s: %s", v, strings.Join(seen[v], ", "))
	}
	return "", errors.New(b.String())
}

// CheckVersion reports whether v can name a release of every module: a
// canonical semantic version of major 0 or 1 (the module paths carry no
// major suffix), other than the v0.0.0 placeholder.
func CheckVersion(v string) error {
	switch {
	case !semver.IsValid(v) || semver.Canonical(v) != v:
		return fmt.Errorf("repo: %q is not a canonical semantic version such as v0.1.0", v)
	case semver.Build(v) != "":
		return fmt.Errorf("repo: %s: a module version carries no build metadata", v)
	case semver.Major(v) != "v0" && semver.Major(v) != "v1":
		return fmt.Errorf("repo: %s: a major version above v1 needs a /%s suffix on every module path", v, semver.Major(v))
	case v == "v0.0.0":
		return errors.New("repo: v0.0.0 is a placeholder no release has")
	}
	return nil
}

// Check returns every way in which the repository breaks the rules of the
// package doc, and the version its requirements name.
func (r *Repo) Check() (string, []error) {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	v, err := r.Version()
	if err != nil {
		errs = append(errs, err)
	} else if err := CheckVersion(v); err != nil {
		fail("%v (the version the tree's requirements name)", err)
	}
	rootGo := ""
	if r.Modules[0].File.Go != nil {
		rootGo = r.Modules[0].File.Go.Version
	}
	for _, m := range r.Modules {
		gomod := path.Join(m.Dir, "go.mod")
		want := RootPath
		if m.Dir != "." {
			want = RootPath + "/" + m.Dir
		}
		if m.Path != want {
			fail("%s: module %s, want %s: a module's path names its directory", gomod, m.Path, want)
		}
		if m.File.Go == nil || m.File.Go.Version != rootGo {
			got := "none"
			if m.File.Go != nil {
				got = m.File.Go.Version
			}
			fail("%s: go %s, want go %s as the root", gomod, got, rootGo)
		}
		for _, req := range m.File.Require {
			if !inRepo(req.Mod.Path) {
				continue
			}
			dep, ok := r.Module(req.Mod.Path)
			switch {
			case !ok:
				fail("%s: requires %s, which is no module of this repository", gomod, req.Mod.Path)
			case m.Released && !dep.Released:
				fail("%s: requires %s, which no release tags", gomod, req.Mod.Path)
			}
		}
		replaced := map[string]bool{}
		for _, rep := range m.File.Replace {
			old := rep.Old.Path
			switch {
			case m.Released && m.Commands:
				fail("%s: replace %s: a module with a main package has no replace directive, which go install %s/...@version refuses (go.work covers development)", gomod, old, m.Path)
			case !inRepo(old):
				if m.Released {
					fail("%s: replace %s: a released module replaces nothing outside this repository (users would build other code)", gomod, old)
				}
			default:
				dep, ok := r.Module(old)
				target := path.Clean(path.Join(m.Dir, filepath.ToSlash(rep.New.Path)))
				switch {
				case !ok:
					fail("%s: replace %s: no module of this repository", gomod, old)
				case rep.Old.Version != "" || rep.New.Version != "" || !modfile.IsDirectoryPath(rep.New.Path) || target != dep.Dir:
					fail("%s: replace %s => %s, want %s => %s", gomod, old, rep.New.Path, old, relDir(m.Dir, dep.Dir))
				}
				replaced[old] = true
			}
		}
		if !m.Released || !m.Commands {
			for _, req := range m.File.Require {
				if dep, ok := r.Module(req.Mod.Path); ok && !replaced[req.Mod.Path] {
					fail("%s: requires %s without replace %s => %s, so go mod tidy there needs the version published", gomod, req.Mod.Path, req.Mod.Path, relDir(m.Dir, dep.Dir))
				}
			}
		}
	}
	errs = append(errs, r.checkWork()...)
	return v, errs
}

// relDir is the replacement path from module directory from to module
// directory to: "../", "../redisstore".
func relDir(from, to string) string {
	up := strings.Repeat("../", strings.Count(from, "/")+1)
	if to == "." {
		return up
	}
	return up + to
}

func (r *Repo) checkWork() []error {
	if r.Work == nil {
		return []error{errors.New("go.work: missing; it ties the released modules together for development")}
	}
	var errs []error
	used := map[string]bool{}
	for _, u := range r.Work.Use {
		used[path.Clean(filepath.ToSlash(u.Path))] = true
	}
	for _, m := range r.Modules {
		switch {
		case m.Released && !used[m.Dir]:
			errs = append(errs, fmt.Errorf("go.work: no use of ./%s, a released module", m.Dir))
		case !m.Released && used[m.Dir]:
			errs = append(errs, fmt.Errorf("go.work: use of ./%s, which has a workspace of its own", m.Dir))
		}
		delete(used, m.Dir)
	}
	for _, d := range slices.Sorted(maps.Keys(used)) {
		errs = append(errs, fmt.Errorf("go.work: use of %s, which holds no module", d))
	}
	v, err := r.Version()
	if err != nil {
		return errs // Check reports it
	}
	want := r.workReplaces()
	for _, rep := range r.Work.Replace {
		m, ok := r.Module(rep.Old.Path)
		switch {
		case !ok || !want[rep.Old.Path]:
			errs = append(errs, fmt.Errorf("go.work: replace %s: go.work replaces only this repository's modules that a go.mod requires (development would build other code than users get)", rep.Old.Path))
		case rep.Old.Version != v || rep.New.Version != "" || path.Clean(filepath.ToSlash(rep.New.Path)) != m.Dir:
			errs = append(errs, fmt.Errorf("go.work: replace %s %s => %s, want %s %s => %s", rep.Old.Path, rep.Old.Version, rep.New.Path, rep.Old.Path, v, workDir(m.Dir)))
		}
		delete(want, rep.Old.Path)
	}
	for _, p := range slices.Sorted(maps.Keys(want)) {
		m, _ := r.Module(p)
		errs = append(errs, fmt.Errorf("go.work: no replace %s %s => %s: the workspace would fetch that version's go.mod, which is published only when it is tagged", p, v, workDir(m.Dir)))
	}
	return errs
}

// workReplaces are the modules go.work replaces at the tree's version: every
// released module that a go.mod requires. In workspace mode the go command
// still reads the go.mod of each version a module requires; a module with
// a replace directive for it (a library's replace => ../) covers it, but
// one without (examples) would make the workspace fetch a version that is
// published only when it is tagged.
func (r *Repo) workReplaces() map[string]bool {
	want := map[string]bool{}
	for _, m := range r.Modules {
		for _, req := range m.File.Require {
			if dep, ok := r.Module(req.Mod.Path); ok && dep.Released {
				want[dep.Path] = true
			}
		}
	}
	return want
}

// workDir is a module directory as go.work spells it: "./", "./ginlimit".
func workDir(dir string) string {
	if dir == "." {
		return "./"
	}
	return "./" + dir
}

// setWorkVersion makes go.work replace every module of workReplaces at
// version v, and nothing else of this repository, keeping its comments.
func (r *Repo) setWorkVersion(v string) (bool, error) {
	if r.Work == nil {
		return false, nil
	}
	want := r.workReplaces()
	changed := false
	for _, p := range slices.Sorted(maps.Keys(want)) {
		m, _ := r.Module(p)
		ok := slices.ContainsFunc(r.Work.Replace, func(rep *modfile.Replace) bool {
			return rep.Old.Path == p && rep.Old.Version == v && rep.New.Path == workDir(m.Dir) && rep.New.Version == ""
		})
		if !ok {
			if err := r.Work.AddReplace(p, v, workDir(m.Dir), ""); err != nil {
				return false, err
			}
			changed = true
		}
	}
	for _, rep := range slices.Clone(r.Work.Replace) {
		if inRepo(rep.Old.Path) && (!want[rep.Old.Path] || rep.Old.Version != v) {
			if err := r.Work.DropReplace(rep.Old.Path, rep.Old.Version); err != nil {
				return false, err
			}
			changed = true
		}
	}
	return changed, nil
}

// SetVersion makes every requirement of a module of this repository, in
// every go.mod, name version v, and go.work's replace directives replace
// that version; it writes the files it changed and returns their names,
// relative to the repository.
func (r *Repo) SetVersion(v string) ([]string, error) {
	if err := CheckVersion(v); err != nil {
		return nil, err
	}
	var wrote []string
	for _, m := range r.Modules {
		changed := false
		for _, req := range m.File.Require {
			if inRepo(req.Mod.Path) && req.Mod.Version != v {
				if err := m.File.AddRequire(req.Mod.Path, v); err != nil {
					return wrote, fmt.Errorf("repo: %s/go.mod: %w", m.Dir, err)
				}
				changed = true
			}
		}
		if !changed {
			continue
		}
		m.File.Cleanup()
		data, err := m.File.Format()
		if err != nil {
			return wrote, fmt.Errorf("repo: %s/go.mod: %w", m.Dir, err)
		}
		name := path.Join(m.Dir, "go.mod")
		if err := os.WriteFile(filepath.Join(r.Root, filepath.FromSlash(name)), data, 0o644); err != nil {
			return wrote, fmt.Errorf("repo: %w", err)
		}
		wrote = append(wrote, name)
	}
	changed, err := r.setWorkVersion(v)
	if err != nil {
		return wrote, fmt.Errorf("repo: go.work: %w", err)
	}
	if changed {
		r.Work.Cleanup()
		data := modfile.Format(r.Work.Syntax)
		if err := os.WriteFile(filepath.Join(r.Root, "go.work"), data, 0o644); err != nil {
			return wrote, fmt.Errorf("repo: %w", err)
		}
		wrote = append(wrote, "go.work")
	}
	return wrote, nil
}

// GoEnv is the environment for a go command that must see one module alone:
// the caller's, with GOWORK=off.
func GoEnv(extra ...string) []string {
	return append(append(os.Environ(), "GOWORK=off"), extra...)
}

// Run runs a command in dir with env, returning its combined output, and an
// error that quotes it when the command fails.
func Run(dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		var msg []string
		for line := range strings.Lines(string(out)) {
			if !strings.HasPrefix(line, "go: downloading ") {
				msg = append(msg, strings.TrimRight(line, "\n"))
			}
		}
		return out, fmt.Errorf("%s %s (in %s): %w\n%s", name, strings.Join(args, " "), dir, err, strings.Join(msg, "\n"))
	}
	return out, nil
}

// Tidy runs go mod tidy in every module, alone (GOWORK=off). A library
// module finds this repository's modules through its replace directives. A
// module without them (one that holds commands) is tidied with a copy of
// its go.mod that replaces every module of this repository with its
// directory; its go.mod gets the result without those replace directives,
// and its go.sum the result, which holds no line for this repository's
// modules: their hashes change with every commit, go.work needs none, and
// the checksum database vouches for a release's. A requirement of this
// repository's modules that tidy adds names the tree's version.
func (r *Repo) Tidy() error {
	v, err := r.Version()
	if err != nil {
		return err
	}
	for _, m := range r.Modules {
		dir := filepath.Join(r.Root, filepath.FromSlash(m.Dir))
		if !m.Commands || !m.Released {
			if _, err := Run(dir, GoEnv(), "go", "mod", "tidy"); err != nil {
				return fmt.Errorf("repo: %w", err)
			}
			continue
		}
		if err := r.tidyWithoutReplace(m, dir, v); err != nil {
			return fmt.Errorf("repo: %s: %w", m.Dir, err)
		}
	}
	return nil
}

func (r *Repo) tidyWithoutReplace(m Module, dir, v string) error {
	tmp, err := os.MkdirTemp("", "ratekit-tidy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return err
	}
	for _, o := range r.Modules {
		if o.Released && o.Path != m.Path {
			if err := f.AddReplace(o.Path, "", filepath.Join(r.Root, filepath.FromSlash(o.Dir)), ""); err != nil {
				return err
			}
		}
	}
	withReplace, err := f.Format()
	if err != nil {
		return err
	}
	tmpMod := filepath.Join(tmp, "go.mod")
	if err := os.WriteFile(tmpMod, withReplace, 0o644); err != nil {
		return err
	}
	if sum, err := os.ReadFile(filepath.Join(dir, "go.sum")); err == nil {
		if err := os.WriteFile(filepath.Join(tmp, "go.sum"), sum, 0o644); err != nil {
			return err
		}
	}
	if _, err := Run(dir, GoEnv(), "go", "mod", "tidy", "-modfile="+tmpMod); err != nil {
		return err
	}
	data, err = os.ReadFile(tmpMod)
	if err != nil {
		return err
	}
	if f, err = modfile.Parse("go.mod", data, nil); err != nil {
		return err
	}
	for _, o := range r.Modules {
		if o.Released && o.Path != m.Path {
			if err := f.DropReplace(o.Path, ""); err != nil {
				return err
			}
		}
	}
	for _, req := range f.Require {
		// A requirement tidy added names the directory's zero pseudo-version.
		if inRepo(req.Mod.Path) && req.Mod.Version != v {
			if err := f.AddRequire(req.Mod.Path, v); err != nil {
				return err
			}
		}
	}
	f.Cleanup()
	tidied, err := f.Format()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), tidied, 0o644); err != nil {
		return err
	}
	sum, err := os.ReadFile(filepath.Join(tmp, "go.sum"))
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Remove(filepath.Join(dir, "go.sum")); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
}
