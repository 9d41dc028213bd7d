package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/policyname"
	"github.com/ratekit/ratekit/keyfunc"
)

// Bounds on a rule set, so that a file is bounded work to read and match.
const (
	// MaxRules is the most rules a set holds.
	MaxRules = 1000
	// MaxLimits is the most limits a rule holds.
	MaxLimits = 16
	// MaxOverrides is the most overrides a set holds.
	MaxOverrides = 100_000
	// MaxFileBytes is the largest file Parse, ParseFile and a Source read.
	MaxFileBytes = 1 << 20
)

// Smaller bounds, documented in the package documentation.
const (
	maxRoutes         = 1024
	maxMethods        = 16
	maxHeaders        = 32
	maxHeaderValues   = 64
	maxPlans          = 256
	maxKeyParts       = 8
	maxTrustedProxies = 1024
	maxStringBytes    = 1024
	maxInstances      = 1_000_000
)

// A Set is a validated, compiled rule set: an ordered list of rules, which
// [Set.Match] finds the one of for a request. A Set never changes; a
// reload makes a new one ([Source]). It is safe for concurrent use.
type Set struct {
	rules   []*Rule
	byName  map[string]*Rule
	limits  []*Limit
	byID    map[string]*Limit
	trusted []netip.Prefix
	plan    func(keyfunc.Request) (string, error)
	cache   *overrideCache // nil without WithOverride
}

// A Rule is one compiled rule of a [Set]: what it matches and its limits.
// A request it matches is held to all of its limits at once.
type Rule struct {
	name   string
	index  int
	limits []*Limit
	m      matcher
}

// Name returns the rule's name, unique in its set.
func (r *Rule) Name() string { return r.name }

// Index returns the rule's position in its set, from 0.
func (r *Rule) Index() int { return r.index }

// Limits returns the rule's limits, in the order written. The slice is the
// rule's own: do not modify it.
func (r *Rule) Limits() []*Limit { return r.limits }

// Policies returns the base policies of the rule's limits, in order, in a new
// slice: the layers of one all-or-nothing decision (core.NewLayered, a Redis
// layered limiter), keyed per layer with [Rule.Keys].
func (r *Rule) Policies() []core.Policy {
	ps := make([]core.Policy, len(r.limits))
	for i, l := range r.limits {
		ps[i] = l.policy
	}
	return ps
}

// Keys appends to dst the key of each of the rule's limits for req, in
// order, and returns the extended slice: the keys of a
// core.MultiKeyLimiter's AllowKeys. It stops at the first key function's
// error and returns it, wrapped with the limit's ID; errors.Is finds
// keyfunc.ErrNoKey or keyfunc.ErrInvalidKey through it.
func (r *Rule) Keys(req keyfunc.Request, dst []string) ([]string, error) {
	for _, l := range r.limits {
		k, err := l.key(req)
		if err != nil {
			return dst, fmt.Errorf("rules: %s: key: %w", l.id, err)
		}
		dst = append(dst, k)
	}
	return dst, nil
}

// A Limit is one compiled limit of a [Rule]: its policy, its key function,
// its cost and its behaviour. Its identity across reloads is [Limit.ID].
type Limit struct {
	rule, name, id string
	index          int // in the set's limits
	policy         core.Policy
	key            keyfunc.Func
	keySpec        []string
	cost           int64
	failure        Failure
	instances      int
	shadow         bool
	overrides      map[string]core.Policy // from the file; nil if none
	cache          *overrideCache         // the set's; nil without WithOverride
}

// ID returns the limit's identity, "<rule>/<limit>": what state carries
// over by across reloads, never the limit's numbers. It is unique in its set
// ('/' is in neither name).
func (l *Limit) ID() string { return l.id }

// Rule returns the name of the limit's rule.
func (l *Limit) Rule() string { return l.rule }

// Name returns the limit's name, unique in its rule; its Policy's Name.
func (l *Limit) Name() string { return l.name }

// Policy returns the limit's base policy, valid, named after the limit: the
// policy of every key without an override ([Limit.PolicyFor]).
func (l *Limit) Policy() core.Policy { return l.policy }

// Key returns the limit's key function, built from its key spec.
func (l *Limit) Key() keyfunc.Func { return l.key }

// KeySpec returns the limit's key spec, canonical ("header:X-Api-Key"),
// one element per part, in a new slice.
func (l *Limit) KeySpec() []string { return slices.Clone(l.keySpec) }

// Cost returns the units each request takes, at least 1 and at most the
// policy's capacity.
func (l *Limit) Cost() int64 { return l.cost }

// Failure returns the limit's failure policy.
func (l *Limit) Failure() Failure { return l.failure }

// ErrorPolicy returns the limit's failure policy as core's: core.FailOpen,
// core.FailClosed, or core.FallbackShare over the set's instances.
func (l *Limit) ErrorPolicy() core.ErrorPolicy {
	switch l.failure {
	case FailureClosed:
		return core.FailClosed()
	case FailureFallback:
		return core.FallbackShare(l.instances)
	}
	return core.FailOpen()
}

// Shadow reports whether the limit is in shadow mode: decided and reported,
// but never refusing a request.
func (l *Limit) Shadow() bool { return l.shadow }

// HasOverrides reports whether some key of the limit may have a policy other
// than [Limit.Policy]: an override in the set names the limit, or the set has
// an [OverrideFunc].
func (l *Limit) HasOverrides() bool { return l.overrides != nil || l.cache != nil }

// Failure is a limit's failure policy: what a request gets when its limiter
// fails (its store is down or times out). The names are core's ErrorPolicy
// vocabulary.
type Failure uint8

const (
	// FailureOpen allows the request (core.FailOpen). The default.
	FailureOpen Failure = iota
	// FailureClosed refuses it (core.FailClosed).
	FailureClosed
	// FailureFallback has a memory limiter of the limit's policy divided
	// among the set's instances decide (core.FallbackShare).
	FailureFallback
)

var failureNames = [...]string{FailureOpen: "open", FailureClosed: "closed", FailureFallback: "fallback"}

// String returns the failure policy's name in a file: "open", "closed" or
// "fallback".
func (f Failure) String() string {
	if int(f) < len(failureNames) {
		return failureNames[f]
	}
	return fmt.Sprintf("Failure(%d)", uint8(f))
}

func parseFailure(s string) (Failure, error) {
	for f, name := range failureNames {
		if s == name {
			return Failure(f), nil
		}
	}
	return 0, fmt.Errorf("%q is not a failure policy; want open, closed or fallback", s)
}

// Rules returns the set's rules, in match order. The slice is the set's own:
// do not modify it.
func (s *Set) Rules() []*Rule { return s.rules }

// Rule returns the rule named name, or nil.
func (s *Set) Rule(name string) *Rule { return s.byName[name] }

// Limits returns every limit of the set, rule by rule, in order. The slice is
// the set's own: do not modify it.
func (s *Set) Limits() []*Limit { return s.limits }

// Limit returns the limit whose [Limit.ID] is id, or nil.
func (s *Set) Limit(id string) *Limit { return s.byID[id] }

// TrustedProxies returns the set's trusted proxies, in a new slice.
func (s *Set) TrustedProxies() []netip.Prefix { return slices.Clone(s.trusted) }

// New validates and compiles a rule set built in Go. It returns every
// mistake it finds (up to 20), each an [*Error] naming the field by its path
// in the file's terms, joined with errors.Join.
func New(cfg Config, opts ...Option) (*Set, error) {
	s, errs := build(cfg, buildOptions("New", opts))
	if err := errs.err(); err != nil {
		return nil, err
	}
	return s, nil
}

// build compiles cfg, or returns its mistakes.
func build(cfg Config, o *options) (*Set, *errorList) {
	errs := &errorList{}
	checkOptions(o, errs)
	b := &builder{o: o, errs: errs}
	s := &Set{
		byName: make(map[string]*Rule, len(cfg.Rules)),
		byID:   make(map[string]*Limit),
		plan:   o.plan,
	}
	b.trustedProxies(cfg.TrustedProxies)
	s.trusted = slices.Clone(cfg.TrustedProxies)
	def := b.defaults(cfg.Defaults)
	if o.override != nil && o.cacheSize >= 1 {
		c, err := newOverrideCache(o.override, o.cacheSize, o.cacheTTL, o.clock)
		if err != nil {
			errs.option("WithOverrideCache: %v", err)
		}
		s.cache = c
	}

	switch {
	case len(cfg.Rules) == 0:
		errs.addf("rules", "no rules; a set needs at least one (a rule with no match applies to every request)")
	case len(cfg.Rules) > MaxRules:
		errs.addf("rules", "%d rules, at most %d", len(cfg.Rules), MaxRules)
		return nil, errs
	}
	for i, rc := range cfg.Rules {
		if errs.full() {
			break
		}
		path := fmt.Sprintf("rules[%d]", i)
		r := &Rule{name: rc.Name, index: i}
		if err := checkName(rc.Name); err != nil {
			errs.add(path+".name", err)
		} else if _, dup := s.byName[rc.Name]; dup {
			errs.addf(path+".name", "rule %q is named twice", rc.Name)
		} else {
			s.byName[rc.Name] = r
		}
		r.m = b.match(path+".match", rc.Match)
		if r.m.plans != nil && o.plan == nil {
			errs.addf(path+".match.plans", "plans need a plan function (rules.WithPlan)")
		}
		switch {
		case len(rc.Limits) == 0:
			errs.addf(path+".limits", "no limits; a rule needs at least one")
		case len(rc.Limits) > MaxLimits:
			errs.addf(path+".limits", "%d limits, at most %d", len(rc.Limits), MaxLimits)
			continue
		}
		names := make(map[string]bool, len(rc.Limits))
		for j, lc := range rc.Limits {
			lpath := fmt.Sprintf("%s.limits[%d]", path, j)
			l := b.limit(lpath, lc, def)
			l.rule, l.cache = rc.Name, s.cache
			l.id = rc.Name + "/" + lc.Name
			if checkName(lc.Name) == nil {
				if names[lc.Name] {
					errs.addf(lpath+".name", "limit %q is named twice in rule %q", lc.Name, rc.Name)
				}
				names[lc.Name] = true
			}
			l.index = len(s.limits)
			s.limits = append(s.limits, l)
			r.limits = append(r.limits, l)
			s.byID[l.id] = l
		}
		s.rules = append(s.rules, r)
	}
	b.overrides(cfg.Overrides, s)
	return s, errs
}

func checkOptions(o *options, errs *errorList) {
	if o.nilOption > 0 {
		errs.option("%s: option %d is nil", o.ctor, o.nilOption)
	}
	if o.planSet && o.plan == nil {
		errs.option("WithPlan: the function is nil")
	}
	if o.overrideSet && o.override == nil {
		errs.option("WithOverride: the function is nil")
	}
	if o.cacheSize < 1 {
		errs.option("WithOverrideCache: size %d, at least 1", o.cacheSize)
	}
	if o.cacheTTL < 0 {
		errs.option("WithOverrideCache: negative ttl %v", o.cacheTTL)
	}
	if o.clock == nil {
		errs.option("WithClock: the clock is nil")
	}
	if o.debounce < 0 {
		errs.option("WithDebounce: negative duration %v", o.debounce)
	}
	if o.badKey != "" {
		errs.option("%s", o.badKey)
	}
	if o.dupKey != "" {
		errs.option("key %q is registered twice", o.dupKey)
	}
}

// builder holds what compiling one set shares: the options, the mistakes
// found, and the "ip" key function, built once.
type builder struct {
	o        *options
	errs     *errorList
	trusted  []netip.Prefix
	clientIP keyfunc.Func
	ipErr    error
	ipBuilt  bool
}

// limitDefaults are a set's defaults, parsed.
type limitDefaults struct {
	algorithm core.Algorithm
	failure   Failure
	instances int
}

func (b *builder) trustedProxies(ps []netip.Prefix) {
	if len(ps) > maxTrustedProxies {
		b.errs.addf("trusted_proxies", "%d entries, at most %d", len(ps), maxTrustedProxies)
		return
	}
	for i, p := range ps {
		if !p.IsValid() {
			b.errs.addf(fmt.Sprintf("trusted_proxies[%d]", i), "not a valid prefix")
		}
	}
	b.trusted = ps
}

func (b *builder) defaults(d Defaults) limitDefaults {
	def := limitDefaults{instances: 1}
	if d.Algorithm != "" {
		a, err := core.ParseAlgorithm(d.Algorithm)
		if err != nil {
			b.errs.add("defaults.algorithm", err)
		}
		def.algorithm = a
	}
	if d.Failure != "" {
		f, err := parseFailure(d.Failure)
		if err != nil {
			b.errs.add("defaults.failure", err)
		}
		def.failure = f
	}
	switch {
	case d.Instances < 0 || d.Instances > maxInstances:
		b.errs.addf("defaults.instances", "%d is not from 1 to %d", d.Instances, maxInstances)
	case d.Instances > 0:
		def.instances = d.Instances
	}
	return def
}

func (b *builder) limit(path string, lc LimitConfig, def limitDefaults) *Limit {
	errs := b.errs
	l := &Limit{name: lc.Name, failure: def.failure, instances: def.instances, shadow: lc.Shadow}
	if err := checkName(lc.Name); err != nil {
		errs.add(path+".name", err)
	}
	pol, ok := b.policy(path, lc, def.algorithm)
	l.policy = pol
	switch {
	case lc.Cost < 0:
		errs.addf(path+".cost", "%d; at least 1", lc.Cost)
	case lc.Cost == 0:
		l.cost = 1
	default:
		l.cost = lc.Cost
		if ok && lc.Cost > pol.Capacity() {
			errs.addf(path+".cost", "%d exceeds what the policy can ever allow (%d): every request would be refused", lc.Cost, pol.Capacity())
		}
	}
	if lc.Failure != "" {
		f, err := parseFailure(lc.Failure)
		if err != nil {
			errs.add(path+".failure", err)
		}
		l.failure = f
	}
	l.key, l.keySpec = b.key(path+".key", lc.Key)
	return l
}

// policy builds a limit's policy, named after it, reporting its mistakes;
// ok is false when it is not valid.
func (b *builder) policy(path string, lc LimitConfig, defAlg core.Algorithm) (core.Policy, bool) {
	fields := lc.Limit != 0 || lc.Window != 0 || lc.Burst != 0 || lc.Algorithm != ""
	if lc.Rate != "" {
		if fields {
			b.errs.addf(path+".rate", "rate and limit, window, algorithm or burst are given both; give the policy one way")
			return core.Policy{}, false
		}
		p, err := parseRate(lc.Rate, defAlg)
		if err != nil {
			b.errs.add(path+".rate", err)
			return core.Policy{}, false
		}
		p.Name = lc.Name
		return p, checkName(lc.Name) == nil
	}
	if !fields {
		b.errs.addf(path, "no policy; give rate (such as 100/1m), or limit and window")
		return core.Policy{}, false
	}
	p := core.Policy{Algorithm: defAlg, Limit: lc.Limit, Window: lc.Window, Burst: lc.Burst}
	if lc.Algorithm != "" {
		a, err := core.ParseAlgorithm(lc.Algorithm)
		if err != nil {
			b.errs.add(path+".algorithm", err)
			return core.Policy{}, false
		}
		p.Algorithm = a
	}
	if err := p.Validate(); err != nil {
		var pe *core.PolicyError
		if errors.As(err, &pe) {
			b.errs.addf(path+"."+strings.ToLower(pe.Field), "%s", pe.Reason)
		} else {
			b.errs.add(path, err)
		}
		return core.Policy{}, false
	}
	p.Name = lc.Name
	return p, checkName(lc.Name) == nil
}

// parseRate reads a policy in core.ParsePolicy's form, without a name; one
// that names no algorithm takes def, unless its window is a calendar one.
func parseRate(s string, def core.Algorithm) (core.Policy, error) {
	explicit := false
	fields := strings.Fields(s)
	for i, f := range fields {
		if i == 0 {
			continue
		}
		k, _, _ := strings.Cut(f, "=")
		switch strings.ToLower(k) {
		case "name":
			return core.Policy{}, fmt.Errorf("%q: name= is not allowed here; the limit's name is its policy's", s)
		case "algorithm", "algo":
			explicit = true
		}
	}
	p, err := core.ParsePolicy(s)
	if err != nil {
		return core.Policy{}, err
	}
	// A calendar window is the fixed window's: the default does not apply.
	if !explicit && p.Calendar == 0 && def != p.Algorithm {
		p.Algorithm = def
		if err := p.Validate(); err != nil {
			var pe *core.PolicyError
			if errors.As(err, &pe) {
				return core.Policy{}, fmt.Errorf("%q with the default algorithm %v: %s %s", s, def, strings.ToLower(pe.Field), pe.Reason)
			}
			return core.Policy{}, err
		}
	}
	return p, nil
}

// checkName reports whether name is a valid rule or limit name: 1 to 64
// letters, digits, '-', '_' or '.', as core's policy names.
func checkName(name string) error {
	if name == "" {
		return errors.New("a name is required")
	}
	return policyname.Check(name)
}
