// Package installcheck checks that an outside user can install what the
// tree would release. It publishes every released module of the tree to a
// module proxy on disk, at the version the tree's requirements name, and
// then, with GOWORK=off and that proxy before the usual one:
//
//   - checks that every module of the tree is tidy and builds and vets
//     alone, and runs the tests of each module whose dependencies, alone,
//     resolve to other versions than in go.work (the others' tests are the
//     ones go test work ran);
//   - in a module outside the repository for each adapter, store, exporter
//     and the root (testdata/), runs the README's install line (go get
//     ...@latest), go mod tidy, go build and go vet;
//   - installs examples/simulate with go install ...@latest and runs it;
//   - checks that the README's install lines are the ones run;
//   - runs the README's gin quick start and sees a 429 after its limit;
//   - builds the previous release of every library module (its files and
//     go.mod at its last tag) against the tree's root, which is how Go pairs
//     them when a user's graph selects the newer root;
//   - checks that no go doc output of a released package names an internal
//     package.
package installcheck

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"

	"github.com/ratekit/ratekit/tools/internal/repo"
)

//go:embed testdata
var consumers embed.FS

// Options says what Run checks.
type Options struct {
	// Root is the repository's directory.
	Root string
	// Rev is the git revision to check, normally HEAD: the committed tree.
	// Empty checks the working tree, what git would commit.
	Rev string
	// Work is a scratch directory; empty makes a temporary one and removes
	// it at the end.
	Work string
	// Version, when set, is the version to publish the tree at, whatever
	// its requirements name; the checks go on after a layout that breaks
	// the rules, to show what a user would get from it.
	Version string
	// ModCache is the module cache of the go commands that see the tree as
	// a user would; empty means ratekit-install-check/modcache in the
	// user's cache directory. Its copies of this repository's modules are
	// removed first, since a version of them stands for another tree at
	// every commit; the other modules stay, at paths the build cache knows.
	ModCache string
	// Log gets the progress; nil means os.Stderr.
	Log io.Writer
}

type checker struct {
	Options
	repo     *repo.Repo // the repository, for git
	tree     *repo.Repo // the files checked: an extract of Rev, or the working tree
	version  string
	proxy    string
	goproxy  string
	goflags  string
	cache    string // go env GOMODCACHE
	modcache string // the check's own module cache
	bin      string
}

// Run runs every check of the package doc and returns an error naming each
// one that failed.
func Run(o Options) (err error) {
	c, err := newChecker(o)
	if err != nil {
		return err
	}
	if o.Work == "" {
		defer os.RemoveAll(c.Work)
	}
	unlock, err := c.takeModCache()
	if err != nil {
		return fmt.Errorf("installcheck: %w", err)
	}
	defer unlock()
	steps := []struct {
		name string
		run  func() error
	}{
		{"the tree is one release", c.layout},
		{"publish every released module to a proxy on disk", c.publish},
		{"every module tidy, building and vetting alone (GOWORK=off)", c.alone},
		{"a user's module per adapter, store and exporter: the README's go get, go build, go vet", c.consumers},
		{"go install examples/simulate@latest, and run it", c.simulate},
		{"the README's gin quick start answers 429 after its limit", c.quickStart},
		{"the previous release of each library module builds against the tree's root", c.compat},
		{"no go doc output of a released package names an internal package", c.docs},
	}
	var failed []string
	for i, s := range steps {
		start := time.Now()
		fmt.Fprintf(c.Log, "install-check: %d/%d %s\n", i+1, len(steps), s.name)
		if err := s.run(); err != nil {
			fmt.Fprintf(c.Log, "install-check: FAIL %s (%.1fs):\n%s\n", s.name, time.Since(start).Seconds(), indent(err.Error()))
			failed = append(failed, s.name)
			if c.version == "" || i == 1 { // nothing else can run without a version and a published tree
				break
			}
			continue
		}
		fmt.Fprintf(c.Log, "install-check: ok (%.1fs)\n", time.Since(start).Seconds())
	}
	if len(failed) > 0 {
		return fmt.Errorf("installcheck: failed: %s", strings.Join(failed, "; "))
	}
	return nil
}

// newChecker fills in the defaults of o and what the go command says of
// its environment.
func newChecker(o Options) (*checker, error) {
	if o.Log == nil {
		o.Log = os.Stderr
	}
	c := &checker{Options: o}
	var err error
	if c.Work == "" {
		if c.Work, err = os.MkdirTemp("", "ratekit-install-"); err != nil {
			return nil, fmt.Errorf("installcheck: %w", err)
		}
	}
	if c.repo, err = repo.Load(o.Root); err != nil {
		return nil, fmt.Errorf("installcheck: %w", err)
	}
	for name, v := range map[string]*string{"GOPROXY": &c.goproxy, "GOFLAGS": &c.goflags, "GOMODCACHE": &c.cache} {
		if *v, err = repo.GoEnvValue(name); err != nil {
			return nil, fmt.Errorf("installcheck: %w", err)
		}
	}
	c.modcache = o.ModCache
	if c.modcache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = c.Work // no cache directory: a fresh module cache, slower
		}
		c.modcache = filepath.Join(dir, "ratekit-install-check", "modcache")
	}
	c.proxy = filepath.Join(c.Work, "proxy")
	c.bin = filepath.Join(c.Work, "bin")
	return c, nil
}

// takeModCache locks the check's module cache against another check and
// removes this repository's modules from it. It returns the unlock.
func (c *checker) takeModCache() (func(), error) {
	if err := os.MkdirAll(c.modcache, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(c.modcache+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, err
	}
	unlock := func() { lock.Close() } // closing the file releases the lock
	escaped, err := module.EscapePath(repo.RootPath)
	if err != nil {
		unlock()
		return nil, err
	}
	for _, dir := range []string{
		filepath.Join(c.modcache, filepath.FromSlash(path.Dir(escaped)), path.Base(escaped)+"@*"),
		filepath.Join(c.modcache, filepath.FromSlash(escaped)),
		filepath.Join(c.modcache, "cache", "download", filepath.FromSlash(path.Dir(escaped))),
	} {
		matches, err := filepath.Glob(dir)
		if err == nil {
			for _, m := range matches {
				err = errors.Join(err, removeAll(m))
			}
		}
		if err != nil {
			unlock()
			return nil, err
		}
	}
	return unlock, nil
}

// removeAll removes dir, whose files the go command may have made read-only.
func removeAll(dir string) error {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// layout extracts the revision checked (or takes the working tree) and
// checks the rules of the repo package.
func (c *checker) layout() error {
	dir := c.Root
	if c.Rev != "" {
		dir = filepath.Join(c.Work, "tree")
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := extract(c.repo.Root, c.Rev, "", dir); err != nil {
			return err
		}
	}
	var err error
	if c.tree, err = repo.Load(dir); err != nil {
		return err
	}
	v, errs := c.tree.Check()
	if c.Version != "" {
		v = c.Version
		if err := repo.CheckVersion(v); err != nil {
			return err
		}
		c.version = v
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	c.version = v
	fmt.Fprintf(c.Log, "install-check: every module requires this repository's modules at %s\n", v)
	return nil
}

// extract writes the files of rev under subdir ("" for all) to dir.
func extract(root, rev, subdir, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"archive", "--format=tar", rev}
	if subdir != "" {
		args = append(args, subdir)
	}
	archive := exec.Command("git", args...)
	archive.Dir = root
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var stderr bytes.Buffer
	archive.Stderr, untar.Stderr = &stderr, &stderr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		untar.Wait()
		return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("tar: %w: %s", err, stderr.Bytes())
	}
	return nil
}

func (c *checker) publish() error {
	if err := os.RemoveAll(c.proxy); err != nil {
		return err
	}
	mods, err := c.repo.Publish(c.proxy, c.Rev, c.version)
	if err != nil {
		return err
	}
	names := make([]string, len(mods))
	for i, m := range mods {
		names[i] = m.String()
	}
	fmt.Fprintf(c.Log, "install-check: %s\n", strings.Join(names, " "))
	return nil
}

// proxyEnv is a user's environment: GOWORK=off, the proxy on disk first,
// and the check's own module cache, whose files stay writable so that
// removing the scratch directory removes them. The go command's index of
// the module cache (kept in the build cache) is off: it takes a module
// version's files never to change, and each run publishes the tree under
// the same version, so an index of an earlier tree would hide packages the
// tree has added since.
func (c *checker) proxyEnv(extra ...string) []string {
	flags := "GOFLAGS=" + strings.TrimSpace(c.goflags+" -modcacherw")
	return repo.ProxyEnv(c.proxy, c.modcache, c.cache, c.goproxy, append([]string{flags, "GODEBUG=goindex=0"}, extra...)...)
}

// modEnv is proxyEnv letting the go command add missing go.sum lines.
func (c *checker) modEnv(extra ...string) []string {
	return c.proxyEnv(append([]string{"GOFLAGS=" + strings.TrimSpace(c.goflags+" -modcacherw -mod=mod")}, extra...)...)
}

func (c *checker) dir(m repo.Module) string {
	return filepath.Join(c.tree.Root, filepath.FromSlash(m.Dir))
}

// alone checks each module with GOWORK=off: tidy, go build, go vet, and the
// tests where its dependencies resolve otherwise than in the workspace.
func (c *checker) alone() error {
	var errs []error
	for _, m := range c.tree.Modules {
		start := time.Now()
		if err := c.aloneModule(m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Dir, err))
		}
		fmt.Fprintf(c.Log, "install-check:   %s (%.1fs)\n", m.Dir, time.Since(start).Seconds())
	}
	return errors.Join(errs...)
}

func (c *checker) aloneModule(m repo.Module) error {
	dir := c.dir(m)
	env := repo.GoEnv()
	var flags []string
	var errs []error
	if m.Commands && m.Released {
		// No replace directive: this repository's modules come from the
		// proxy. go mod tidy -diff may only add their go.sum lines, which
		// the committed go.sum leaves out (see repo.Tidy); the builds get
		// them in a copy of go.mod and go.sum.
		out, err := repo.Run(dir, c.proxyEnv(), "go", "mod", "tidy", "-diff")
		if err != nil && !onlyRepoSums(out) {
			errs = append(errs, fmt.Errorf("not tidy (run go run ./release -tidy in tools): %w", err))
		}
		tmp := filepath.Join(c.Work, "modfile", m.Dir)
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return err
		}
		for _, name := range []string{"go.mod", "go.sum"} {
			if err := copyFile(filepath.Join(dir, name), filepath.Join(tmp, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		env = c.modEnv()
		flags = []string{"-modfile=" + filepath.Join(tmp, "go.mod")}
	} else if _, err := repo.Run(dir, env, "go", "mod", "tidy", "-diff"); err != nil {
		errs = append(errs, fmt.Errorf("not tidy (run go mod tidy there, or go run ./release -tidy in tools): %w", err))
	}
	for _, verb := range []string{"build", "vet"} {
		if _, err := repo.Run(dir, env, "go", append(append([]string{verb}, flags...), "./...")...); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	if len(errs) > 0 || !m.Released || m.Commands {
		return errors.Join(errs...) // their own workspace, or go test work, runs the tests of these exact builds
	}
	alone, err := depVersions(dir, env)
	if err != nil {
		return err
	}
	work, err := depVersions(dir, os.Environ())
	if err != nil {
		return err
	}
	var differ []string
	for p, v := range alone {
		if w, ok := work[p]; ok && w != v && !strings.HasPrefix(p, repo.RootPath) {
			differ = append(differ, fmt.Sprintf("%s %s (go.work: %s)", p, v, w))
		}
	}
	if len(differ) == 0 {
		return nil
	}
	slices.Sort(differ)
	fmt.Fprintf(c.Log, "install-check: %s alone resolves %s; running its tests alone\n", m.Dir, strings.Join(differ, ", "))
	_, err = repo.Run(dir, env, "go", "test", "-short", "./...")
	return err
}

// onlyRepoSums reports whether a go mod tidy -diff output only adds go.sum
// lines of this repository's modules.
func onlyRepoSums(diff []byte) bool {
	changed := false
	for line := range strings.Lines(string(diff)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "+++ "), strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "diff "), strings.HasPrefix(line, "@@"):
		case strings.HasPrefix(line, "+"+repo.RootPath+" "), strings.HasPrefix(line, "+"+repo.RootPath+"/"):
			changed = true
		case strings.HasPrefix(line, "+"), strings.HasPrefix(line, "-"):
			return false
		}
	}
	return changed
}

// depVersions returns the version of every module that provides a package
// to the packages of the module in dir or their tests, in the build list of
// env: the module alone (GOWORK=off) or the workspace.
func depVersions(dir string, env []string) (map[string]string, error) {
	out, err := repo.Run(dir, env, "go", "list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "./...")
	if err != nil {
		return nil, err
	}
	list := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if p, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			list[p] = v
		}
	}
	return list, nil
}

// buildList returns the version of every module in the build list of the
// module (or workspace) in dir.
func buildList(dir string, env []string) (map[string]string, error) {
	out, err := repo.Run(dir, env, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
	if err != nil {
		return nil, err
	}
	list := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if p, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			list[p] = v
		}
	}
	return list, nil
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}

// consumers builds, in a module of its own outside the repository, each
// program of testdata after the install lines its doc gives.
func (c *checker) consumers() error {
	entries, err := fs.ReadDir(consumers, "testdata")
	if err != nil {
		return err
	}
	var errs []error
	installs := map[string]bool{}
	for _, e := range entries {
		lines, err := c.consumer(e.Name())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.Name(), err))
		}
		for _, l := range lines {
			installs[l] = true
		}
	}
	return errors.Join(append(errs, c.readmeInstalls(installs)...)...)
}

var readmeGet = regexp.MustCompile(`(?m)^go get (` + regexp.QuoteMeta(repo.RootPath) + `\S*)`)

// readmeInstalls checks that the README's install lines are the ones the
// consumers ran: each go get of this repository's modules there is one of
// installs, and each of installs is there.
func (c *checker) readmeInstalls(installs map[string]bool) []error {
	readme, err := os.ReadFile(filepath.Join(c.tree.Root, "README.md"))
	if err != nil {
		return []error{err}
	}
	var errs []error
	seen := map[string]bool{}
	for _, m := range readmeGet.FindAllSubmatch(readme, -1) {
		l := string(m[1])
		seen[l] = true
		if !installs[l] {
			errs = append(errs, fmt.Errorf("README.md: go get %s: no program in tools/internal/installcheck/testdata installs that way", l))
		}
	}
	for l := range installs {
		if strings.HasPrefix(l, repo.RootPath) && !seen[l] {
			errs = append(errs, fmt.Errorf("README.md: no install line go get %s", l))
		}
	}
	if !bytes.Contains(readme, []byte("\ngo install "+simulatePath+"@latest")) {
		errs = append(errs, fmt.Errorf("README.md: no install line go install %s@latest", simulatePath))
	}
	return errs
}

var installLine = regexp.MustCompile(`(?m)^// go get (\S+)$`)

func (c *checker) consumer(name string) (installs []string, err error) {
	src, err := consumers.ReadFile(path.Join("testdata", name, "main.go"))
	if err != nil {
		return nil, err
	}
	for _, l := range installLine.FindAllSubmatch(src, -1) {
		installs = append(installs, string(l[1]))
	}
	return installs, c.build(name, src, installs)
}

// build makes the module of the consumer name outside the repository, runs
// its install lines, tidies it, and builds and vets it.
func (c *checker) build(name string, src []byte, installs []string) error {
	dir := filepath.Join(c.Work, "consumers", name)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		return err
	}
	env := c.proxyEnv()
	if _, err := repo.Run(dir, env, "go", "mod", "init", "example.com/"+name); err != nil {
		return err
	}
	if len(installs) == 0 {
		return errors.New("main.go names no install line (// go get path@version)")
	}
	for _, l := range installs {
		if _, err := repo.Run(dir, env, "go", "get", l); err != nil {
			return err
		}
	}
	if _, err := repo.Run(dir, env, "go", "mod", "tidy"); err != nil {
		return err
	}
	if _, err := repo.Run(dir, env, "go", "build", "-o", filepath.Join(c.bin, name), "."); err != nil {
		return err
	}
	if _, err := repo.Run(dir, env, "go", "vet", "./..."); err != nil {
		return err
	}
	got, err := buildList(dir, env)
	if err != nil {
		return err
	}
	for p, v := range got {
		if strings.HasPrefix(p, repo.RootPath) && v != c.version {
			return fmt.Errorf("got %s %s, want %s", p, v, c.version)
		}
	}
	return nil
}

const simulatePath = repo.RootPath + "/examples/simulate"

// simulate installs examples/simulate as the README says, checks that it
// got the tree's version, and runs it.
func (c *checker) simulate() error {
	if _, err := repo.Run(c.Work, c.proxyEnv("GOBIN="+c.bin), "go", "install", simulatePath+"@latest"); err != nil {
		return err
	}
	info, err := buildinfo.ReadFile(filepath.Join(c.bin, "simulate"))
	if err != nil {
		return err
	}
	if info.Main.Path != repo.RootPath+"/examples" || info.Main.Version != c.version {
		return fmt.Errorf("go install %s@latest installed %s %s, want %s/examples %s", simulatePath, info.Main.Path, info.Main.Version, repo.RootPath, c.version)
	}
	out, err := repo.Run(c.Work, os.Environ(), filepath.Join(c.bin, "simulate"), "-svg=")
	if err != nil {
		return err
	}
	if !bytes.Contains(out, []byte("token-bucket")) {
		return fmt.Errorf("simulate printed no token-bucket row:\n%s", out)
	}
	return nil
}

// quickStart runs the gin consumer, sends requests until one is refused,
// and checks that it is a 429 that came after the limit of 100.
func (c *checker) quickStart() error {
	cmd := exec.Command(filepath.Join(c.bin, "gin"), "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addr <- a
			}
		}
		close(addr)
	}()
	var url string
	select {
	case a, ok := <-addr:
		if !ok {
			return fmt.Errorf("the quick start exited before listening: %s", stderr.Bytes())
		}
		url = "http://" + a + "/hello"
	case <-time.After(time.Minute):
		return errors.New("the quick start did not listen within a minute")
	}
	client := &http.Client{Timeout: 30 * time.Second}
	const limit = 100
	allowed := 0
	for range 3 * limit {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			allowed++
			continue
		}
		switch {
		case resp.StatusCode != http.StatusTooManyRequests:
			return fmt.Errorf("after %d allowed: status %d, want 429", allowed, resp.StatusCode)
		case allowed < limit:
			return fmt.Errorf("429 after %d allowed, want at least %d", allowed, limit)
		case resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "":
			return fmt.Errorf("429 without Retry-After or RateLimit: %v", resp.Header)
		}
		fmt.Fprintf(c.Log, "install-check: %d allowed, then 429 with Retry-After: %s, RateLimit: %s\n",
			allowed, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"))
		return nil
	}
	return fmt.Errorf("%d requests allowed, no 429", allowed)
}

// compat builds each library module's last release against the tree's
// root: the shared internal packages only grow compatibly.
func (c *checker) compat() error {
	var errs []error
	checked := 0
	for _, m := range c.tree.Released() {
		if m.Dir == "." || m.Commands {
			continue
		}
		tag, err := lastTag(c.repo.Root, m.Dir)
		if err != nil {
			return err
		}
		if tag == "" {
			continue
		}
		checked++
		if err := c.compatModule(m, tag); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tag, err))
		}
	}
	if checked == 0 {
		fmt.Fprintln(c.Log, "install-check: no library module has a release tag yet: nothing to build against the tree's root; this release is the baseline the next is checked against")
	}
	return errors.Join(errs...)
}

// lastTag returns the highest release tag of the module in dir reachable
// from HEAD, "" when there is none.
func lastTag(root, dir string) (string, error) {
	out, err := repo.Run(root, os.Environ(), "git", "tag", "--merged", "HEAD", "--list", dir+"/v*")
	if err != nil {
		return "", err
	}
	best := ""
	for line := range strings.Lines(string(out)) {
		v := strings.TrimPrefix(strings.TrimSpace(line), dir+"/")
		if semver.IsValid(v) && (best == "" || semver.Compare(v, best) > 0) {
			best = v
		}
	}
	if best == "" {
		return "", nil
	}
	return dir + "/" + best, nil
}

func (c *checker) compatModule(m repo.Module, tag string) error {
	base := filepath.Join(c.Work, "compat", strings.ReplaceAll(tag, "/", "@"))
	if err := os.RemoveAll(base); err != nil {
		return err
	}
	old := filepath.Join(base, "old")
	if err := extract(c.repo.Root, tag, m.Dir, old); err != nil {
		return err
	}
	oldDir := filepath.Join(old, filepath.FromSlash(m.Dir))
	data, err := os.ReadFile(filepath.Join(oldDir, "go.mod"))
	if err != nil {
		return err
	}
	oldMod, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return err
	}
	// A user's module: the old release of m, and the tree's root and other
	// modules, which a newer requirement elsewhere in the graph selects.
	user := &modfile.File{}
	user.AddModuleStmt("example.com/compat")
	user.AddGoStmt(c.tree.Modules[0].File.Go.Version)
	tagVersion := path.Base(tag)
	user.AddNewRequire(m.Path, tagVersion, false)
	user.AddReplace(m.Path, "", oldDir, "")
	for _, o := range c.tree.Released() {
		if o.Path == m.Path || o.Commands {
			continue
		}
		user.AddNewRequire(o.Path, c.version, false)
		user.AddReplace(o.Path, "", c.dir(o), "")
	}
	for _, req := range oldMod.Require {
		if !strings.HasPrefix(req.Mod.Path, repo.RootPath) {
			user.AddNewRequire(req.Mod.Path, req.Mod.Version, true)
		}
	}
	gomod, err := user.Format()
	if err != nil {
		return err
	}
	dir := filepath.Join(base, "user")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), gomod, 0o644); err != nil {
		return err
	}
	_, err = repo.Run(dir, c.modEnv(), "go", "build", m.Path+"/...")
	return err
}

// docs runs go doc -all on every released package of every released module
// and fails on a line naming an internal package.
func (c *checker) docs() error {
	type pkg struct{ dir, path, name string }
	var pkgs []pkg
	internal := map[string]bool{}
	for _, m := range c.tree.Released() {
		out, err := repo.Run(c.dir(m), os.Environ(), "go", "list", "-f", "{{.ImportPath}} {{.Name}}", "./...")
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(out)) {
			p, name, _ := strings.Cut(strings.TrimSpace(line), " ")
			switch {
			case strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal"):
				internal[name] = true
			case name != "main":
				pkgs = append(pkgs, pkg{c.dir(m), p, name})
			}
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range internal {
			if !yield(regexp.QuoteMeta(n)) {
				return
			}
		}
	})
	if len(names) == 0 {
		return nil
	}
	bad := regexp.MustCompile(`\b(` + strings.Join(names, "|") + `)\.[A-Za-z_]|/internal/`)
	var errs []error
	for _, p := range pkgs {
		out, err := repo.Run(p.dir, os.Environ(), "go", "doc", "-all", p.path)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(out)) {
			if bad.MatchString(line) {
				errs = append(errs, fmt.Errorf("go doc %s: %s", p.path, strings.TrimSpace(line)))
			}
		}
	}
	return errors.Join(errs...)
}
