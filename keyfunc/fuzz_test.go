package keyfunc

import (
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// checkIPKey checks the invariants of a ClientIP key for a request from
// remote: an error only when remote is not an address, otherwise a
// non-empty, canonical address or prefix that is either the peer's key or
// an untrusted client's.
func checkIPKey(t *testing.T, c *ipConfig, remote, key string, err error) {
	t.Helper()
	peer, ok := parsePeer(remote)
	if host, a, dotted := peerIPv4(remote); dotted && (!ok || a != peer || host != a.String()) {
		t.Fatalf("peerIPv4(%q) = %q, %v; parsePeer says %v, %v", remote, host, a, peer, ok)
	}
	if !ok {
		if !errors.Is(err, ErrNoKey) || key != "" {
			t.Fatalf("remote %q is not an address: key = %q, %v; want ErrNoKey", remote, key, err)
		}
		return
	}
	if err != nil || key == "" {
		t.Fatalf("key = %q, %v; want a key", key, err)
	}
	var a netip.Addr
	if p, err := netip.ParsePrefix(key); err == nil {
		if p.String() != key || p.Masked() != p {
			t.Fatalf("key %q is not a canonical network", key)
		}
		a = p.Addr()
	} else if a, err = netip.ParseAddr(key); err != nil || a.String() != key || a.Zone() != "" || a.Is4In6() {
		t.Fatalf("key %q is not a canonical address", key)
	}
	if key != c.format(peer) && c.isTrusted(a) {
		t.Fatalf("key %q is a trusted proxy's, not the peer's %q", key, c.format(peer))
	}
}

func fuzzIPConfig(t *testing.T, opts ...IPOption) *ipConfig {
	t.Helper()
	c := &ipConfig{v4bits: 32, v6bits: 64}
	for _, o := range append([]IPOption{TrustProxies(testProxies...)}, opts...) {
		if err := o(c); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// peerIPv4Ref is peerIPv4 by the standard library's parsers: the
// definition peerIPv4 must agree with on every input.
func peerIPv4Ref(s string) (string, netip.Addr, bool) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || s[0] == '[' || strings.IndexByte(s[:i], ':') >= 0 {
		return "", netip.Addr{}, false
	}
	if _, err := strconv.ParseUint(s[i+1:], 10, 16); err != nil {
		return "", netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s[:i]); err == nil && a.Is4() {
		return s[:i], a, true
	}
	return "", netip.Addr{}, false
}

// FuzzPeerIPv4 holds the hand-written fast path for "a.b.c.d:port" to
// netip and strconv's reading of the same string.
func FuzzPeerIPv4(f *testing.F) {
	for _, s := range []string{"192.0.2.1:1234", "0.0.0.0:0", "255.255.255.255:65535", "1.2.3.4:65536",
		"01.2.3.4:80", "1.2.3.4:0080", "1.2.3:80", "1.2.3.4.5:80", "1.2.3.4:", ":80", "1.2.3.256:1",
		"[::1]:80", "::ffff:1.2.3.4:80", "1.2.3.4%eth0:80", "1.2.3.4:+80", "1..2.3:4", "1.2.3.0004:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, a, ok := peerIPv4(s)
		wh, wa, wok := peerIPv4Ref(s)
		if host != wh || a != wa || ok != wok {
			t.Fatalf("peerIPv4(%q) = %q, %v, %v; netip and strconv say %q, %v, %v", s, host, a, ok, wh, wa, wok)
		}
	})
}

// FuzzXForwardedFor feeds arbitrary X-Forwarded-For headers (lines split at
// "\n") from arbitrary peers. The key is always a valid address, and the
// header lines give the same key as the lines joined with commas.
func FuzzXForwardedFor(f *testing.F) {
	f.Fuzz(func(t *testing.T, header, remote string) {
		c := fuzzIPConfig(t)
		lines := strings.Split(header, "\n")
		key, err := c.key(&fakeRequest{remote: remote, header: http.Header{"X-Forwarded-For": lines}})
		checkIPKey(t, c, remote, key, err)

		joined, jerr := c.key(&fakeRequest{remote: remote, header: http.Header{"X-Forwarded-For": {strings.Join(lines, ",")}}})
		if joined != key || (jerr == nil) != (err == nil) {
			t.Fatalf("lines %q give %q, %v; joined %q, %v", lines, key, err, joined, jerr)
		}
	})
}

// FuzzForwarded feeds arbitrary Forwarded headers (lines split at "\n") from
// arbitrary peers. The key is always a valid address.
func FuzzForwarded(f *testing.F) {
	f.Fuzz(func(t *testing.T, header, remote string) {
		c := fuzzIPConfig(t, UseForwarded())
		lines := strings.Split(header, "\n")
		key, err := c.key(&fakeRequest{remote: remote, header: http.Header{"Forwarded": lines}})
		checkIPKey(t, c, remote, key, err)
	})
}

// FuzzEmail feeds arbitrary strings to NormalizeEmail, with and without
// Gmail folding. An accepted address is non-empty, valid UTF-8, free of
// control, format and space characters, has a non-empty local part and an
// ASCII domain, and normalizes to itself.
func FuzzEmail(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		for _, opts := range [][]EmailOption{nil, {FoldGmail()}} {
			got, err := NormalizeEmail(s, opts...)
			if err != nil {
				if !errors.Is(err, ErrInvalidKey) || got != "" {
					t.Fatalf("NormalizeEmail(%+q) = %+q, %v; want ErrInvalidKey", s, got, err)
				}
				continue
			}
			if !utf8.ValidString(got) {
				t.Fatalf("NormalizeEmail(%+q) = %+q: invalid UTF-8", s, got)
			}
			for _, r := range got {
				if unicode.In(r, unicode.Cc, unicode.Cf) || unicode.IsSpace(r) {
					t.Fatalf("NormalizeEmail(%+q) = %+q: holds %U", s, got, r)
				}
			}
			at := strings.LastIndexByte(got, '@')
			if at <= 0 || at == len(got)-1 {
				t.Fatalf("NormalizeEmail(%+q) = %+q: empty local part or domain", s, got)
			}
			for _, b := range []byte(got[at+1:]) {
				if b >= utf8.RuneSelf || 'A' <= b && b <= 'Z' {
					t.Fatalf("NormalizeEmail(%+q) = %+q: domain not lower-case ASCII", s, got)
				}
			}
			again, err := NormalizeEmail(got, opts...)
			if err != nil || again != got {
				t.Fatalf("NormalizeEmail(%+q) = %+q, but NormalizeEmail(%+q) = %+q, %v", s, got, got, again, err)
			}
		}
	})
}
