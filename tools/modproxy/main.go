// Command modproxy publishes every released module of the repository to a
// module proxy in a directory, at the version the tree's requirements name,
// and prints the environment that makes the go command use it:
//
//	cd tools && go run ./modproxy -out /tmp/proxy        # the committed tree (HEAD)
//	cd tools && go run ./modproxy -out /tmp/proxy -rev=  # the working tree
//
// With that environment, a module outside the repository gets the tree as a
// user would get the release: go get github.com/ratekit/ratekit/ginlimit@latest.
// It names a module cache of its own, since the usual one keeps the first
// download of a version for good, and the tree changes under the same
// version at every commit.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ratekit/ratekit/tools/internal/repo"
)

func main() {
	root := flag.String("repo", "..", "the repository's root directory")
	out := flag.String("out", "", "the proxy's directory (required)")
	rev := flag.String("rev", "HEAD", "the git revision to publish; empty for the working tree")
	version := flag.String("version", "", "the version to publish at (default: the one the tree's requirements name)")
	flag.Parse()
	if err := run(*root, *out, *rev, *version); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(root, out, rev, v string) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	r, err := repo.Load(root)
	if err != nil {
		return err
	}
	if v == "" {
		if v, err = r.Version(); err != nil {
			return err
		}
	}
	mods, err := r.Publish(out, rev, v)
	if err != nil {
		return err
	}
	for _, m := range mods {
		fmt.Fprintf(os.Stderr, "published %s\n", m)
	}
	goproxy, err := repo.GoEnvValue("GOPROXY")
	if err != nil {
		return err
	}
	fmt.Printf("export GOWORK=off GOPROXY=file://%s,%s GONOSUMDB=%s GOMODCACHE=%s\n", filepath.ToSlash(out), goproxy, repo.RootPath, filepath.Join(out, ".modcache"))
	return nil
}
