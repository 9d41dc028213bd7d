package keyfunc

import (
	"slices"
	"strconv"
	"strings"
)

// Join returns a [Func] whose key combines the keys of fns, such as an
// account and an IP address: the request is keyed by all of them at once.
// Each part is written as its length in bytes, a colon and the part
// ("5:alice11:203.0.113.7"), so the encoding is unambiguous: parts "a:b" and
// "c" never give the key of "a" and "b:c".
//
// The first error of a part is returned as is, so [errors.Is] still finds
// [ErrNoKey] or [ErrInvalidKey].
//
// Join returns nil when fns is empty or holds a nil Func (such as a
// constructor's nil for a configuration it cannot build): there is
// nothing to key by, and every adapter refuses a nil key function when it
// is built.
func Join(fns ...Func) Func {
	if len(fns) == 0 || slices.ContainsFunc(fns, func(f Func) bool { return f == nil }) {
		return nil
	}
	fns = slices.Clone(fns)
	return func(r Request) (string, error) {
		var b []byte
		for _, f := range fns {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			b = strconv.AppendInt(b, int64(len(k)), 10)
			b = append(b, ':')
			b = append(b, k...)
		}
		return string(b), nil
	}
}

// Prefix returns a [Func] whose keys are the keys of f in namespace ns:
// ns, a colon, and the key ("login:ana@example.com"). Namespaces keep the
// keys of different limits apart when they share a store. The key is
// unambiguous: "%" and ":" in ns are escaped as "%25" and "%3A", so ns ends at
// the key's first colon. An empty ns is a namespace too: the key is ":"
// and the key of f.
//
// Prefix returns nil when f is nil, as [Join] does.
func Prefix(ns string, f Func) Func {
	if f == nil {
		return nil
	}
	ns = strings.NewReplacer("%", "%25", ":", "%3A").Replace(ns) + ":"
	return func(r Request) (string, error) {
		k, err := f(r)
		if err != nil {
			return "", err
		}
		return ns + k, nil
	}
}
