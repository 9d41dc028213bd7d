// Command installcheck checks that an outside user can install what the
// tree would release (see the package doc of internal/installcheck):
//
//	cd tools && go run ./installcheck              # the committed tree, HEAD
//	cd tools && go run ./installcheck -rev=        # the working tree
//	cd tools && go run ./installcheck -version=v0.1.0  # as if tagged v0.1.0, whatever the tree requires
//
// .ci/install-check runs it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ratekit/ratekit/tools/internal/installcheck"
)

func main() {
	var o installcheck.Options
	flag.StringVar(&o.Root, "repo", "..", "the repository's root directory")
	flag.StringVar(&o.Rev, "rev", "HEAD", "the git revision to check; empty for the working tree")
	flag.StringVar(&o.Work, "work", "", "a scratch directory to keep (default: a temporary one, removed)")
	flag.StringVar(&o.Version, "version", "", "publish at this version, and go on after a layout that breaks the rules")
	flag.Parse()
	if err := installcheck.Run(o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "install-check: ok")
}
