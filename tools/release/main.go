// Command release cuts a release of every module of the repository at one
// version (CONTRIBUTING.md, "Releasing"):
//
//	cd tools && go run ./release v0.2.0        # edit the tree, check it, print the commit and tags
//	cd tools && go run ./release -tag v0.2.0   # the same, then commit, check the commit, and create the tags
//	cd tools && go run ./release -tidy         # only tidy every module, at the version the tree names
//
// It sets every requirement of a module of this repository, in every
// go.mod, to the version; tidies every module alone (GOWORK=off); moves
// CHANGELOG.md's [Unreleased] section under the version; checks the tree
// (the layout rules, and the install check of tools/installcheck); and
// prints the tags: v0.2.0 for the root, ginlimit/v0.2.0 and so on for
// every released nested module. With -tag it commits the files it changed,
// runs the install check on that commit, and creates the annotated tags;
// it never pushes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/ratekit/ratekit/tools/internal/installcheck"
	"github.com/ratekit/ratekit/tools/internal/repo"
)

func main() {
	root := flag.String("repo", "..", "the repository's root directory")
	tag := flag.Bool("tag", false, "commit the release, check the commit, and create its tags (never pushed)")
	tidy := flag.Bool("tidy", false, "only tidy every module (at the version given, else the tree's), without CHANGELOG, check or tags")
	date := flag.String("date", time.Now().UTC().Format(time.DateOnly), "the release date in CHANGELOG.md")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./release [-tag] [-date YYYY-MM-DD] vX.Y.Z\n       go run ./release -tidy [vX.Y.Z]")
		flag.PrintDefaults()
	}
	flag.Parse()
	var err error
	switch {
	case *tidy && flag.NArg() <= 1:
		err = tidyOnly(*root, flag.Arg(0))
	case !*tidy && flag.NArg() == 1:
		err = release(*root, flag.Arg(0), *date, *tag)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func tidyOnly(root, v string) error {
	r, err := repo.Load(root)
	if err != nil {
		return err
	}
	if v != "" {
		if _, err := r.SetVersion(v); err != nil {
			return err
		}
	}
	return r.Tidy()
}

func git(root string, args ...string) (string, error) {
	out, err := repo.Run(root, os.Environ(), "git", args...)
	return strings.TrimSpace(string(out)), err
}

func release(root, v, date string, tag bool) error {
	if err := repo.CheckVersion(v); err != nil {
		return err
	}
	if _, err := time.Parse(time.DateOnly, date); err != nil {
		return fmt.Errorf("-date: %w", err)
	}
	r, err := repo.Load(root)
	if err != nil {
		return err
	}
	root = r.Root
	if tag {
		if status, err := git(root, "status", "--porcelain"); err != nil {
			return err
		} else if status != "" {
			return fmt.Errorf("-tag wants a clean working tree, so that the release commit holds only the release:\n%s", status)
		}
	}
	tags, err := git(root, "tag", "--list")
	if err != nil {
		return err
	}
	existing := map[string]bool{}
	previous := "" // the highest root release, "" before the first
	for _, t := range strings.Fields(tags) {
		existing[t] = true
		if semver.IsValid(t) && (previous == "" || semver.Compare(t, previous) > 0) {
			previous = t
		}
	}
	if previous != "" && semver.Compare(v, previous) <= 0 {
		return fmt.Errorf("%s is not above the last release, %s", v, previous)
	}
	var names []string
	for _, m := range r.Released() {
		t := m.Tag(v)
		if existing[t] {
			return fmt.Errorf("tag %s exists", t)
		}
		names = append(names, t)
	}

	fmt.Printf("release: every requirement of this repository's modules at %s\n", v)
	if _, err := r.SetVersion(v); err != nil {
		return err
	}
	fmt.Println("release: go mod tidy in every module, alone (GOWORK=off)")
	if err := r.Tidy(); err != nil {
		return err
	}
	fmt.Printf("release: CHANGELOG.md: [Unreleased] becomes [%s] - %s\n", strings.TrimPrefix(v, "v"), date)
	if err := changelog(filepath.Join(root, "CHANGELOG.md"), v, previous, date); err != nil {
		return err
	}
	if r, err = repo.Load(root); err != nil {
		return err
	}
	if _, errs := r.Check(); len(errs) > 0 {
		return fmt.Errorf("the tree breaks the layout rules:\n%w", errors.Join(errs...))
	}
	status, err := git(root, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return err
	}
	var files []string
	for line := range strings.Lines(status) {
		if f := strings.TrimSpace(line); len(f) > 3 {
			files = append(files, strings.TrimSpace(f[2:]))
		}
	}
	commitMsg := "release: " + v
	if !tag {
		fmt.Println("release: the install check, on the working tree")
		if err := installcheck.Run(installcheck.Options{Root: root, Log: os.Stdout}); err != nil {
			return err
		}
		fmt.Printf("\nrelease: %s is ready in the working tree. To cut it:\n\n", v)
		fmt.Printf("  git commit -m %q -- %s\n", commitMsg, strings.Join(files, " "))
		fmt.Println("  .ci/install-check   # the same check, on the commit")
		for _, t := range names {
			fmt.Printf("  git tag -a %s -m %q\n", t, "ratekit "+t)
		}
		fmt.Printf("  git push origin HEAD %s\n", strings.Join(names, " "))
		return nil
	}
	if _, err := git(root, append([]string{"commit", "-q", "-m", commitMsg, "--"}, files...)...); err != nil {
		return err
	}
	commit, err := git(root, "rev-parse", "--short", "HEAD")
	if err != nil {
		return err
	}
	fmt.Printf("release: committed %s %q (%s)\n", commit, commitMsg, strings.Join(files, " "))
	fmt.Println("release: the install check, on the commit")
	if err := installcheck.Run(installcheck.Options{Root: root, Rev: "HEAD", Log: os.Stdout}); err != nil {
		return fmt.Errorf("%w\n(no tag was created; the release commit is HEAD: amend it, or drop it with git reset --hard HEAD~1)", err)
	}
	for _, t := range names {
		if _, err := git(root, "tag", "-a", t, "-m", "ratekit "+t); err != nil {
			return err
		}
		fmt.Printf("release: tagged %s\n", t)
	}
	fmt.Printf("\nrelease: %s is tagged on %s. To publish it:\n\n  git push origin HEAD %s\n", v, commit, strings.Join(names, " "))
	return nil
}

var linkRef = regexp.MustCompile(`(?m)^\[Unreleased\]: .*$`)

// changelog moves the [Unreleased] section's entries under a heading for
// version v, leaves [Unreleased] empty above it, and points the link
// references at the tags.
func changelog(file, v, previous, date string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	text := string(data)
	const head = "## [Unreleased]\n"
	i := strings.Index(text, head)
	if i < 0 {
		return fmt.Errorf("%s: no %q heading", file, strings.TrimSpace(head))
	}
	body := text[i+len(head):]
	end := strings.Index(body, "\n## [")
	if end < 0 {
		end = strings.Index(body, "\n[Unreleased]: ")
	}
	if end < 0 {
		end = len(body)
	}
	if !strings.Contains(body[:end], "\n- ") {
		return fmt.Errorf("%s: nothing under [Unreleased] to release", file)
	}
	num := strings.TrimPrefix(v, "v")
	text = text[:i] + head + "\n## [" + num + "] - " + date + "\n" + body
	const repoURL = "https://github.com/ratekit/ratekit"
	refs := "[Unreleased]: " + repoURL + "/compare/" + v + "...HEAD\n"
	if previous == "" {
		refs += "[" + num + "]: " + repoURL + "/releases/tag/" + v
	} else {
		refs += "[" + num + "]: " + repoURL + "/compare/" + previous + "..." + v
	}
	if linkRef.MatchString(text) {
		text = linkRef.ReplaceAllLiteralString(text, refs)
	} else {
		text = strings.TrimRight(text, "\n") + "\n\n" + refs + "\n"
	}
	return os.WriteFile(file, []byte(text), 0o644)
}
