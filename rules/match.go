package rules

import (
	"fmt"
	"net/textproto"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/ratekit/ratekit/keyfunc"
)

// matcher is a rule's compiled match.
type matcher struct {
	hasRoutes bool
	exact     map[string]struct{}
	prefixes  []string // each ending in "/"
	methods   uint16   // bits of methodNames; 0: any method
	headers   []headerMatch
	plans     []string // nil: any plan
}

type headerMatch struct {
	name   string // canonical
	any    bool   // "*" is among the values
	values []string
}

// methodNames are the methods a match may list, their bit their index.
// HEAD is matched as GET.
var methodNames = [...]string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}

// methodBit returns the bit of a request's method, compared without regard
// to case, HEAD folded into GET; 0 for any other method.
func methodBit(m string) uint16 {
	switch m { // the common spellings, without a loop
	case "GET", "HEAD":
		return 1 << 0
	case "POST":
		return 1 << 1
	case "PUT":
		return 1 << 2
	case "PATCH":
		return 1 << 3
	case "DELETE":
		return 1 << 4
	case "OPTIONS":
		return 1 << 5
	}
	if len(m) > len("OPTIONS") {
		return 0
	}
	if strings.EqualFold(m, "HEAD") {
		return 1 << 0
	}
	for i, name := range methodNames {
		if strings.EqualFold(m, name) {
			return 1 << i
		}
	}
	return 0
}

// match compiles a rule's match, reporting its mistakes under path.
func (b *builder) match(path string, mc MatchConfig) matcher {
	var m matcher
	errs := b.errs

	if len(mc.Routes) > maxRoutes {
		errs.addf(path+".routes", "%d routes, at most %d", len(mc.Routes), maxRoutes)
	} else if len(mc.Routes) > 0 {
		m.hasRoutes = true
		seen := make(map[string]bool, len(mc.Routes))
		for i, r := range mc.Routes {
			p := fmt.Sprintf("%s.routes[%d]", path, i)
			if err := checkRoute(r); err != nil {
				errs.add(p, err)
				continue
			}
			if seen[r] {
				errs.addf(p, "route %q is listed twice", r)
				continue
			}
			seen[r] = true
			if prefix, ok := strings.CutSuffix(r, "/*"); ok {
				m.prefixes = append(m.prefixes, prefix+"/")
				continue
			}
			if m.exact == nil {
				m.exact = make(map[string]struct{})
			}
			m.exact[r] = struct{}{}
			if o, ok := otherSpelling(r); ok {
				m.exact[o] = struct{}{}
			}
		}
	}

	if len(mc.Methods) > maxMethods {
		errs.addf(path+".methods", "%d methods, at most %d", len(mc.Methods), maxMethods)
	} else {
		for i, name := range mc.Methods {
			p := fmt.Sprintf("%s.methods[%d]", path, i)
			bit := uint16(0)
			for j, known := range methodNames {
				if strings.EqualFold(name, known) {
					bit = 1 << j
				}
			}
			switch {
			case strings.EqualFold(name, "HEAD"):
				errs.addf(p, "HEAD is matched by GET: list GET")
			case bit == 0:
				errs.addf(p, "%q is not a method; want one of %s", name, strings.Join(methodNames[:], ", "))
			case m.methods&bit != 0:
				errs.addf(p, "method %s is listed twice", strings.ToUpper(name))
			default:
				m.methods |= bit
			}
		}
	}

	if len(mc.Headers) > maxHeaders {
		errs.addf(path+".headers", "%d headers, at most %d", len(mc.Headers), maxHeaders)
	} else if len(mc.Headers) > 0 {
		names := make([]string, 0, len(mc.Headers))
		for name := range mc.Headers {
			names = append(names, name)
		}
		sort.Strings(names)
		canonical := make(map[string]string, len(names))
		for _, name := range names {
			p := path + ".headers." + name
			if !isFieldName(name) {
				errs.addf(p, "%q is not a header name", name)
				continue
			}
			c := textproto.CanonicalMIMEHeaderKey(name)
			if other, dup := canonical[c]; dup {
				errs.addf(p, "header %s is given twice (as %q and %q)", c, other, name)
				continue
			}
			canonical[c] = name
			h := headerMatch{name: c}
			values := mc.Headers[name]
			switch {
			case len(values) == 0:
				errs.addf(p, "no values; list the values to match, or \"*\" for any")
			case len(values) > maxHeaderValues:
				errs.addf(p, "%d values, at most %d", len(values), maxHeaderValues)
			}
			for i, v := range values {
				vp := fmt.Sprintf("%s[%d]", p, i)
				switch {
				case v == "":
					errs.addf(vp, "empty; a header with an empty value never matches")
				case len(v) > maxStringBytes:
					errs.addf(vp, "%d bytes, at most %d", len(v), maxStringBytes)
				case trimOWS(v) != v:
					errs.addf(vp, "%q has surrounding spaces or tabs, which a value is compared without", v)
				case !printable(v):
					errs.addf(vp, "%q has a control character or is not UTF-8", v)
				case slices.Contains(h.values, v) || v == "*" && h.any:
					errs.addf(vp, "value %q is listed twice", v)
				case v == "*":
					h.any = true
				default:
					h.values = append(h.values, v)
				}
			}
			m.headers = append(m.headers, h)
		}
	}

	if len(mc.Plans) > maxPlans {
		errs.addf(path+".plans", "%d plans, at most %d", len(mc.Plans), maxPlans)
	} else if len(mc.Plans) > 0 {
		m.plans = make([]string, 0, len(mc.Plans))
		for i, plan := range mc.Plans {
			p := fmt.Sprintf("%s.plans[%d]", path, i)
			switch {
			case plan == "" || len(plan) > maxStringBytes || !printable(plan):
				errs.addf(p, "a plan name is 1 to %d bytes of printable UTF-8", maxStringBytes)
			case slices.Contains(m.plans, plan):
				errs.addf(p, "plan %q is listed twice", plan)
			default:
				m.plans = append(m.plans, plan)
			}
		}
	}
	return m
}

func checkRoute(r string) error {
	switch {
	case r == "":
		return fmt.Errorf("empty; a route pattern such as /items/{id}")
	case len(r) > maxStringBytes:
		return fmt.Errorf("%d bytes, at most %d", len(r), maxStringBytes)
	case !printable(r):
		return fmt.Errorf("%q has a control character or is not UTF-8", r)
	case strings.ContainsAny(r, " \t"):
		return fmt.Errorf("%q holds a space; a route is the pattern without the method (list methods in methods)", r)
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || 0x80 <= r && r < 0xa0 {
			return false
		}
	}
	return true
}

// isFieldName reports whether s is an HTTP field name (RFC 9110 token).
func isFieldName(s string) bool {
	if s == "" || len(s) > maxStringBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

func trimOWS(s string) string { return strings.Trim(s, " \t") }

// static reports whether the route, method and header conditions hold.
func (m *matcher) static(req keyfunc.Request, route *string, routeRead *bool, method uint16) bool {
	if m.methods != 0 && m.methods&method == 0 {
		return false
	}
	if m.hasRoutes {
		if !*routeRead {
			*route, *routeRead = req.Route(), true
		}
		if !m.route(*route) {
			return false
		}
	}
	for i := range m.headers {
		if !m.headers[i].match(req) {
			return false
		}
	}
	return true
}

// otherSpelling returns route r with its parameters in the other syntax
// routers use, "/items/{id}" (chi, net/http) for "/items/:id" (gin, echo,
// fiber) and back, so that one rule file serves every adapter; ok is false
// when r has no parameter, or one (a chi pattern "{id:[0-9]+}") that the
// other syntax cannot spell.
func otherSpelling(r string) (string, bool) {
	segs := strings.Split(r, "/")
	changed := false
	for i, s := range segs {
		switch {
		case len(s) > 1 && s[0] == ':' && !strings.ContainsAny(s[1:], ":{}"):
			segs[i], changed = "{"+s[1:]+"}", true
		case len(s) > 2 && s[0] == '{' && s[len(s)-1] == '}':
			name := s[1 : len(s)-1]
			if strings.ContainsAny(name, ":{}") {
				return "", false
			}
			segs[i], changed = ":"+name, true
		}
	}
	return strings.Join(segs, "/"), changed
}

func (m *matcher) route(r string) bool {
	if r == "" {
		return false
	}
	if _, ok := m.exact[r]; ok {
		return true
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(r, p) {
			return true
		}
	}
	return false
}

func (h *headerMatch) match(req keyfunc.Request) bool {
	vs := req.Header(h.name)
	if len(vs) == 0 {
		return false
	}
	v := trimOWS(vs[0])
	if v == "" {
		return false
	}
	return h.any || slices.Contains(h.values, v)
}

// Match returns the rule that applies to req: the first, in order, whose
// match holds; nil when none does, and then the request is not limited by
// the set. A rule that lists routes, reached by a request whose route is
// not known (keyfunc.Request's Route is "": a limit in fiber's app.Use, or
// in front of a router, and gin's 404s), is an error wrapping
// keyfunc.ErrNoKey, never a rule passed over. Conditions are checked cheapest first (method, route, headers),
// and the plan function is called only when a rule with plans is reached,
// at most once; its error is returned, wrapped. Match allocates nothing
// of its own.
func (s *Set) Match(req keyfunc.Request) (*Rule, error) {
	method := methodBit(req.Method())
	var (
		route, plan         string
		routeRead, planRead bool
	)
	for _, r := range s.rules {
		if r.m.hasRoutes && (r.m.methods == 0 || r.m.methods&method != 0) {
			if !routeRead {
				route, routeRead = req.Route(), true
			}
			if route == "" {
				// Not "no match": a later, laxer rule would then limit
				// a login where the limiter runs before routing.
				return nil, fmt.Errorf("rules: rule %q lists routes, and the request's route is not known where the limiter runs (%w): run it after routing, or on the route", r.name, keyfunc.ErrNoKey)
			}
		}
		if !r.m.static(req, &route, &routeRead, method) {
			continue
		}
		if r.m.plans != nil {
			if !planRead {
				var err error
				if plan, err = s.plan(req); err != nil {
					return nil, fmt.Errorf("rules: plan: %w", err)
				}
				planRead = true
			}
			if !slices.Contains(r.m.plans, plan) {
				continue
			}
		}
		return r, nil
	}
	return nil, nil
}
