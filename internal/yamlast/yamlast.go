// Package yamlast reads YAML that an operator writes (rule files, the
// Envoy rate limit service's configuration) through goccy/go-yaml's tokens
// and syntax tree, strictly and within bounds: one document, no anchors,
// aliases, tags, directives or merge keys, bounded nesting and mapping
// sizes, so that no file costs more to read than its size says.
package yamlast

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// Check reports the first token of tokens that a configuration file must
// not hold, and why: a second document, an anchor, alias, tag, directive or
// merge key (the error says they are not allowed where, such as "in a rule
// file"), collections nested deeper than maxDepth (block and flow
// together), or a mapping of more than maxKeys keys. It returns nil, nil
// when there is none.
func Check(tokens token.Tokens, where string, maxDepth, maxKeys int) (*token.Token, error) {
	type level struct {
		col, keys int
	}
	var (
		block   []level // open block collections, by column
		flow    []int   // open flow collections: keys of a mapping, -1 for a sequence
		content bool    // a token of the document was seen
		ended   bool    // the document was ended with "..."
		header  bool    // the document began with "---"
	)
	for i, tk := range tokens {
		if ended && tk.Type != token.CommentType && tk.Type != token.DocumentEndType {
			return tk, errors.New("more than one document")
		}
		switch tk.Type {
		case token.AnchorType, token.AliasType:
			return tk, errors.New("anchors and aliases are not allowed " + where)
		case token.TagType:
			return tk, errors.New("tags are not allowed " + where)
		case token.DirectiveType:
			return tk, errors.New("directives are not allowed " + where)
		case token.MergeKeyType:
			return tk, errors.New("merge keys (<<) are not allowed " + where)
		case token.CommentType:
			continue
		case token.DocumentHeaderType:
			if content || ended || header {
				return tk, errors.New("more than one document")
			}
			header = true
			continue
		case token.DocumentEndType:
			ended = true
			continue
		}
		content = true
		switch tk.Type {
		case token.SequenceStartType, token.MappingStartType:
			keys := -1
			if tk.Type == token.MappingStartType {
				keys = 0
			}
			flow = append(flow, keys)
			if len(block)+len(flow) > maxDepth {
				return tk, fmt.Errorf("nested deeper than %d", maxDepth)
			}
		case token.SequenceEndType, token.MappingEndType:
			if len(flow) > 0 {
				flow = flow[:len(flow)-1]
			}
		case token.MappingValueType:
			// The key is the token before the ':'; its column places it.
			key := tk
			for j := i - 1; j >= 0; j-- {
				if tokens[j].Type != token.CommentType {
					key = tokens[j]
					break
				}
			}
			if len(flow) > 0 {
				if top := &flow[len(flow)-1]; *top >= 0 {
					if *top++; *top > maxKeys {
						return key, fmt.Errorf("a mapping of more than %d keys", maxKeys)
					}
				}
				continue
			}
			col := key.Position.Column
			for len(block) > 0 && block[len(block)-1].col > col {
				block = block[:len(block)-1]
			}
			if len(block) > 0 && block[len(block)-1].col == col {
				top := &block[len(block)-1]
				if top.keys++; top.keys > maxKeys {
					return key, fmt.Errorf("a mapping of more than %d keys", maxKeys)
				}
				continue
			}
			block = append(block, level{col: col, keys: 1})
			if len(block)+len(flow) > maxDepth {
				return tk, fmt.Errorf("nested deeper than %d", maxDepth)
			}
		case token.SequenceEntryType, token.MappingKeyType:
			if len(flow) > 0 {
				continue
			}
			col := tk.Position.Column
			for len(block) > 0 && block[len(block)-1].col > col {
				block = block[:len(block)-1]
			}
			if len(block) > 0 && block[len(block)-1].col == col {
				continue
			}
			block = append(block, level{col: col})
			if len(block)+len(flow) > maxDepth {
				return tk, fmt.Errorf("nested deeper than %d", maxDepth)
			}
		}
	}
	return nil, nil
}

// NodeToken returns the token that places n: a mapping's first key, a
// collection's first token.
func NodeToken(n ast.Node) *token.Token {
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

// ScalarText returns the text of a string or number scalar.
func ScalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value != nil {
			return v.Value.Value, true
		}
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		if tk := n.GetToken(); tk != nil {
			return tk.Value, true
		}
	}
	return "", false
}

// IsNull reports whether n is absent or a YAML null.
func IsNull(n ast.Node) bool {
	if n == nil {
		return true
	}
	_, ok := n.(*ast.NullNode)
	return ok
}

// Kind names a node's type for an error: "a mapping", "a list", "a
// string"...
func Kind(n ast.Node) string {
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

// Message formats a mistake in a file as
// "<prefix><file>:<line>:<column>: <path>: <what>", leaving out what is
// unknown (an empty file or path, a line of 0, a nil err).
func Message(prefix, file string, line, column int, path string, err error) string {
	var b strings.Builder
	b.WriteString(prefix)
	if file != "" || line > 0 {
		if file != "" {
			b.WriteString(file)
			b.WriteByte(':')
		}
		if line > 0 {
			b.WriteString(strconv.Itoa(line))
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(column))
			b.WriteByte(':')
		}
		b.WriteByte(' ')
	}
	if path != "" {
		b.WriteString(path)
		b.WriteString(": ")
	}
	if err != nil {
		b.WriteString(err.Error())
	}
	return b.String()
}

// Field is one key of a mapping that [Mapping] walks.
type Field struct {
	Name string
	// Key is the key's node and Value its value's (a null included).
	Key, Value ast.Node
	// Path is the field's path: the mapping's path, a dot and Name.
	Path string
}

// Mapping walks the mapping n at path, calling each for every key in order.
// A key must be a plain string or number and given once, and one of fields
// (nil: any key); for a key that is not, or for an n that is not a mapping,
// it calls fail with the node at fault, the path and what is wrong, and
// goes on with the next key. A null n is an empty mapping.
func Mapping(n ast.Node, path string, fields []string, fail func(n ast.Node, path, msg string), each func(Field)) {
	if IsNull(n) {
		return
	}
	var values []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		values = m.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{m}
	default:
		fail(n, path, "want a mapping, got "+Kind(n))
		return
	}
	seen := make(map[string]bool, len(values))
	for _, mv := range values {
		if _, complexKey := mv.Key.(*ast.MappingKeyNode); complexKey {
			fail(mv.Key, path, "complex keys (?) are not allowed")
			continue
		}
		key, ok := ScalarText(mv.Key)
		if !ok {
			fail(mv.Key, path, "a key must be a string, got "+Kind(mv.Key))
			continue
		}
		kpath := key
		if path != "" {
			kpath = path + "." + key
		}
		if fields != nil && !slices.Contains(fields, key) {
			fail(mv.Key, kpath, "unknown field; want one of "+strings.Join(fields, ", "))
			continue
		}
		if seen[key] {
			fail(mv.Key, kpath, "given twice")
			continue
		}
		seen[key] = true
		each(Field{Name: key, Key: mv.Key, Value: mv.Value, Path: kpath})
	}
}
