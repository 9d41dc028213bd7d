// Package snippets holds the test that builds every Go snippet in README.md
// and docs/*.md, so that the documentation cannot drift from the API. It has
// no code of its own.
//
// Each ```go block becomes a package of its own in a temporary module that
// joins the repository's workspace (the module list of its go.work), and one
// go build compiles them all. //line directives make the compiler name the
// Markdown file and line: "docs/redis.md:10:14: undefined: redisstore.WithTimeout".
//
// A block that parses as a Go file after a package clause (declarations such
// as func main() {...}) is compiled as it is. Any other block is a list of
// statements and becomes the body of func _() error, so it may return err;
// the variables it declares at its top level are used after it, so a fragment
// need not use all it declares. Import declarations at its start are kept.
//
// The names a block uses but does not declare (r, ctx, client, limiter) are
// declared in an HTML comment right before the block, which GitHub does not
// show. It holds package-level Go declarations, on one line or several:
//
//	<!-- snippet: var r *gin.Engine; var limiter core.Limiter -->
//	```go
//	r.Use(ginlimit.New(limiter))
//	```
//
// Imports come from the package qualifiers a block and its comment use; the
// map imports in snippets_test.go lists them, and a qualifier missing there
// fails as "undefined". A block that is not meant to compile says why:
//
//	<!-- snippet-skip: the reason -->
//
// testdata/harness.md exercises the harness in the same build: each of its
// lines marked // ERROR "regexp" must fail with a matching message, and
// nothing else in it may fail, so a broken snippet is known to fail the test
// and to be reported at its own line.
package snippets
