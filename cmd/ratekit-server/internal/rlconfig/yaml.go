package rlconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
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
	var b strings.Builder
	b.WriteString("rlconfig: ")
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "%d:%d: ", e.Line, e.Column)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// maxErrors bounds the mistakes one file reports.
const maxErrors = 20

// maxFlowDepth bounds the nesting of flow collections ({...}, [...]), which
// the parser's work grows with; block nesting is bounded by the file's size
// and by MaxDepth, checked as the tree is read.
const maxFlowDepth = 32

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
	if tk := nodeToken(n); tk != nil && tk.Position != nil {
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
	depth, docs := 0, 0
	for _, tk := range tokens {
		var bad string
		switch tk.Type {
		case token.AnchorType, token.AliasType:
			bad = "anchors and aliases are not allowed"
		case token.TagType:
			bad = "tags are not allowed"
		case token.DirectiveType:
			bad = "directives are not allowed"
		case token.MergeKeyType:
			bad = "merge keys (<<) are not allowed"
		case token.DocumentHeaderType:
			if docs++; docs > 1 {
				bad = "more than one document"
			}
		case token.SequenceStartType, token.MappingStartType:
			if depth++; depth > maxFlowDepth {
				bad = fmt.Sprintf("flow collections nested deeper than %d", maxFlowDepth)
			}
		case token.SequenceEndType, token.MappingEndType:
			depth--
		}
		if bad != "" {
			d.errs = append(d.errs, &Error{File: d.file, Line: tk.Position.Line, Column: tk.Position.Column, Err: errors.New(bad)})
			return nil
		}
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

// nodeToken returns the token that places n.
func nodeToken(n ast.Node) *token.Token {
	switch v := n.(type) {
	case nil:
		return nil
	case *ast.MappingNode:
		if len(v.Values) > 0 && !v.IsFlowStyle {
			return v.Values[0].Key.GetToken()
		}
	case *ast.MappingValueNode:
		return v.Key.GetToken()
	}
	return n.GetToken()
}

// object walks a mapping, calling set for each key, which must be one of
// fields (nil: any). A null is an empty mapping.
func (d *decoder) object(n ast.Node, path string, fields []string, set func(key string, v ast.Node, path string)) {
	if isNull(n) {
		return
	}
	var values []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		values = m.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{m}
	default:
		d.fail(n, path, "want a mapping, got %s", kind(n))
		return
	}
	seen := make(map[string]bool, len(values))
	for _, mv := range values {
		key, ok := scalarText(mv.Key)
		if !ok {
			d.fail(mv.Key, path, "a key must be a string, got %s", kind(mv.Key))
			continue
		}
		kpath := key
		if path != "" {
			kpath = path + "." + key
		}
		if fields != nil && !contains(fields, key) {
			d.fail(mv.Key, kpath, "unknown field; want one of %s", strings.Join(fields, ", "))
			continue
		}
		if seen[key] {
			d.fail(mv.Key, kpath, "given twice")
			continue
		}
		seen[key] = true
		v := mv.Value
		if isNull(v) {
			v = nil
		}
		set(key, v, kpath)
	}
}

// list walks a sequence. A null is an empty sequence.
func (d *decoder) list(n ast.Node, path string, each func(v ast.Node, path string)) {
	if isNull(n) {
		return
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.fail(n, path, "want a list, got %s", kind(n))
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
	s, ok := scalarText(n)
	if !ok {
		d.fail(n, path, "want a string, got %s", kind(n))
	}
	return s
}

func (d *decoder) bool(n ast.Node, path string) bool {
	if n == nil {
		return false
	}
	b, ok := n.(*ast.BoolNode)
	if !ok {
		d.fail(n, path, "want true or false, got %s", kind(n))
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
		d.fail(n, path, "want a whole number, got %s", kind(n))
		return 0
	}
	v, err := strconv.ParseUint(in.Token.Value, 10, 64)
	if err != nil || v > max {
		d.fail(n, path, "%s is not a whole number from 0 to %d", in.Token.Value, max)
		return 0
	}
	return v
}

// scalarText returns the text of a string or number scalar.
func scalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value != nil {
			return v.Value.Value, true
		}
	case *ast.IntegerNode, *ast.FloatNode:
		if tk := n.GetToken(); tk != nil {
			return tk.Value, true
		}
	}
	return "", false
}

func isNull(n ast.Node) bool {
	if n == nil {
		return true
	}
	_, ok := n.(*ast.NullNode)
	return ok
}

func kind(n ast.Node) string {
	switch n.(type) {
	case nil, *ast.NullNode:
		return "null"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.BoolNode:
		return "a boolean (quote it for a string)"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	}
	return "a " + strings.ToLower(n.Type().String())
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
