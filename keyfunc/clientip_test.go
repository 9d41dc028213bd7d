package keyfunc

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

var testProxies = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
}

func mustClientIP(t testing.TB, opts ...IPOption) Func {
	t.Helper()
	fn, err := ClientIP(opts...)
	if err != nil {
		t.Fatalf("ClientIP: %v", err)
	}
	return fn
}

func TestClientIP(t *testing.T) {
	trusted := TrustProxies(testProxies...)
	long := strings.Repeat("10.0.0.9, ", maxForwardedEntries-1) // with the last entry: maxForwardedEntries trusted
	tests := []struct {
		name   string
		opts   []IPOption
		remote string
		header http.Header
		want   string
	}{
		// The spoofing matrix: who may set the client address.
		{"direct, no header", nil, "198.51.100.7:5555", nil, "198.51.100.7"},
		{"direct client spoofs XFF, default", nil, "198.51.100.7:5555",
			http.Header{"X-Forwarded-For": {"1.2.3.4"}}, "198.51.100.7"},
		{"direct client spoofs XFF, proxies configured", []IPOption{trusted}, "198.51.100.7:5555",
			http.Header{"X-Forwarded-For": {"1.2.3.4"}}, "198.51.100.7"},
		{"direct client spoofs Forwarded", []IPOption{trusted, UseForwarded()}, "198.51.100.7:5555",
			http.Header{"Forwarded": {"for=1.2.3.4"}}, "198.51.100.7"},
		{"direct client spoofs X-Real-IP", []IPOption{trusted, TrustHeader("X-Real-IP")}, "198.51.100.7:5555",
			http.Header{"X-Real-Ip": {"1.2.3.4"}}, "198.51.100.7"},
		{"trusted proxy, client spoofed left entry", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"6.6.6.6, 203.0.113.7"}}, "203.0.113.7"},
		{"trusted proxy, two lines as one", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"6.6.6.6", "203.0.113.7"}}, "203.0.113.7"},
		{"trusted proxies skipped", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"6.6.6.6, 203.0.113.7, 10.0.0.3", "10.0.0.2"}}, "203.0.113.7"},
		{"trusted IPv6 proxy", []IPOption{trusted}, "[2001:db8:ffff::1]:443",
			http.Header{"X-Forwarded-For": {"203.0.113.7, 2001:db8:ffff::2"}}, "203.0.113.7"},
		{"XFF ignored without proxies", nil, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "10.0.0.1"},
		{"no header from trusted proxy", []IPOption{trusted}, "10.0.0.1:80", nil, "10.0.0.1"},
		{"empty header", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {""}}, "10.0.0.1"},
		{"empty elements ignored", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {" ,203.0.113.7, ,", ""}}, "203.0.113.7"},
		{"all trusted falls back to peer", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"10.0.0.3, 10.0.0.2"}}, "10.0.0.1"},
		{"invalid rightmost falls back to peer", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7, garbage"}}, "10.0.0.1"},
		{"unknown falls back to peer", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"unknown"}}, "10.0.0.1"},
		{"invalid entry left of client not read", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"garbage, 203.0.113.7"}}, "203.0.113.7"},
		{"entry with port", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7:4711"}}, "203.0.113.7"},
		{"bracketed IPv6 with port", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"[2001:db8::1]:4711"}}, "2001:db8::/64"},
		{"bracketed IPv6", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"[2001:db8::1]"}}, "2001:db8::/64"},
		{"bracketed IPv4 invalid", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"[203.0.113.7]"}}, "10.0.0.1"},
		{"IPv4-mapped entry unmapped", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"::ffff:203.0.113.7"}}, "203.0.113.7"},
		{"IPv4-mapped trusted entry skipped", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7, ::ffff:10.0.0.2"}}, "203.0.113.7"},
		{"zone stripped", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"fe80::1%eth0"}}, "fe80::/64"},
		{"IPv4-mapped peer trusted", []IPOption{trusted}, "[::ffff:10.0.0.1]:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"chain at the entry bound", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7, " + strings.Repeat("10.0.0.9, ", maxForwardedEntries-2) + "10.0.0.9"}}, "203.0.113.7"},
		{"chain past the entry bound", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7, " + long + "10.0.0.9"}}, "10.0.0.1"},
		{"entry past the byte bound", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7" + strings.Repeat(" ", maxForwardedBytes)}}, "10.0.0.1"},
		{"spoofed entries past the bound never read", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {strings.Repeat("6.6.6.6,", 10000) + "203.0.113.7"}}, "203.0.113.7"},
		{"Forwarded ignored by default", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=203.0.113.7"}}, "10.0.0.1"},

		// Forwarded (RFC 7239).
		{"Forwarded", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=192.0.2.60;proto=http;by=203.0.113.43"}}, "192.0.2.60"},
		{"Forwarded spoofed left element", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=6.6.6.6, for=203.0.113.7"}}, "203.0.113.7"},
		{"Forwarded two lines", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=6.6.6.6", "for=203.0.113.7;proto=https", "for=10.0.0.2"}}, "203.0.113.7"},
		{"Forwarded quoted IPv6 with port", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for="[2001:db8:cafe::17]:4711"`}}, "2001:db8:cafe::/64"},
		{"Forwarded quoted IPv4 with port", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for="203.0.113.7:8080"`}}, "203.0.113.7"},
		{"Forwarded case-insensitive name", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {"Proto=https; FOR=203.0.113.7"}}, "203.0.113.7"},
		{"Forwarded quoted-pair", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for="\[2001:db8::1\]"`}}, "2001:db8::/64"},
		{"Forwarded comma in quoted string", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for=203.0.113.7;host="a,b", for=10.0.0.2`}}, "203.0.113.7"},
		{"Forwarded escaped quote", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for=203.0.113.7;host="a\",b"`}}, "203.0.113.7"},
		{"Forwarded unbracketed IPv6", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for="2001:db8::1"`}}, "2001:db8::/64"},
		{"Forwarded unknown", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=6.6.6.6, for=unknown"}}, "10.0.0.1"},
		{"Forwarded obfuscated", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=6.6.6.6, for=_hidden"}}, "10.0.0.1"},
		{"Forwarded obfuscated port", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for="[2001:db8::1]:_p"`}}, "10.0.0.1"},
		{"Forwarded unbracketed IPv6 with port", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for="2001:db8::1:80:"`}}, "10.0.0.1"},
		{"Forwarded duplicate for", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=203.0.113.7;for=6.6.6.6"}}, "10.0.0.1"},
		{"Forwarded element without for", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=203.0.113.7, proto=https"}}, "10.0.0.1"},
		{"Forwarded unterminated quote", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for="203.0.113.7`}}, "10.0.0.1"},
		{"Forwarded client's unterminated quote", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {`for="6.6.6.6, for=203.0.113.7`}}, "203.0.113.7"},
		{"Forwarded all trusted", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"Forwarded": {"for=10.0.0.3, for=10.0.0.2"}}, "10.0.0.1"},
		{"XFF ignored with UseForwarded", []IPOption{trusted, UseForwarded()}, "10.0.0.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "10.0.0.1"},

		// Single-address headers, named explicitly.
		{"X-Real-IP", []IPOption{trusted, TrustHeader("X-Real-IP")}, "10.0.0.1:80",
			http.Header{"X-Real-Ip": {"203.0.113.9"}, "X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.9"},
		{"X-Real-IP not named", []IPOption{trusted}, "10.0.0.1:80",
			http.Header{"X-Real-Ip": {"203.0.113.9"}}, "10.0.0.1"},
		{"CF-Connecting-IP last value", []IPOption{trusted, TrustHeader("cf-connecting-ip")}, "10.0.0.1:80",
			http.Header{"Cf-Connecting-Ip": {"6.6.6.6", " 2001:db8::5 "}}, "2001:db8::/64"},
		{"invalid trusted header falls through to XFF", []IPOption{trusted, TrustHeader("X-Real-IP")}, "10.0.0.1:80",
			http.Header{"X-Real-Ip": {"1.2.3.4, 5.6.7.8"}, "X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"headers tried in order", []IPOption{trusted, TrustHeader("CF-Connecting-IP"), TrustHeader("X-Real-IP")}, "10.0.0.1:80",
			http.Header{"X-Real-Ip": {"203.0.113.9"}}, "203.0.113.9"},

		// Normalization and grouping.
		{"peer without port", nil, "203.0.113.7", nil, "203.0.113.7"},
		{"IPv4-mapped peer", nil, "[::ffff:203.0.113.7]:80", nil, "203.0.113.7"},
		{"IPv6 peer /64", nil, "[2001:db8::1]:80", nil, "2001:db8::/64"},
		{"IPv6 peer same /64", nil, "[2001:db8::ffff:1]:80", nil, "2001:db8::/64"},
		{"IPv6 peer other /64", nil, "[2001:db8:0:1::1]:80", nil, "2001:db8:0:1::/64"},
		{"IPv6 peer with zone", nil, "[fe80::1%eth0]:80", nil, "fe80::/64"},
		{"IPv6Prefix 128", []IPOption{IPv6Prefix(128)}, "[2001:db8::1]:80", nil, "2001:db8::1"},
		{"IPv6Prefix 48", []IPOption{IPv6Prefix(48)}, "[2001:db8:0:1::1]:80", nil, "2001:db8::/48"},
		{"IPv4Prefix 24", []IPOption{IPv4Prefix(24)}, "203.0.113.7:80", nil, "203.0.113.0/24"},
		{"mapped trusted prefix", []IPOption{TrustProxies(netip.MustParsePrefix("::ffff:10.0.0.0/104"))}, "10.1.2.3:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"single-address trusted prefix", []IPOption{TrustProxies(netip.MustParsePrefix("192.0.2.1/32"))}, "192.0.2.1:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"unmasked trusted prefix", []IPOption{TrustProxies(netip.MustParsePrefix("192.0.2.1/24"))}, "192.0.2.200:80",
			http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakeRequest{remote: tt.remote, header: tt.header}
			checkKey(t, mustClientIP(t, tt.opts...), r, tt.want, nil)
		})
	}
}

func TestClientIPNoPeer(t *testing.T) {
	for _, remote := range []string{"", "@", "/run/app.sock", "example.com:80", "203.0.113.7:http"} {
		t.Run(remote, func(t *testing.T) {
			checkKey(t, PeerIP, &fakeRequest{remote: remote}, "", ErrNoKey)
			checkKey(t, mustClientIP(t, TrustProxies(testProxies...)), &fakeRequest{remote: remote}, "", ErrNoKey)
		})
	}
}

func TestClientIPConfig(t *testing.T) {
	tests := []struct {
		name    string
		opts    []IPOption
		wantErr string
	}{
		{"defaults", nil, ""},
		{"proxies and headers", []IPOption{TrustProxies(PrivateNetworks()...), TrustHeader("X-Real-IP"), UseForwarded()}, ""},
		{"invalid prefix", []IPOption{TrustProxies(netip.Prefix{})}, "keyfunc: TrustProxies: invalid prefix"},
		{"IPv6Prefix 0", []IPOption{IPv6Prefix(0)}, "keyfunc: IPv6Prefix: 0 bits"},
		{"IPv6Prefix 129", []IPOption{IPv6Prefix(129)}, "keyfunc: IPv6Prefix: 129 bits"},
		{"IPv4Prefix 33", []IPOption{IPv4Prefix(33)}, "keyfunc: IPv4Prefix: 33 bits"},
		{"IPv4Prefix -1", []IPOption{IPv4Prefix(-1)}, "keyfunc: IPv4Prefix: -1 bits"},
		{"empty header name", []IPOption{TrustProxies(testProxies...), TrustHeader("")}, "keyfunc: TrustHeader: empty"},
		{"XFF as header", []IPOption{TrustProxies(testProxies...), TrustHeader("x-forwarded-for")}, "keyfunc: TrustHeader: x-forwarded-for is a list"},
		{"Forwarded as header", []IPOption{TrustProxies(testProxies...), TrustHeader("Forwarded")}, "keyfunc: TrustHeader: Forwarded is a list"},
		{"header without proxies", []IPOption{TrustHeader("X-Real-IP")}, "keyfunc: ClientIP: TrustHeader without TrustProxies"},
		{"Forwarded without proxies", []IPOption{UseForwarded()}, "keyfunc: ClientIP: UseForwarded without TrustProxies"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := ClientIP(tt.opts...)
			if tt.wantErr == "" {
				if err != nil || fn == nil {
					t.Fatalf("ClientIP = %v, %v; want a Func", fn, err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("ClientIP error = %v; want prefix %q", err, tt.wantErr)
			}
			if fn != nil {
				t.Errorf("ClientIP returned a Func with error %v", err)
			}
		})
	}
}

// TestTrustProxiesCopies checks that the caller's slice is copied.
func TestTrustProxiesCopies(t *testing.T) {
	ps := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	opt := TrustProxies(ps...)
	ps[0] = netip.MustParsePrefix("192.0.2.0/24")
	fn := mustClientIP(t, opt)
	r := &fakeRequest{remote: "10.0.0.1:80", header: http.Header{"X-Forwarded-For": {"203.0.113.7"}}}
	checkKey(t, fn, r, "203.0.113.7", nil)
}

// BenchmarkClientIP measures keying a net/http request: from its socket peer
// (the default, no proxy) and from a five-entry X-Forwarded-For chain behind
// trusted proxies (one client entry, four proxies, the first spoofed entry
// never reached). The request is built once; only the key function is timed.
func BenchmarkClientIP(b *testing.B) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	cases := []struct {
		name   string
		opts   []IPOption
		remote string
		xff    string
		want   string
	}{
		{"RemoteAddr", nil, "203.0.113.7:5555", "", "203.0.113.7"},
		{"RemoteAddrIPv6", nil, "[2001:db8::1]:5555", "", "2001:db8::/64"},
		{"XForwardedFor5", []IPOption{TrustProxies(trusted...)}, "10.0.0.1:80",
			"6.6.6.6, 203.0.113.7, 10.0.0.4, 10.0.0.3, 10.0.0.2", "203.0.113.7"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			fn := mustClientIP(b, c.opts...)
			hr := httptest.NewRequest("GET", "/", nil)
			hr.RemoteAddr = c.remote
			if c.xff != "" {
				hr.Header.Set("X-Forwarded-For", c.xff)
			}
			r := FromHTTP(hr)
			if k, err := fn(r); k != c.want || err != nil {
				b.Fatalf("key = %q, %v; want %q", k, err, c.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fn(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The peer's key is taken from RemoteAddr without formatting only when it
// is written there canonically; every form still gives the canonical key.
func TestPeerKeyForms(t *testing.T) {
	for _, tt := range []struct{ remote, want string }{
		{"203.0.113.7:41234", "203.0.113.7"},
		{"203.0.113.7", "203.0.113.7"},
		{"[::ffff:203.0.113.7]:80", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"0.0.0.0:1", "0.0.0.0"},
		{"[2001:db8::1]:443", "2001:db8::/64"},
		{"[fe80::1%eth0]:443", "fe80::/64"},
	} {
		got, err := PeerIP(&fakeRequest{remote: tt.remote})
		if err != nil || got != tt.want {
			t.Errorf("PeerIP(RemoteAddr %q) = %q, %v; want %q", tt.remote, got, err, tt.want)
		}
	}
	req := &fakeRequest{remote: "203.0.113.7:41234"}
	if n := testing.AllocsPerRun(100, func() { PeerIP(req) }); n != 0 {
		t.Errorf("PeerIP of an IPv4 peer allocates %v times, want 0", n)
	}
}

// Whatever a socket peer's address looks like, the key taken in place is
// the canonical one net/netip would format.
func TestPeerKeyInPlaceIsCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		a := netip.AddrFrom4([4]byte{byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		for _, remote := range []string{
			netip.AddrPortFrom(a, uint16(rng.IntN(65536))).String(),
			a.String(),
			"[" + netip.AddrFrom16(a.As16()).String() + "]:80",
		} {
			got, err := PeerIP(&fakeRequest{remote: remote})
			if err != nil || got != a.String() {
				t.Fatalf("PeerIP(RemoteAddr %q) = %q, %v; want %q", remote, got, err, a.String())
			}
		}
	}
}

func TestClientIPNilOption(t *testing.T) {
	if _, err := ClientIP(nil); err == nil || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Errorf("ClientIP(nil): %v, want an error naming the nil option", err)
	}
}
