// Package rlconfig reads envoyproxy/ratelimit's configuration files, as they
// are, into a [Config]: each file a domain, its nested descriptors keyed by
// key and value (a value ending in or holding '*' is a wildcard), and at
// any level a rate_limit that the matching descriptors are held to.
//
//	domain: gateway
//	descriptors:
//	  - key: remote_address
//	    rate_limit:
//	      unit: minute
//	      requests_per_unit: 100
//	  - key: path
//	    value: /login
//	    descriptors:
//	      - key: user
//	        rate_limit:
//	          name: login
//	          requests_per_unit: 5
//	          unit: minute
//	          algorithm: sliding-window   # ratekit: the counting algorithm
//	  - key: plan
//	    value: pro
//	    rate_limit:
//	      requests_per_unit: 1000
//	      window: 10m                 # ratekit: any window, instead of unit
//	      algorithm: token-bucket
//	      burst: 200                  # ratekit: the bucket's capacity
//
// Every field of envoyproxy/ratelimit is read: key, value, rate_limit
// (unit, requests_per_unit, unlimited, name, replaces), descriptors,
// shadow_mode, detailed_metric, value_to_metric, share_threshold and
// metadata; quota_mode is refused (not supported). ratekit adds three
// fields to rate_limit: algorithm (fixed-window, the default and
// envoyproxy/ratelimit's, token-bucket, sliding-window, sliding-log or
// leaky-bucket), burst (the buckets' capacity) and window (a duration such
// as 90s or 7d, in place of unit). At the top, beside domain, failure
// says what the domain's requests get when Redis fails (error, the
// default: Envoy's failure_mode_deny decides; open: OK; fallback: this
// server's memory decides, by 1/instances of each limit).
//
// A file is operator input, bounded: at most [MaxFileBytes], descriptors
// nested at most [MaxDepth] deep, at most [MaxDescriptors] descriptors in a
// [Config], no anchors, aliases, tags or directives. Mistakes are [*Error]s
// naming the file, line, column and field.
package rlconfig

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/goccy/go-yaml/ast"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/yamlast"
)

// Bounds on the input.
const (
	// MaxFileBytes is the largest file read.
	MaxFileBytes = 1 << 20
	// MaxFiles is the most files a directory may hold.
	MaxFiles = 256
	// MaxDepth is the deepest nesting of descriptors.
	MaxDepth = 16
	// MaxDescriptors is the most descriptors of a Config, all files
	// together.
	MaxDescriptors = 1 << 16
	// MaxEntries is the most entries of a request's descriptor that
	// [Config.Match] reads.
	MaxEntries = MaxDepth
)

// A Config is the domains of one or more files. It never changes once
// built and is safe for concurrent use.
type Config struct {
	domains  map[string]*node
	limits   []*Limit
	failures map[string]Failure
}

// A Limit is one rate_limit block of a file.
type Limit struct {
	// ID is the limit's identity across reloads: the domain and the
	// descriptors' keys and values that lead to it, as envoyproxy/ratelimit
	// names its statistics ("gateway.path_/login.user").
	ID string
	// Domain is the file's domain.
	Domain string
	// Name is rate_limit.name, which replaces refers to.
	Name string
	// Replaces are the names of the limits this one replaces.
	Replaces []string
	// Unit and RequestsPerUnit are reported to Envoy as the current limit.
	// Unit is UNKNOWN for a window that is no unit.
	Unit            pb.RateLimitResponse_RateLimit_Unit
	RequestsPerUnit uint32
	// Unlimited limits nothing.
	Unlimited bool
	// Shadow decides and reports, but never refuses.
	Shadow bool
	// DetailedMetric and ValueToMetric say how metrics name the limit.
	DetailedMetric, ValueToMetric bool
	// Policy is what ratekit enforces: RequestsPerUnit per unit (or
	// window), by the file's algorithm. Its Limit is 0 when
	// RequestsPerUnit is: every request over the limit.
	Policy core.Policy
	// File, Line and Column locate the rate_limit block.
	File         string
	Line, Column int
}

// node is one descriptor of the tree.
type node struct {
	children  map[entry]*node
	wildcards []wildcard // the children whose value is a pattern, in file order
	limit     *Limit
	share     bool   // share_threshold: matching values share one key
	pattern   string // the value pattern, for share
}

type entry struct{ key, value string }

type wildcard struct {
	key   string
	parts []string // the value split on '*'
	node  *node
}

func (w *wildcard) match(value string) bool {
	p := w.parts
	if !strings.HasPrefix(value, p[0]) || !strings.HasSuffix(value[len(p[0]):], p[len(p)-1]) {
		return false
	}
	rest := value[len(p[0]) : len(value)-len(p[len(p)-1])]
	for _, mid := range p[1 : len(p)-1] {
		i := strings.Index(rest, mid)
		if i < 0 {
			return false
		}
		rest = rest[i+len(mid):]
	}
	return true
}

// Limits returns every limit of the config, in file order.
func (c *Config) Limits() []*Limit { return c.limits }

// Domains returns the config's domains, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// Match returns the limit of domain that a request's descriptor with these
// entries is held to, or nil, as envoyproxy/ratelimit finds it: at each
// level the entry's key and value, else the first wildcard that matches the
// value, else the key alone; a limit only at the level of the last entry.
// It appends the descriptor's store key to key and returns it: the entries'
// keys and values, a wildcard's pattern in place of the value where it
// shares its threshold.
func (c *Config) Match(domain string, keys, values []string, key []byte) (*Limit, []byte) {
	n := c.domains[domain]
	if n == nil || len(keys) == 0 || len(keys) != len(values) || len(keys) > MaxEntries {
		return nil, key
	}
	start := len(key)
	for i, k := range keys {
		v := values[i]
		next := n.children[entry{k, v}]
		if next == nil {
			for j := range n.wildcards {
				if w := &n.wildcards[j]; w.key == k && w.match(v) {
					next = w.node
					break
				}
			}
		}
		if next == nil {
			next = n.children[entry{k, ""}]
		}
		if next == nil {
			return nil, key[:start]
		}
		if next.share {
			v = next.pattern
		}
		key = append(key, k...)
		key = append(key, 0)
		key = append(key, v...)
		key = append(key, 0)
		if i == len(keys)-1 {
			if next.limit == nil {
				return nil, key[:start]
			}
			return next.limit, key
		}
		if len(next.children) == 0 {
			return nil, key[:start]
		}
		n = next
	}
	return nil, key[:start]
}

// A File is one configuration file, read.
type File struct {
	name    string
	domain  string
	root    *node
	limits  []*Limit
	count   int
	failure Failure
}

// Failure is what a domain's requests get when the store (Redis) fails:
// ratekit's extension, the file's failure and instances fields.
type Failure struct {
	// Mode is FailError (the default), FailOpen or FailFallback.
	Mode FailureMode
	// Instances is how many servers share the limits, for FailFallback:
	// each decides alone by a share of every limit, 1/Instances of it
	// (rounded up, at least 1). Default 1.
	Instances int
}

// FailureMode says what a request gets when the store fails.
type FailureMode uint8

const (
	// FailError answers the call with an error (gRPC UNAVAILABLE), so that
	// Envoy's failure_mode_deny decides: allowed when false, refused when
	// true. envoyproxy/ratelimit does the same.
	FailError FailureMode = iota
	// FailOpen answers OK, counting nothing, whatever Envoy's setting.
	FailOpen
	// FailFallback decides by this server's memory, each limit a share of
	// itself (see Failure.Instances).
	FailFallback
)

// Failure returns domain's failure policy.
func (c *Config) Failure(domain string) Failure { return c.failures[domain] }

// Domain returns the file's domain.
func (f *File) Domain() string { return f.domain }

// Parse reads one configuration file's data; name names it in errors and
// in [Limit.File]. Every mistake found (up to 20) is returned, each an
// [*Error], joined with errors.Join.
func Parse(name string, data []byte) (*File, error) {
	d := &decoder{file: name}
	if len(data) > MaxFileBytes {
		return nil, &Error{File: name, Err: fmt.Errorf("the file is %d bytes, at most %d", len(data), MaxFileBytes)}
	}
	f := &File{name: name, root: &node{}}
	body := d.parseYAML(data)
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	if body == nil {
		return nil, &Error{File: name, Err: errors.New("the file is empty; want a domain and descriptors")}
	}
	var domainNode ast.Node
	var instancesNode ast.Node
	d.object(body, "", []string{"domain", "descriptors", "failure", "instances"}, func(key string, v ast.Node, path string) {
		switch key {
		case "failure":
			switch m := d.str(v, path); m {
			case "error":
				f.failure.Mode = FailError
			case "open":
				f.failure.Mode = FailOpen
			case "fallback":
				f.failure.Mode = FailFallback
			default:
				d.fail(v, path, "%q; want error, open or fallback", m)
			}
		case "instances":
			instancesNode = v
			f.failure.Instances = int(d.uint(v, path, 1<<16))
			if f.failure.Instances == 0 {
				d.fail(v, path, "0; at least 1")
			}
		case "domain":
			domainNode = v
			f.domain = d.str(v, path)
		case "descriptors":
			d.descriptors(f, f.root, v, path, "", 1)
		}
	})
	if f.domain == "" && len(d.errs) == 0 {
		if domainNode == nil {
			domainNode = body
		}
		d.fail(domainNode, "domain", "empty; a file names its domain")
	}
	if instancesNode != nil && f.failure.Mode != FailFallback {
		d.fail(instancesNode, "instances", "instances is for failure: fallback")
	}
	if f.failure.Instances == 0 {
		f.failure.Instances = 1
	}
	for _, l := range f.limits {
		l.Domain = f.domain
		l.ID = f.domain + "." + l.ID
	}
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return f, nil
}

// The fields of a descriptor and of a rate_limit block.
var (
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	rateLimitFields  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst", "window"}
)

func (d *decoder) descriptors(f *File, parent *node, n ast.Node, path, id string, depth int) {
	if depth > MaxDepth {
		d.fail(n, path, "descriptors nested deeper than %d", MaxDepth)
		return
	}
	d.list(n, path, func(v ast.Node, path string) {
		if f.count++; f.count > MaxDescriptors {
			if f.count == MaxDescriptors+1 {
				d.fail(v, path, "more than %d descriptors", MaxDescriptors)
			}
			return
		}
		d.descriptor(f, parent, v, path, id, depth)
	})
}

func (d *decoder) descriptor(f *File, parent *node, n ast.Node, path, id string, depth int) {
	var (
		e                          entry
		hasRL                      bool
		keyNode, rlNode, subs      ast.Node
		shadow, detailed, toMetric bool
		share                      bool
		shareNode                  ast.Node
	)
	if yamlast.IsNull(n) {
		d.fail(n, path, "want a mapping with a key, got null")
		return
	}
	d.object(n, path, descriptorFields, func(key string, v ast.Node, path string) {
		switch key {
		case "key":
			keyNode = v
			e.key = d.str(v, path)
		case "value":
			e.value = d.str(v, path)
		case "rate_limit":
			hasRL, rlNode = true, v
		case "descriptors":
			subs = v
		case "shadow_mode":
			shadow = d.bool(v, path)
		case "quota_mode":
			if d.bool(v, path) {
				d.fail(v, path, "quota_mode is not supported")
			}
		case "detailed_metric":
			detailed = d.bool(v, path)
		case "value_to_metric":
			toMetric = d.bool(v, path)
		case "share_threshold":
			shareNode = v
			share = d.bool(v, path)
		case "metadata":
			if v != nil {
				if _, ok := v.(*ast.MappingNode); !ok {
					if _, ok := v.(*ast.MappingValueNode); !ok {
						d.fail(v, path, "want a mapping, got %s", yamlast.Kind(v))
					}
				}
			}
		}
	})
	if _, ok := n.(*ast.MappingNode); !ok {
		if _, ok := n.(*ast.MappingValueNode); !ok {
			return // reported by object
		}
	}
	if e.key == "" {
		at := keyNode
		if at == nil {
			at = n
		}
		d.fail(at, path+".key", "empty; every descriptor has a key")
		return
	}
	final := e.key
	if e.value != "" {
		final += "_" + e.value
	}
	if id != "" {
		id += "."
	}
	id += final
	if parent.children == nil {
		parent.children = make(map[entry]*node)
	}
	if parent.children[e] != nil {
		d.fail(n, path, "duplicate descriptor %q (key %q, value %q)", id, e.key, e.value)
		return
	}
	nd := &node{}
	parent.children[e] = nd
	if strings.Contains(e.value, "*") {
		parent.wildcards = append(parent.wildcards, wildcard{key: e.key, parts: strings.Split(e.value, "*"), node: nd})
		if share {
			nd.share, nd.pattern = true, e.value
		}
	} else if share {
		d.fail(shareNode, path+".share_threshold", "share_threshold needs a wildcard value (one holding '*'); %q has none", e.value)
	}
	if hasRL {
		if l := d.rateLimit(f, rlNode, n, path+".rate_limit", id); l != nil {
			l.Shadow, l.DetailedMetric, l.ValueToMetric = shadow, detailed, toMetric
			nd.limit = l
			f.limits = append(f.limits, l)
		}
	}
	if subs != nil {
		d.descriptors(f, nd, subs, path+".descriptors", id, depth+1)
	}
}

// units are envoyproxy/ratelimit's units and their windows, aligned to the
// Unix epoch as it aligns them (a month is 30 days, a year 365).
var units = map[string]struct {
	unit   pb.RateLimitResponse_RateLimit_Unit
	window time.Duration
}{
	"second": {pb.RateLimitResponse_RateLimit_SECOND, time.Second},
	"minute": {pb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"hour":   {pb.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"day":    {pb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"week":   {pb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"month":  {pb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"year":   {pb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// rateLimit reads the rate_limit block n (nil when null) of the descriptor
// desc.
// UnitWindow returns the window of an envoyproxy/ratelimit unit, and
// whether it is one.
func UnitWindow(u pb.RateLimitResponse_RateLimit_Unit) (time.Duration, bool) {
	for _, v := range units {
		if v.unit == u {
			return v.window, true
		}
	}
	return 0, false
}

func (d *decoder) rateLimit(f *File, n, desc ast.Node, path, id string) *Limit {
	l := &Limit{ID: id, File: f.name, Policy: core.Policy{Algorithm: core.FixedWindow}}
	if n == nil {
		n = desc
	}
	if tk := yamlast.NodeToken(n); tk != nil && tk.Position != nil {
		l.Line, l.Column = tk.Position.Line, tk.Position.Column
	}
	var unitNode, windowNode, algNode, burstNode ast.Node
	var unit, window string
	var rpu uint64
	var burst uint64
	before := len(d.errs)
	block := n
	if n == desc {
		block = nil
	}
	d.object(block, path, rateLimitFields, func(key string, v ast.Node, path string) {
		switch key {
		case "unit":
			unitNode, unit = v, d.str(v, path)
		case "requests_per_unit":
			rpu = d.uint(v, path, 1<<32-1)
		case "unlimited":
			l.Unlimited = d.bool(v, path)
		case "name":
			l.Name = d.str(v, path)
		case "replaces":
			d.list(v, path, func(v ast.Node, path string) {
				var name string
				d.object(v, path, []string{"name"}, func(_ string, v ast.Node, path string) {
					name = d.str(v, path)
				})
				if name == "" {
					d.fail(v, path+".name", "empty; a replaces entry names a limit")
				} else if name == l.Name && l.Name != "" {
					d.fail(v, path+".name", "%q is this limit's own name", name)
				}
				l.Replaces = append(l.Replaces, name)
			})
		case "algorithm":
			algNode = v
			a, err := core.ParseAlgorithm(d.str(v, path))
			if err != nil {
				d.at(v, path, err)
			}
			l.Policy.Algorithm = a
		case "burst":
			burstNode = v
			burst = d.uint(v, path, core.MaxLimit)
		case "window":
			windowNode, window = v, d.str(v, path)
		}
	})
	if len(d.errs) > before {
		return nil
	}
	l.RequestsPerUnit = uint32(rpu)
	u, validUnit := units[strings.ToLower(unit)]
	switch {
	case l.Unlimited:
		if unitNode != nil || windowNode != nil || algNode != nil || burstNode != nil {
			at := unitNode
			for _, x := range []ast.Node{windowNode, algNode, burstNode} {
				if at == nil {
					at = x
				}
			}
			d.fail(at, path, "an unlimited limit has no unit, window, algorithm or burst")
			return nil
		}
		return l
	case windowNode != nil && unitNode != nil:
		d.fail(windowNode, path+".window", "give unit or window, not both")
		return nil
	case windowNode != nil:
		w, err := parseWindow(window)
		if err != nil {
			d.at(windowNode, path+".window", err)
			return nil
		}
		l.Policy.Window = w
		for _, v := range units {
			if v.window == w {
				l.Unit = v.unit
			}
		}
	case !validUnit:
		at := unitNode
		if at == nil {
			at = n
		}
		d.fail(at, path+".unit", "invalid unit %q; want second, minute, hour, day, week, month or year (or a ratekit window)", unit)
		return nil
	default:
		l.Unit, l.Policy.Window = u.unit, u.window
	}
	l.Policy.Name = policyName(l)
	l.Policy.Limit = int64(rpu)
	l.Policy.Burst = int64(burst)
	if rpu > core.MaxLimit {
		d.fail(n, path+".requests_per_unit", "%d is above ratekit's largest limit, %d", rpu, core.MaxLimit)
		return nil
	}
	if rpu > 0 {
		if err := l.Policy.Validate(); err != nil {
			at := n
			var pe *core.PolicyError
			if errors.As(err, &pe) && pe.Field == "Burst" && burstNode != nil {
				at = burstNode
			}
			d.at(at, path, err)
			return nil
		}
	}
	return l
}

// parseWindow reads a window as core.ParsePolicy does ("90s", "7d").
func parseWindow(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a window: a duration such as 1s, 15m, 1h30m or 7d", s)
	if s == "" || strings.ContainsAny(s, " \t\r\n/=") {
		return 0, bad
	}
	p, err := core.ParsePolicy("1/" + s)
	if err != nil || p.Calendar != 0 {
		return 0, bad
	}
	return p.Window, nil
}

// policyName is the limit's name in headers: its name, else its ID (the
// domain apart), with what a policy name cannot hold replaced by '_', at most
// 64 bytes.
func policyName(l *Limit) string {
	s := l.Name
	if s == "" {
		s = l.ID
	}
	b := []byte(s)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

// Build makes a Config of files. Two files of one domain are an error
// unless merge is set, when their descriptors are merged (a descriptor in
// both is then an error), as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG.
func Build(merge bool, files ...*File) (*Config, error) {
	c := &Config{domains: make(map[string]*node), failures: make(map[string]Failure)}
	owner := make(map[string]string)
	ids := make(map[string]*Limit)
	names := make(map[string]map[string]bool)
	count := 0
	var errs []error
	for _, f := range files {
		count += f.count
		if count > MaxDescriptors {
			return nil, &Error{File: f.name, Err: fmt.Errorf("more than %d descriptors in all files", MaxDescriptors)}
		}
		have := c.domains[f.domain]
		switch {
		case have == nil:
			c.domains[f.domain] = f.root
			c.failures[f.domain] = f.failure
			owner[f.domain] = f.name
		case !merge:
			errs = append(errs, &Error{File: f.name, Path: "domain", Err: fmt.Errorf("domain %q is %s's too (set merging to merge them)", f.domain, owner[f.domain])})
			continue
		default:
			if f.failure != c.failures[f.domain] && f.failure != (Failure{Instances: 1}) {
				if c.failures[f.domain] != (Failure{Instances: 1}) {
					errs = append(errs, &Error{File: f.name, Path: "failure", Err: fmt.Errorf("domain %q has another failure policy in %s", f.domain, owner[f.domain])})
					continue
				}
				c.failures[f.domain] = f.failure
			}
			if err := mergeNodes(have, f.root, f.domain); err != nil {
				errs = append(errs, &Error{File: f.name, Err: err})
				continue
			}
		}
		for _, l := range f.limits {
			// Policy names are unique in a domain, as stores key by them.
			if names[l.Domain] == nil {
				names[l.Domain] = make(map[string]bool)
			}
			if base := l.Policy.Name; names[l.Domain][base] {
				for i := 2; names[l.Domain][l.Policy.Name]; i++ {
					suffix := "-" + strconv.Itoa(i)
					l.Policy.Name = base[:min(len(base), 64-len(suffix))] + suffix
				}
			}
			names[l.Domain][l.Policy.Name] = true
			if o := ids[l.ID]; o != nil {
				errs = append(errs, &Error{File: f.name, Line: l.Line, Column: l.Column, Err: fmt.Errorf("limit %s is given at %s:%d:%d too", l.ID, o.File, o.Line, o.Column)})
				continue
			}
			ids[l.ID] = l
			c.limits = append(c.limits, l)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

func mergeNodes(into, from *node, id string) error {
	if from.limit != nil {
		if into.limit != nil {
			return fmt.Errorf("duplicate descriptor %q", id)
		}
		into.limit = from.limit
	}
	for e, n := range from.children {
		cid := id + "." + e.key
		if e.value != "" {
			cid += "_" + e.value
		}
		have := into.children[e]
		if have == nil {
			if into.children == nil {
				into.children = make(map[entry]*node)
			}
			into.children[e] = n
			for _, w := range from.wildcards {
				if w.node == n {
					into.wildcards = append(into.wildcards, w)
				}
			}
			continue
		}
		if err := mergeNodes(have, n, cid); err != nil {
			return err
		}
	}
	return nil
}

// Load reads the configuration at path: a file, or a directory whose
// *.yaml and *.yml files (not those whose name begins with '.', nor
// subdirectories) are read in name order. merge is as for [Build].
func Load(path string, merge bool) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rlconfig: %w", err)
	}
	var names []string
	if !fi.IsDir() {
		names = []string{path}
	} else {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("rlconfig: %w", err)
		}
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") || e.IsDir() || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				continue
			}
			names = append(names, filepath.Join(path, n))
		}
		if len(names) > MaxFiles {
			return nil, fmt.Errorf("rlconfig: %s holds %d files, at most %d", path, len(names), MaxFiles)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("rlconfig: %s holds no .yaml or .yml file", path)
		}
	}
	var files []*File
	var errs []error
	for _, n := range names {
		data, err := readFile(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f, err := Parse(n, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, f)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return Build(merge, files...)
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("rlconfig: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rlconfig: read %s: %w", name, err)
	}
	if len(data) > MaxFileBytes {
		return nil, &Error{File: name, Err: fmt.Errorf("the file is larger than %d bytes", MaxFileBytes)}
	}
	return data, nil
}
