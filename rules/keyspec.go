package rules

import (
	"fmt"
	"net/textproto"
	"sort"
	"strings"

	"github.com/ratekit/ratekit/keyfunc"
)

// The built-in key specs without an argument.
var builtinKeys = map[string]keyfunc.Func{
	"peer":         keyfunc.PeerIP,
	"route":        keyfunc.Route,
	"route-method": keyfunc.RouteMethod,
	"ip":           nil, // built per set, from its trusted proxies
}

// isBuiltinKey reports whether name is a built-in key spec or the prefix of
// one, which WithKeyFunc cannot take.
func isBuiltinKey(name string) bool {
	_, ok := builtinKeys[name]
	return ok || name == "header" || name == "email" || name == "context"
}

// key compiles a limit's key spec: one spec, or several joined.
func (b *builder) key(path string, specs []string) (keyfunc.Func, []string) {
	switch {
	case len(specs) == 0:
		b.errs.addf(path, "a key is required, such as ip, header:X-Api-Key or [email:username, ip]")
		return nil, nil
	case len(specs) > maxKeyParts:
		b.errs.addf(path, "%d parts, at most %d", len(specs), maxKeyParts)
		return nil, nil
	}
	fns := make([]keyfunc.Func, 0, len(specs))
	canon := make([]string, 0, len(specs))
	for i, spec := range specs {
		p := path
		if len(specs) > 1 {
			p = fmt.Sprintf("%s[%d]", path, i)
		}
		f, c, err := b.keySpec(spec)
		if err != nil {
			b.errs.add(p, err)
			continue
		}
		fns = append(fns, f)
		canon = append(canon, c)
	}
	if len(fns) != len(specs) {
		return nil, nil
	}
	if len(fns) == 1 {
		return fns[0], canon
	}
	return keyfunc.Join(fns...), canon
}

// keySpec compiles one key spec, returning it in its canonical spelling.
func (b *builder) keySpec(spec string) (keyfunc.Func, string, error) {
	kind, arg, hasArg := strings.Cut(spec, ":")
	if !hasArg {
		switch spec {
		case "ip":
			f, err := b.ip()
			return f, spec, err
		case "peer", "route", "route-method":
			return builtinKeys[spec], spec, nil
		}
		if f, ok := b.o.keyFuncs[spec]; ok {
			return f, spec, nil
		}
		return nil, "", fmt.Errorf("%q is not a key spec; want %s", spec, b.knownKeys())
	}
	switch kind {
	case "header":
		f := keyfunc.Header(arg, b.o.secret)
		if f == nil {
			return nil, "", fmt.Errorf("%q: %q is not a header name", spec, arg)
		}
		return f, "header:" + textproto.CanonicalMIMEHeaderKey(arg), nil
	case "email":
		if arg == "" || len(arg) > maxStringBytes {
			return nil, "", fmt.Errorf("%q: the field name must be 1 to %d bytes", spec, maxStringBytes)
		}
		return keyfunc.Email(arg), spec, nil
	case "context":
		k, ok := b.o.contextKeys[arg]
		if !ok {
			return nil, "", fmt.Errorf("%q: no context key is registered as %q (rules.WithContextKey)", spec, arg)
		}
		return keyfunc.ContextValue(k), spec, nil
	}
	return nil, "", fmt.Errorf("%q is not a key spec; want %s", spec, b.knownKeys())
}

// ip returns the set's "ip" key function, built on first use.
func (b *builder) ip() (keyfunc.Func, error) {
	if !b.ipBuilt {
		b.ipBuilt = true
		opts := b.o.ipOptions
		if len(b.trusted) > 0 {
			opts = append(opts[:len(opts):len(opts)], keyfunc.TrustProxies(b.trusted...))
		}
		f, err := keyfunc.ClientIP(opts...)
		if err != nil {
			b.ipErr = fmt.Errorf("ip: %w", err)
		}
		b.clientIP = f
	}
	return b.clientIP, b.ipErr
}

func (b *builder) knownKeys() string {
	names := []string{"ip", "peer", "route", "route-method", "header:<Name>", "email:<field>", "context:<name>"}
	var own []string
	for name := range b.o.keyFuncs {
		own = append(own, name)
	}
	sort.Strings(own)
	return strings.Join(append(names, own...), ", ")
}
