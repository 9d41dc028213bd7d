package keyfunc

import (
	"net/netip"
	"strings"
)

// This file parses the forwarding headers that trusted proxies append to:
// X-Forwarded-For (a comma-separated list of addresses) and RFC 7239
// Forwarded (a comma-separated list of elements, each a semicolon-separated
// list of name=value pairs). Both are walked from the right, the end written
// by the nearest proxy, so that whatever a client put on the left is never
// parsed, and both stop after maxForwardedEntries entries or
// maxForwardedBytes bytes. Each header line is walked on its own: a list
// split over several lines is the same list as the lines joined with commas.

// walkXFF returns the rightmost untrusted address of an X-Forwarded-For
// list, and false if the list is absent, holds only trusted addresses, holds
// an invalid entry before an untrusted one, or is too long.
func walkXFF(lines []string, trusted func(netip.Addr) bool) (netip.Addr, bool) {
	entries, budget := 0, maxForwardedBytes
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		end := len(line)
		for end >= 0 {
			start := end - 1
			for start >= 0 && line[start] != ',' {
				if end-start > budget {
					return netip.Addr{}, false // out of budget
				}
				start--
			}
			if budget -= end - start; budget < 0 {
				return netip.Addr{}, false
			}
			entry := trimOWS(line[start+1 : end])
			end = start
			if entry == "" {
				continue // empty list elements are ignored (RFC 9110, 5.6.1)
			}
			if entries++; entries > maxForwardedEntries {
				return netip.Addr{}, false
			}
			a, ok := parseNode(entry)
			if !ok {
				return netip.Addr{}, false
			}
			if !trusted(a) {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// walkForwarded returns the rightmost untrusted "for" address of a Forwarded
// header, with the same rules as walkXFF. An element without exactly one
// "for" parameter, or whose "for" is "unknown" or an obfuscated identifier,
// is invalid.
func walkForwarded(lines []string, trusted func(netip.Addr) bool) (netip.Addr, bool) {
	entries, budget := 0, maxForwardedBytes
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		end := len(line)
		for end >= 0 {
			start := lastElementStart(line[:end], budget)
			if start < -1 {
				return netip.Addr{}, false // out of budget
			}
			budget -= end - start
			elem := trimOWS(line[start+1 : end])
			end = start
			if elem == "" {
				continue
			}
			if entries++; entries > maxForwardedEntries {
				return netip.Addr{}, false
			}
			a, ok := forwardedFor(elem)
			if !ok {
				return netip.Addr{}, false
			}
			if !trusted(a) {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// lastElementStart returns the index of the comma before the last element
// of s, -1 if there is none, or -2 if it scanned more than budget bytes
// without finding out. Commas inside quoted strings do not count. Scanning
// backwards, a quote ends a quoted string unless an odd number of
// backslashes precede it (a quoted-pair).
func lastElementStart(s string, budget int) int {
	inQuote := false
	for i := len(s) - 1; i >= 0; i-- {
		if len(s)-i > budget {
			return -2
		}
		switch s[i] {
		case '"':
			if !inQuote {
				inQuote = true
				continue
			}
			n := 0
			for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				inQuote = false
			}
		case ',':
			if !inQuote {
				return i
			}
		}
	}
	if len(s)+1 > budget {
		return -2
	}
	return -1
}

// forwardedFor returns the address of the single "for" parameter of one
// Forwarded element, such as `for="[2001:db8::17]:4711";proto=https`.
func forwardedFor(elem string) (netip.Addr, bool) {
	var node string
	found := false
	for elem != "" {
		pair, rest, ok := cutUnquoted(elem, ';')
		elem = rest
		pair = trimOWS(pair)
		if pair == "" {
			if !ok {
				break
			}
			continue
		}
		name, value, hasEq := strings.Cut(pair, "=")
		if !hasEq {
			return netip.Addr{}, false
		}
		if !strings.EqualFold(trimOWS(name), "for") {
			continue
		}
		if found {
			return netip.Addr{}, false // a parameter occurs at most once (RFC 7239, 4)
		}
		v, ok := unquote(trimOWS(value))
		if !ok {
			return netip.Addr{}, false
		}
		node, found = v, true
	}
	if !found {
		return netip.Addr{}, false
	}
	return forwardedNode(node)
}

// forwardedNode parses an RFC 7239 node: "192.0.2.43", "192.0.2.43:47011",
// "[2001:db8::17]" or "[2001:db8::17]:4711". "unknown" and obfuscated
// identifiers ("_hidden", or an obfuscated port) name no address and are
// invalid. An unbracketed IPv6 address without a port, which some proxies
// write, is accepted.
func forwardedNode(s string) (netip.Addr, bool) {
	if s == "" || len(s) > maxNodeBytes || s[0] == '_' || strings.EqualFold(s, "unknown") {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return normalize(a), true
	}
	if s[0] == '[' {
		i := strings.IndexByte(s, ']')
		if i < 0 {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:i])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		if port := s[i+1:]; port != "" && !validPort(port) {
			return netip.Addr{}, false
		}
		return normalize(a), true
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s[:i])
	if err != nil || !a.Is4() || !validPort(s[i:]) {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort reports whether s is ":" followed by a decimal port. An
// obfuscated port ("_abc") names no port and is invalid.
func validPort(s string) bool {
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	n := 0
	for _, c := range []byte(s[1:]) {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

// cutUnquoted is strings.Cut at the first sep outside a quoted string.
func cutUnquoted(s string, sep byte) (before, after string, found bool) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++ // skip the quoted-pair's second byte
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == sep:
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// unquote returns a token as is and the content of a quoted string with its
// quoted-pairs resolved; a malformed quoted string is invalid.
func unquote(s string) (string, bool) {
	if s == "" || s[0] != '"' {
		if strings.ContainsAny(s, "\"\\ \t") {
			return "", false
		}
		return s, true
	}
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", false
	}
	s = s[1 : len(s)-1]
	if !strings.ContainsAny(s, "\\\"") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return "", false
		case '\\':
			i++
			if i == len(s) {
				return "", false
			}
			c = s[i]
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// trimOWS removes the optional whitespace (spaces and tabs) around a list
// element.
func trimOWS(s string) string {
	return strings.Trim(s, " \t")
}
