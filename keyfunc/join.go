package keyfunc

import (
	"errors"
	"fmt"
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
// [ErrNoKey] or [ErrInvalidKey]. Join with no functions returns a Func that
// always fails with [ErrNoKey].
func Join(fns ...Func) Func {
	fns = append([]Func(nil), fns...)
	return func(r Request) (string, error) {
		if len(fns) == 0 {
			return "", fmt.Errorf("%w: Join of no key functions", ErrNoKey)
		}
		var b []byte
		for _, f := range fns {
			if f == nil {
				return "", errors.New("keyfunc: Join: nil key function")
			}
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
// the key's first colon.
func Prefix(ns string, f Func) Func {
	ns = strings.NewReplacer("%", "%25", ":", "%3A").Replace(ns) + ":"
	return func(r Request) (string, error) {
		if f == nil {
			return "", errors.New("keyfunc: Prefix: nil key function")
		}
		k, err := f(r)
		if err != nil {
			return "", err
		}
		return ns + k, nil
	}
}
