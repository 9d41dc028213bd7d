// Command exports counts the exported identifiers of every public package
// of the repository: each package of a module in go.work (and of any other
// module directory named on the command line) that is not internal, not a
// command and not under testdata.
//
//	cd tools && go run ./exports            # the modules of ../go.work
//	cd tools && go run ./exports ../faults  # and the faults module too
//
// An identifier is what go doc lists: a top-level constant, variable,
// function or type, and a method, struct field or interface method of an
// exported type. It prints one line per package: the top-level names, the
// methods (with interface methods), the struct fields and their sum; then
// the totals.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"golang.org/x/mod/modfile"
)

func main() {
	root := flag.String("repo", "..", "the repository's root directory, holding go.work")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./exports [-repo DIR] [module directory ...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*root, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "exports:", err)
		os.Exit(1)
	}
}

// count is one package's figures.
type count struct {
	path     string // import path
	topLevel int    // constants, variables, functions and types
	methods  int    // methods and interface methods of exported types
	fields   int    // struct fields of exported types
}

func run(root string, extra []string) error {
	dirs, err := workModules(root)
	if err != nil {
		return err
	}
	dirs = append(dirs, extra...)
	var all []count
	for _, dir := range dirs {
		counts, err := moduleCounts(dir)
		if err != nil {
			return err
		}
		all = append(all, counts...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].path < all[j].path })
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "package\ttop-level\tmethods\tfields\ttotal\t")
	var sum count
	for _, c := range all {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t\n", c.path, c.topLevel, c.methods, c.fields, c.topLevel+c.methods+c.fields)
		sum.topLevel += c.topLevel
		sum.methods += c.methods
		sum.fields += c.fields
	}
	fmt.Fprintf(w, "all %d packages\t%d\t%d\t%d\t%d\t\n", len(all), sum.topLevel, sum.methods, sum.fields, sum.topLevel+sum.methods+sum.fields)
	return w.Flush()
}

// workModules returns the directory of every module go.work uses.
func workModules(root string) ([]string, error) {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, u := range wf.Use {
		dirs = append(dirs, filepath.Join(root, u.Path))
	}
	return dirs, nil
}

// moduleCounts counts every public package of the module in dir, leaving
// out directories that hold a module of their own.
func moduleCounts(dir string) ([]count, error) {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil, err
	}
	modPath := modfile.ModulePath(data)
	if modPath == "" {
		return nil, fmt.Errorf("%s: no module path in go.mod", dir)
	}
	var counts []count
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != dir {
			if name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		c, ok, err := packageCount(p, filepath.ToSlash(filepath.Join(modPath, rel)))
		if err != nil {
			return err
		}
		if ok {
			counts = append(counts, c)
		}
		return nil
	})
	return counts, err
}

// packageCount counts the package in dir, reporting false if the directory
// holds no Go package outside its tests or holds a command.
func packageCount(dir, importPath string) (count, bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return count{}, false, err
	}
	fset := token.NewFileSet()
	c := count{path: importPath}
	found := false
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return count{}, false, err
		}
		if pkg := f.Name.Name; pkg == "main" || pkg == "documentation" || ignored(f) {
			continue
		}
		found = true
		countFile(f, &c)
	}
	return c, found, nil
}

// ignored reports whether the file is left out of every build by a
// "//go:build ignore" constraint.
func ignored(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() >= f.Package {
			break
		}
		for _, l := range g.List {
			if strings.TrimSpace(l.Text) == "//go:build ignore" {
				return true
			}
		}
	}
	return false
}

func countFile(f *ast.File, c *count) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				c.topLevel++
			} else if recvExported(d.Recv) {
				c.methods++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							c.topLevel++
						}
					}
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					c.topLevel++
					n := typeMembers(s.Type)
					if _, ok := s.Type.(*ast.InterfaceType); ok {
						c.methods += n
					} else {
						c.fields += n
					}
				}
			}
		}
	}
}

// typeMembers counts the exported fields of a struct type and the exported
// methods and embedded names of an interface type.
func typeMembers(t ast.Expr) int {
	var list *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return 0
	}
	n := 0
	for _, field := range list.List {
		if len(field.Names) == 0 {
			if id := baseName(field.Type); id != nil && id.IsExported() {
				n++
			}
			continue
		}
		for _, name := range field.Names {
			if name.IsExported() {
				n++
			}
		}
	}
	return n
}

// recvExported reports whether a method's receiver type is exported.
func recvExported(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	id := baseName(recv.List[0].Type)
	return id != nil && id.IsExported()
}

// baseName returns the type name under pointers, type arguments and
// package qualifiers.
func baseName(t ast.Expr) *ast.Ident {
	for {
		switch x := t.(type) {
		case *ast.Ident:
			return x
		case *ast.StarExpr:
			t = x.X
		case *ast.SelectorExpr:
			return x.Sel
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		default:
			return nil
		}
	}
}
