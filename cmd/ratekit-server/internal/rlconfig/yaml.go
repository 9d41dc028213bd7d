package rlconfig

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/ratekit/ratekit/internal/yamlast"
)

// An Error is one mistake in a configuration file. [Parse] and [Load]
// return every mistake they find (up to 20) joined with [errors.Join];
// find the first with [errors.As].
type Error struct {
	// File is the file's name as given to Parse.
	File string
	// Line and Column locate the mistake, from 1; 0 when unknown.
	Line, Column int
	// Path names the field at fault, such as
	// "descriptors[0].rate_limit.unit", or "" for the file as a whole.
	Path string
	// Err says what is wrong.
	Err error
}

// Error returns "rlconfig: <file>:<line>:<column>: <path>: <what>", leaving
// out what is unknown.
func (e *Error) Error() string {
	return yamlast.Message("rlconfig: ", e.File, e.Line, e.Column, e.Path, e.Err)
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// maxErrors bounds the mistakes one file reports.
const maxErrors = 20

// maxDepth and maxMappingKeys bound what a file holds (yamlast.Check):
// YAML collections nested at most 64 deep, room for MaxDepth levels of
// descriptors (a list and a mapping each) and what surrounds them, and
// mappings of at most 256 keys.
const (
	maxDepth       = 4 * MaxDepth
	maxMappingKeys = 256
)

// decoder reads one file's syntax tree, collecting mistakes with their
// positions.
type decoder struct {
	file string
	errs []error
}

func (d *decoder) at(n ast.Node, path string, err error) {
	if len(d.errs) >= maxErrors {
		return
	}
	e := &Error{File: d.file, Path: path, Err: err}
	if tk := yamlast.NodeToken(n); tk != nil && tk.Position != nil {
		e.Line, e.Column = tk.Position.Line, tk.Position.Column
	}
	d.errs = append(d.errs, e)
}

func (d *decoder) fail(n ast.Node, path, format string, args ...any) {
	d.at(n, path, fmt.Errorf(format, args...))
}

// parseYAML tokenizes and parses data, refusing what a configuration file
// never needs and an operator's input must not carry: anchors, aliases,
// tags, directives, merge keys, several documents and deep flow nesting.
// It returns the document's body, nil for an empty file.
func (d *decoder) parseYAML(data []byte) ast.Node {
	tokens := lexer.Tokenize(string(data))
	if tk, err := yamlast.Check(tokens, "in a configuration file", maxDepth, maxMappingKeys); err != nil {
		e := &Error{File: d.file, Err: err}
		if tk != nil && tk.Position != nil {
			e.Line, e.Column = tk.Position.Line, tk.Position.Column
		}
		d.errs = append(d.errs, e)
		return nil
	}
	f, err := parser.Parse(tokens, 0)
	if err != nil {
		e := &Error{File: d.file, Err: err}
		var te interface {
			GetToken() *token.Token
			GetMessage() string
		}
		if errors.As(err, &te) {
			e.Err = errors.New(te.GetMessage())
			if tk := te.GetToken(); tk != nil && tk.Position != nil {
				e.Line, e.Column = tk.Position.Line, tk.Position.Column
			}
		}
		d.errs = append(d.errs, e)
		return nil
	}
	if len(f.Docs) > 1 {
		d.at(f.Docs[1], "", errors.New("more than one document"))
		return nil
	}
	if len(f.Docs) == 0 || f.Docs[0].Body == nil {
		return nil
	}
	return f.Docs[0].Body
}

// object walks a mapping, calling set for each key, which must be one of
// fields (nil: any). A null is an empty mapping, and a null value is nil.
func (d *decoder) object(n ast.Node, path string, fields []string, set func(key string, v ast.Node, path string)) {
	yamlast.Mapping(n, path, fields, func(n ast.Node, path, msg string) {
		d.at(n, path, errors.New(msg))
	}, func(f yamlast.Field) {
		v := f.Value
		if yamlast.IsNull(v) {
			v = nil
		}
		set(f.Name, v, f.Path)
	})
}

// list walks a sequence. A null is an empty sequence.
func (d *decoder) list(n ast.Node, path string, each func(v ast.Node, path string)) {
	if yamlast.IsNull(n) {
		return
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.fail(n, path, "want a list, got %s", yamlast.Kind(n))
		return
	}
	for i, v := range seq.Values {
		each(v, fmt.Sprintf("%s[%d]", path, i))
	}
}

func (d *decoder) str(n ast.Node, path string) string {
	if n == nil {
		return ""
	}
	s, ok := yamlast.ScalarText(n)
	if !ok {
		d.fail(n, path, "want a string, got %s", yamlast.Kind(n))
	}
	return s
}

func (d *decoder) bool(n ast.Node, path string) bool {
	if n == nil {
		return false
	}
	b, ok := n.(*ast.BoolNode)
	if !ok {
		d.fail(n, path, "want true or false, got %s", yamlast.Kind(n))
		return false
	}
	return b.Value
}

// uint reads a whole number from 0 to max.
func (d *decoder) uint(n ast.Node, path string, max uint64) uint64 {
	if n == nil {
		return 0
	}
	in, ok := n.(*ast.IntegerNode)
	if !ok {
		d.fail(n, path, "want a whole number, got %s", yamlast.Kind(n))
		return 0
	}
	v, err := strconv.ParseUint(in.Token.Value, 10, 64)
	if err != nil || v > max {
		d.fail(n, path, "%s is not a whole number from 0 to %d", in.Token.Value, max)
		return 0
	}
	return v
}
