package rules

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/yamlast"
	"github.com/ratekit/ratekit/keyfunc"
)

// Bounds on a file's structure, checked before it is parsed: the YAML
// parser's work grows faster than linearly with nesting and with the keys of
// one mapping, and no rule file needs more.
const (
	maxDepth       = 32
	maxMappingKeys = 256
)

// ParseFile reads the rule file at path, as [Parse] does, naming it path in
// errors. A file larger than [MaxFileBytes] is an error.
func ParseFile(path string, opts ...Option) (*Set, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parse(path, data, buildOptions("ParseFile", opts))
}

// readFile reads at most MaxFileBytes of the file at path.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rules: read %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, &Error{File: path, Err: fmt.Errorf("the file is larger than %d bytes", MaxFileBytes)}
	}
	return data, nil
}

// Parse reads a rule set from data, a YAML document (or JSON, which is read
// as YAML), and builds it with [New]. name names the file in errors.
//
// It is strict: an unknown field, a field given twice, a value of the wrong
// type or a bad value is an error; so are anchors, aliases, tags and
// directives (a rule file is operator input: nothing in it is expanded or
// executed), more than one document, nesting deeper than 32 or a mapping of
// more than 256 keys, and more than [MaxFileBytes] of data. Every mistake
// found (up to 20) is returned, each an [*Error] naming the file, the line
// and column, and the field's path, joined with errors.Join.
func Parse(name string, data []byte, opts ...Option) (*Set, error) {
	return parse(name, data, buildOptions("Parse", opts))
}

func parse(name string, data []byte, o *options) (*Set, error) {
	cfg, d, err := decode(name, data)
	if err != nil {
		return nil, err
	}
	s, errs := build(cfg, o)
	if len(errs.errs) > 0 {
		for _, e := range errs.errs {
			if !e.option {
				e.File = name
				e.Line, e.Column = d.locate(e.Path)
			}
		}
		return nil, errs.err()
	}
	return s, nil
}

// decoder turns a file's syntax tree into a Config, recording where each
// field's value is.
type decoder struct {
	file string
	pos  map[string]*token.Position
	errs errorList
}

func decode(name string, data []byte) (Config, *decoder, error) {
	d := &decoder{file: name, pos: make(map[string]*token.Position)}
	if len(data) > MaxFileBytes {
		return Config{}, nil, &Error{File: name, Err: fmt.Errorf("the file is %d bytes, at most %d", len(data), MaxFileBytes)}
	}
	tokens := lexer.Tokenize(string(data))
	if err := d.checkTokens(tokens); err != nil {
		return Config{}, nil, err
	}
	f, err := parser.Parse(tokens, 0)
	if err != nil {
		return Config{}, nil, d.syntaxError(err)
	}
	if len(f.Docs) > 1 {
		return Config{}, nil, d.at(f.Docs[1].GetToken(), "", errors.New("more than one document"))
	}
	var body ast.Node
	if len(f.Docs) == 1 {
		body = f.Docs[0].Body
	}
	d.pos[""] = &token.Position{Line: 1, Column: 1}
	if body == nil {
		return Config{}, nil, d.at(nil, "", errors.New("the file is empty; want a mapping with rules"))
	}
	cfg := d.config(body)
	if err := d.errs.err(); err != nil {
		return Config{}, nil, err
	}
	return cfg, d, nil
}

// locate returns the position of path's value in the file, or of the
// nearest enclosing value recorded.
func (d *decoder) locate(path string) (line, col int) {
	for {
		if p := d.pos[path]; p != nil {
			return p.Line, p.Column
		}
		if path == "" {
			return 1, 1
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			path = ""
		} else {
			path = path[:i]
		}
	}
}

// at returns an error at tk's position (1:1 when tk is nil).
func (d *decoder) at(tk *token.Token, path string, err error) *Error {
	e := &Error{File: d.file, Line: 1, Column: 1, Path: path, Err: err}
	if tk != nil && tk.Position != nil {
		e.Line, e.Column = tk.Position.Line, tk.Position.Column
	}
	return e
}

func (d *decoder) fail(n ast.Node, path, format string, args ...any) {
	d.failText(n, path, fmt.Sprintf(format, args...))
}

func (d *decoder) failText(n ast.Node, path, msg string) {
	if len(d.errs.errs) < maxErrors {
		d.errs.errs = append(d.errs.errs, d.at(yamlast.NodeToken(n), path, errors.New(msg)))
	}
}

// syntaxError converts a parser error, which carries its token.
func (d *decoder) syntaxError(err error) error {
	var te interface {
		GetToken() *token.Token
		GetMessage() string
	}
	if errors.As(err, &te) {
		return d.at(te.GetToken(), "", errors.New(te.GetMessage()))
	}
	return d.at(nil, "", err)
}

// checkTokens refuses what a rule file never needs and would make the parser
// work hard: anchors, aliases, tags, directives, several documents, deep
// nesting, huge mappings.
func (d *decoder) checkTokens(tokens token.Tokens) error {
	if tk, err := yamlast.Check(tokens, "in a rule file", maxDepth, maxMappingKeys); err != nil {
		return d.at(tk, "", err)
	}
	return nil
}

// record notes where path's value is.
func (d *decoder) record(path string, n ast.Node) {
	if tk := yamlast.NodeToken(n); tk != nil && tk.Position != nil {
		d.pos[path] = tk.Position
	}
}

// object walks a mapping, calling set for each of its keys, which must be
// among fields (nil: any key). A null is an empty mapping.
func (d *decoder) object(n ast.Node, path string, fields []string, set func(key string, v ast.Node, path string)) {
	yamlast.Mapping(n, path, fields, d.failText, func(f yamlast.Field) {
		if yamlast.IsNull(f.Value) {
			d.record(f.Path, f.Key)
		} else {
			d.record(f.Path, f.Value)
		}
		set(f.Name, f.Value, f.Path)
	})
}

// list walks a sequence of at most max values, or a single value as a
// sequence of one. A null is an empty sequence.
func (d *decoder) list(n ast.Node, path string, max int, each func(i int, v ast.Node, path string)) {
	if yamlast.IsNull(n) {
		return
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		if _, isMap := n.(*ast.MappingNode); isMap {
			d.fail(n, path, "want a list, got a mapping")
			return
		}
		each(0, n, path)
		return
	}
	if len(seq.Values) > max {
		d.fail(n, path, "%d entries, at most %d", len(seq.Values), max)
		return
	}
	for i, v := range seq.Values {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.record(p, v)
		each(i, v, p)
	}
}

// strings reads a list of strings (or one string).
func (d *decoder) strings(n ast.Node, path string, max int) []string {
	var out []string
	d.list(n, path, max, func(_ int, v ast.Node, p string) {
		if s, ok := d.str(v, p); ok {
			out = append(out, s)
		}
	})
	return out
}

func (d *decoder) str(n ast.Node, path string) (string, bool) {
	s, ok := yamlast.ScalarText(n)
	if !ok {
		d.fail(n, path, "want a string, got %s", yamlast.Kind(n))
	}
	return s, ok
}

// nonEmpty reads a string whose absence means a default: an empty one
// is a mistake.
func (d *decoder) nonEmpty(n ast.Node, path string) string {
	s, ok := d.str(n, path)
	if ok && s == "" {
		d.fail(n, path, "empty; leave the field out for the default")
	}
	return s
}

func (d *decoder) int(n ast.Node, path string) (int64, bool) {
	in, ok := n.(*ast.IntegerNode)
	if !ok {
		d.fail(n, path, "want a whole number, got %s", yamlast.Kind(n))
		return 0, false
	}
	v, err := strconv.ParseInt(in.Token.Value, 10, 64)
	if err != nil {
		d.fail(n, path, "%s is not a decimal whole number within range", in.Token.Value)
		return 0, false
	}
	return v, true
}

// positive reads a whole number of at least 1 whose absence means a default.
func (d *decoder) positive(n ast.Node, path string) int64 {
	v, ok := d.int(n, path)
	if ok && v < 1 {
		d.fail(n, path, "%d; at least 1", v)
	}
	return v
}

func (d *decoder) bool(n ast.Node, path string) bool {
	b, ok := n.(*ast.BoolNode)
	if !ok {
		d.fail(n, path, "want true or false, got %s", yamlast.Kind(n))
		return false
	}
	return b.Value
}

// The file's fields, per mapping.
var (
	fileFields     = []string{"trusted_proxies", "defaults", "rules", "overrides"}
	defaultFields  = []string{"algorithm", "failure", "instances"}
	ruleFields     = []string{"name", "match", "limits"}
	matchFields    = []string{"routes", "methods", "headers", "plans"}
	limitFields    = []string{"name", "rate", "limit", "window", "algorithm", "burst", "key", "cost", "failure", "shadow"}
	overrideFields = []string{"limit", "key", "rate"}
)

func (d *decoder) config(body ast.Node) Config {
	var cfg Config
	d.record("", body)
	d.object(body, "", fileFields, func(key string, v ast.Node, path string) {
		switch key {
		case "trusted_proxies":
			cfg.TrustedProxies = d.proxies(v, path)
		case "defaults":
			d.object(v, path, defaultFields, func(key string, v ast.Node, path string) {
				switch key {
				case "algorithm":
					cfg.Defaults.Algorithm = d.nonEmpty(v, path)
				case "failure":
					cfg.Defaults.Failure = d.nonEmpty(v, path)
				case "instances":
					n := d.positive(v, path)
					cfg.Defaults.Instances = int(min(n, maxInstances+1))
				}
			})
		case "rules":
			d.list(v, path, MaxRules, func(_ int, v ast.Node, path string) {
				cfg.Rules = append(cfg.Rules, d.rule(v, path))
			})
		case "overrides":
			d.list(v, path, MaxOverrides, func(_ int, v ast.Node, path string) {
				cfg.Overrides = append(cfg.Overrides, d.override(v, path))
			})
		}
	})
	return cfg
}

func (d *decoder) proxies(n ast.Node, path string) []netip.Prefix {
	var out []netip.Prefix
	d.list(n, path, maxTrustedProxies, func(_ int, v ast.Node, p string) {
		s, ok := d.str(v, p)
		if !ok {
			return
		}
		if s == "private" {
			out = append(out, keyfunc.PrivateNetworks()...)
			return
		}
		if pre, err := netip.ParsePrefix(s); err == nil {
			out = append(out, pre)
			return
		}
		if addr, err := netip.ParseAddr(s); err == nil && addr.Zone() == "" {
			out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
			return
		}
		d.fail(v, p, "%q is not a CIDR prefix, an IP address or \"private\"", s)
	})
	return out
}

func (d *decoder) rule(n ast.Node, path string) RuleConfig {
	var rc RuleConfig
	d.object(n, path, ruleFields, func(key string, v ast.Node, path string) {
		switch key {
		case "name":
			rc.Name, _ = d.str(v, path)
		case "match":
			d.object(v, path, matchFields, func(key string, v ast.Node, path string) {
				switch key {
				case "routes":
					rc.Match.Routes = d.strings(v, path, maxRoutes)
				case "methods":
					rc.Match.Methods = d.strings(v, path, maxMethods)
				case "headers":
					rc.Match.Headers = make(map[string][]string)
					d.object(v, path, nil, func(name string, v ast.Node, path string) {
						if len(rc.Match.Headers) >= maxHeaders {
							d.fail(v, path, "more than %d headers", maxHeaders)
							return
						}
						rc.Match.Headers[name] = d.strings(v, path, maxHeaderValues)
					})
				case "plans":
					rc.Match.Plans = d.strings(v, path, maxPlans)
				}
			})
		case "limits":
			d.list(v, path, MaxLimits, func(_ int, v ast.Node, path string) {
				rc.Limits = append(rc.Limits, d.limit(v, path))
			})
		}
	})
	return rc
}

func (d *decoder) limit(n ast.Node, path string) LimitConfig {
	var lc LimitConfig
	var rateNode ast.Node
	var fieldsGiven []string
	d.object(n, path, limitFields, func(key string, v ast.Node, path string) {
		switch key {
		case "name":
			lc.Name, _ = d.str(v, path)
		case "rate":
			rateNode = v
			lc.Rate = d.nonEmpty(v, path)
		case "limit":
			fieldsGiven = append(fieldsGiven, key)
			lc.Limit, _ = d.int(v, path)
		case "window":
			fieldsGiven = append(fieldsGiven, key)
			if s, ok := d.str(v, path); ok {
				w, err := parseWindow(s)
				if err != nil {
					d.fail(v, path, "%v", err)
				}
				lc.Window = w
			}
		case "algorithm":
			fieldsGiven = append(fieldsGiven, key)
			lc.Algorithm = d.nonEmpty(v, path)
		case "burst":
			fieldsGiven = append(fieldsGiven, key)
			lc.Burst, _ = d.int(v, path)
		case "key":
			lc.Key = d.strings(v, path, maxKeyParts)
		case "cost":
			lc.Cost = d.positive(v, path)
		case "failure":
			lc.Failure = d.nonEmpty(v, path)
		case "shadow":
			lc.Shadow = d.bool(v, path)
		}
	})
	if rateNode != nil && len(fieldsGiven) > 0 {
		d.fail(rateNode, path+".rate", "rate and %s are given both; give the policy one way", strings.Join(fieldsGiven, ", "))
	}
	return lc
}

func (d *decoder) override(n ast.Node, path string) OverrideConfig {
	var oc OverrideConfig
	d.object(n, path, overrideFields, func(key string, v ast.Node, path string) {
		switch key {
		case "limit":
			oc.Limit, _ = d.str(v, path)
		case "key":
			oc.Key, _ = d.str(v, path)
		case "rate":
			oc.Rate, _ = d.str(v, path)
		}
	})
	return oc
}

// parseWindow reads a window as core.ParsePolicy does ("1m", "7d", "s").
func parseWindow(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a window: a duration such as 1s, 15m, 1h30m or 7d, from %v to %dd", s, core.MinWindow, int64(core.MaxWindow/(24*time.Hour)))
	if s == "" || strings.ContainsAny(s, " \t\r\n/=") {
		return 0, bad
	}
	p, err := core.ParsePolicy("1/" + s)
	if err != nil {
		return 0, bad
	}
	if p.Calendar != 0 {
		// A calendar window needs its zone and the fixed window: the rate
		// says all of it.
		return 0, fmt.Errorf("%q is a calendar window: give the policy as a rate, such as rate: 1000/%s tz=Europe/Berlin", s, s)
	}
	return p.Window, nil
}
