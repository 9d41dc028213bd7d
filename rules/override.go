package rules

import (
	"fmt"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/ratekit/ratekit/core"
)

// PolicyFor returns the policy of one key of the limit: the override in the
// set that names the key, else the [OverrideFunc]'s answer (cached), else
// [Limit.Policy]. key is the key as the limit's key function returned it.
// An OverrideFunc's error, or a policy it returns that is not valid or
// cannot allow the limit's cost, is returned (wrapped) with the limit's base
// policy, which the caller may fall back to. PolicyFor is safe for
// concurrent use; it allocates nothing when no override applies.
func (l *Limit) PolicyFor(key string) (core.Policy, error) {
	if p, ok := l.overrides[key]; ok {
		return p, nil
	}
	if l.cache == nil {
		return l.policy, nil
	}
	return l.cache.policyFor(l, key)
}

// PolicyFor returns the policy of key in the limit whose [Limit.ID] is id,
// as [Limit.PolicyFor] does, or an error when the set has no such limit.
func (s *Set) PolicyFor(id, key string) (core.Policy, error) {
	l := s.byID[id]
	if l == nil {
		return core.Policy{}, fmt.Errorf("rules: no limit %q", id)
	}
	return l.PolicyFor(key)
}

// overrideCache holds an OverrideFunc's answers for one set.
type overrideCache struct {
	f     OverrideFunc
	ttl   time.Duration
	clock core.Clock
	lru   *lru.Cache[overrideKey, overrideAnswer]
}

type overrideKey struct {
	limit int // the limit's index in its set
	key   string
}

type overrideAnswer struct {
	policy core.Policy
	at     time.Time
}

func newOverrideCache(f OverrideFunc, size int, ttl time.Duration, clock core.Clock) (*overrideCache, error) {
	c, err := lru.New[overrideKey, overrideAnswer](size)
	if err != nil {
		return nil, err
	}
	return &overrideCache{f: f, ttl: ttl, clock: clock, lru: c}, nil
}

func (c *overrideCache) policyFor(l *Limit, key string) (core.Policy, error) {
	k := overrideKey{limit: l.index, key: key}
	var now time.Time
	if c.ttl > 0 {
		now = c.clock.Now()
	}
	if a, ok := c.lru.Get(k); ok && (c.ttl == 0 || now.Sub(a.at) < c.ttl) {
		return a.policy, nil
	}
	p, ok, err := c.f(l.rule, l.name, key)
	if err != nil {
		return l.policy, fmt.Errorf("rules: %s: override for a key: %w", l.id, err)
	}
	if !ok {
		p = l.policy
	} else {
		p.Name = l.name
		if err := checkOverride(p, l.cost); err != nil {
			return l.policy, fmt.Errorf("rules: %s: override for a key: %w", l.id, err)
		}
	}
	c.lru.Add(k, overrideAnswer{policy: p, at: now})
	return p, nil
}

// checkOverride reports whether p can be a key's policy in a limit of cost.
func checkOverride(p core.Policy, cost int64) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if cost > p.Capacity() {
		return fmt.Errorf("the limit's cost %d exceeds what the policy %v can ever allow (%d)", cost, p, p.Capacity())
	}
	return nil
}

// overrides compiles the set's overrides into its limits.
func (b *builder) overrides(ocs []OverrideConfig, s *Set) {
	errs := b.errs
	if len(ocs) > MaxOverrides {
		errs.addf("overrides", "%d overrides, at most %d", len(ocs), MaxOverrides)
		return
	}
	for i, oc := range ocs {
		if errs.full() {
			return
		}
		path := fmt.Sprintf("overrides[%d]", i)
		l := s.byID[oc.Limit]
		if l == nil {
			rule, _, ok := strings.Cut(oc.Limit, "/")
			switch {
			case !ok:
				errs.addf(path+".limit", "%q is not <rule>/<limit>", oc.Limit)
			case s.byName[rule] == nil:
				errs.addf(path+".limit", "%q names no rule %q", oc.Limit, rule)
			default:
				errs.addf(path+".limit", "%q names no limit of rule %q", oc.Limit, rule)
			}
			continue
		}
		switch {
		case oc.Key == "":
			errs.addf(path+".key", "a key is required: the key as the limit's key function returns it")
			continue
		case len(oc.Key) > maxStringBytes:
			errs.addf(path+".key", "%d bytes, at most %d", len(oc.Key), maxStringBytes)
			continue
		}
		if _, dup := l.overrides[oc.Key]; dup {
			errs.addf(path+".key", "key %q of %s is overridden twice", oc.Key, l.id)
			continue
		}
		if oc.Rate == "" {
			errs.addf(path+".rate", "a rate is required, such as 1000/1m")
			continue
		}
		p, err := parseRate(oc.Rate, l.policy.Algorithm)
		if err != nil {
			errs.add(path+".rate", err)
			continue
		}
		p.Name = l.name
		if l.cost > p.Capacity() {
			errs.addf(path+".rate", "the limit's cost %d exceeds what %q can ever allow (%d)", l.cost, oc.Rate, p.Capacity())
			continue
		}
		if l.overrides == nil {
			l.overrides = make(map[string]core.Policy)
		}
		l.overrides[oc.Key] = p
	}
}
