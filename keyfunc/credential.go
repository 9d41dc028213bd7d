package keyfunc

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
)

// Reading credentials canonically. A server that accepts one credential in
// several spellings would otherwise give it several keys: net/http's
// Request.BasicAuth matches the scheme case-insensitively and decodes
// base64 ignoring the unused bits of its last character, so one Basic
// credential has 512 spellings it reads alike; a Bearer token's scheme has
// 64. Each spelling is mapped to one canonical form, itself a valid
// credential in that spelling, so canonicalCredential(c) == c for every
// form it returns (FuzzCredential checks it). A value no server reads as
// a credential is an error, not keyed by its raw bytes: keying it would
// give back to the client what canonicalizing took away, wherever a
// framework reads it more leniently than the syntax allows.

// maxCredentialParams bounds the auth-params of one credential: a request
// header can hold thousands, and each costs work to sort.
const maxCredentialParams = 32

// isCredentialHeader reports whether the header name holds credentials,
// read by [Header] canonically: Authorization and Proxy-Authorization
// (RFC 9110, sections 11.6.2 and 11.7.2).
func isCredentialHeader(name string) bool {
	return strings.EqualFold(name, "Authorization") || strings.EqualFold(name, "Proxy-Authorization")
}

// canonicalCredential returns the canonical spelling of v, the value of an
// Authorization or Proxy-Authorization field, with its surrounding spaces
// and tabs already removed. RFC 9110 section 11.4 defines it as
//
//	credentials = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
//
// and the canonical spelling is the scheme in lower case, one space, then:
//
//   - Basic (RFC 7617): the base64 of the user-id:password the value
//     decodes to, decoded as net/http's Request.BasicAuth decodes it
//     (standard alphabet, padding required, unused bits ignored) and
//     encoded canonically, so every spelling of one user-id and password
//     is one credential. A value that does not decode, or holds no colon,
//     is rejected, as net/http rejects it.
//   - Bearer (RFC 6750): the token exactly, as a server compares it.
//   - another scheme with a token68: the token68 exactly.
//   - another scheme with auth-params: the params sorted by name, names in
//     lower case, each value a token when it is one, else a quoted-string
//     with only '"' and '\' escaped, joined with ", ": whitespace, empty
//     list elements, param order and quoting are spellings. A param given
//     twice is rejected (RFC 9110 section 11.2 allows it once), as is a
//     list of more than maxCredentialParams.
//   - a scheme alone: the scheme.
//
// Any space or tab separates the scheme from what follows. Errors wrap
// [ErrInvalidKey] and never quote the value, which is a secret.
func canonicalCredential(v string) (string, error) {
	n := tokenLen(v)
	if n == 0 {
		return "", credentialError("no auth-scheme")
	}
	scheme, rest := asciiLower(v[:n]), v[n:]
	if rest != "" {
		if rest[0] != ' ' && rest[0] != '\t' {
			return "", credentialError("no space after the auth-scheme")
		}
		rest = strings.TrimLeft(rest, " \t")
	}
	switch scheme {
	case "basic":
		b, err := base64.StdEncoding.DecodeString(rest)
		if err != nil || rest == "" {
			return "", credentialError("Basic credentials are not base64")
		}
		if bytes.IndexByte(b, ':') < 0 {
			return "", credentialError("Basic credentials hold no colon")
		}
		return "basic " + base64.StdEncoding.EncodeToString(b), nil
	case "bearer":
		if rest == "" {
			return "", credentialError("Bearer credentials without a token")
		}
		return "bearer " + rest, nil
	}
	switch {
	case rest == "":
		return scheme, nil
	case isToken68(rest):
		return scheme + " " + rest, nil
	}
	params, err := parseAuthParams(rest)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(scheme)
	for i, p := range params {
		if i == 0 {
			b.WriteByte(' ')
		} else {
			b.WriteString(", ")
		}
		b.WriteString(p.name)
		b.WriteByte('=')
		if p.value != "" && tokenLen(p.value) == len(p.value) {
			b.WriteString(p.value)
			continue
		}
		b.WriteByte('"')
		for i := range len(p.value) {
			if c := p.value[i]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(p.value[i])
		}
		b.WriteByte('"')
	}
	return b.String(), nil
}

func credentialError(reason string) error {
	return fmt.Errorf("%w: credentials: %s", ErrInvalidKey, reason)
}

// authParam is one auth-param, its name in lower case and its value
// unquoted.
type authParam struct{ name, value string }

// parseAuthParams parses s, a #auth-param list, and returns its params
// sorted by name:
//
//	auth-param = token BWS "=" BWS ( token / quoted-string )
func parseAuthParams(s string) ([]authParam, error) {
	var ps []authParam
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			break
		}
		if s[0] == ',' { // an empty list element
			s = s[1:]
			continue
		}
		n := tokenLen(s)
		if n == 0 {
			return nil, credentialError("malformed auth-param")
		}
		p := authParam{name: asciiLower(s[:n])}
		s = strings.TrimLeft(s[n:], " \t")
		if s == "" || s[0] != '=' {
			return nil, credentialError("auth-param without a value")
		}
		s = strings.TrimLeft(s[1:], " \t")
		if s != "" && s[0] == '"' {
			var err error
			if p.value, s, err = quotedString(s); err != nil {
				return nil, err
			}
		} else {
			n := tokenLen(s)
			if n == 0 {
				return nil, credentialError("auth-param without a value")
			}
			p.value, s = s[:n], s[n:]
		}
		if len(ps) == maxCredentialParams {
			return nil, credentialError(fmt.Sprintf("more than %d auth-params", maxCredentialParams))
		}
		ps = append(ps, p)
		s = strings.TrimLeft(s, " \t")
		if s != "" && s[0] != ',' {
			return nil, credentialError("malformed auth-param list")
		}
	}
	if len(ps) == 0 {
		return nil, credentialError("malformed credentials")
	}
	slices.SortStableFunc(ps, func(a, b authParam) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(ps); i++ {
		if ps[i].name == ps[i-1].name {
			return nil, credentialError("an auth-param given twice")
		}
	}
	return ps, nil
}

// quotedString parses the quoted-string at the start of s (RFC 9110
// section 5.6.4) and returns its value, unescaped, and what follows it.
func quotedString(s string) (value, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return b.String(), s[i+1:], nil
		case c == '\\':
			i++
			if i == len(s) || !isQuotable(s[i]) {
				return "", "", credentialError("malformed quoted-pair")
			}
			b.WriteByte(s[i])
		case !isQuotable(c):
			return "", "", credentialError("control character in a quoted-string")
		default:
			b.WriteByte(c)
		}
	}
	return "", "", credentialError("unterminated quoted-string")
}

// isQuotable reports whether c may appear in a quoted-string, escaped or
// not: HTAB, SP, VCHAR or obs-text.
func isQuotable(c byte) bool { return c == '\t' || c >= ' ' && c != 0x7f }

// tokenLen returns the length of the token (1*tchar) at the start of s.
func tokenLen(s string) int {
	for i := range len(s) {
		if !isTchar(s[i]) {
			return i
		}
	}
	return len(s)
}

// isTchar reports whether c is a tchar (RFC 9110 section 5.6.2).
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// isToken68 reports whether s is a token68 (RFC 9110 section 11.2):
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	t := strings.TrimRight(s, "=")
	if t == "" {
		return false
	}
	for i := range len(t) {
		switch c := t[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~+/", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// asciiLower returns s, a token, in lower case.
func asciiLower(s string) string {
	for i := range len(s) {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
