package keyfunc

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
)

// Bounds on the forwarding headers read by ClientIP, so that a client
// cannot make key computation expensive with a long header; ClientIP's doc
// states them.
const (
	// maxForwardedEntries is how many X-Forwarded-For entries or Forwarded
	// elements ClientIP examines, from the right, at most.
	maxForwardedEntries = 32
	// maxForwardedBytes is how many bytes of a forwarding header ClientIP
	// scans, from the right, at most.
	maxForwardedBytes = 4096
)

// maxNodeBytes bounds one address in a header: the longest IPv6 address
// with a zone and a port is far shorter.
const maxNodeBytes = 128

// An IPOption configures [ClientIP], which applies the options in order
// and fails with the error of the first one that is nil or invalid.
type IPOption func(*ipConfig) error

type ipConfig struct {
	trusted   []netip.Prefix
	headers   []string // TrustHeader names, in order
	forwarded bool     // read Forwarded instead of X-Forwarded-For
	v4bits    int
	v6bits    int
}

// TrustProxies names the addresses of the reverse proxies and load balancers
// in front of the server. Only a request whose socket peer is in one of
// these prefixes has its forwarding header read: X-Forwarded-For by default,
// Forwarded with [UseForwarded]. The header is walked from the right,
// skipping trusted addresses; the first untrusted address is the client.
// A single address is a prefix of full length (/32 or /128). Prefixes are
// masked; IPv4-mapped IPv6 prefixes are unmapped. Calling TrustProxies more
// than once adds to the list.
//
// Default: no proxy is trusted; no header is read.
func TrustProxies(prefixes ...netip.Prefix) IPOption {
	prefixes = append([]netip.Prefix(nil), prefixes...)
	return func(c *ipConfig) error {
		for _, p := range prefixes {
			if !p.IsValid() {
				return fmt.Errorf("keyfunc: TrustProxies: invalid prefix %v", p)
			}
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
			c.trusted = append(c.trusted, p.Masked())
		}
		return nil
	}
}

// TrustHeader names a header holding the client address that a trusted
// proxy sets, overwriting any value the client sent: X-Real-IP (nginx),
// CF-Connecting-IP (Cloudflare), True-Client-IP (Akamai, Cloudflare
// Enterprise), Fly-Client-IP (Fly.io). It is read only when the socket peer
// is trusted ([TrustProxies] is required), before the forwarding header; its
// last value is used, and an invalid value falls through to the forwarding
// header. Several headers are tried in the order named.
//
// Name only a header that your proxy sets on every request: a header it
// passes through unchanged is written by the client. A name that is not a
// header field name (empty, holding a space or a colon), or that names a
// list, makes [ClientIP] fail.
func TrustHeader(name string) IPOption {
	return func(c *ipConfig) error {
		switch http.CanonicalHeaderKey(name) {
		case "":
			return errors.New("keyfunc: TrustHeader: empty header name")
		case "X-Forwarded-For", "Forwarded":
			return fmt.Errorf("keyfunc: TrustHeader: %s is a list, read with TrustProxies (and UseForwarded)", name)
		}
		if !isFieldName(name) {
			return fmt.Errorf("keyfunc: TrustHeader: %q is not a header field name", name)
		}
		c.headers = append(c.headers, name)
		return nil
	}
}

// UseForwarded makes [ClientIP] read the RFC 7239 Forwarded header instead of
// X-Forwarded-For. Read only the header your proxies write: one they pass
// through unchanged is written by the client, so the two are never combined.
// [TrustProxies] is required.
//
// Default: X-Forwarded-For.
func UseForwarded() IPOption {
	return func(c *ipConfig) error {
		c.forwarded = true
		return nil
	}
}

// IPv6Prefix sets how many leading bits of an IPv6 client address form its
// key, so that a client rotating through the addresses of its network
// (commonly a /64, often a /56 or /48) stays one key. 128 keys each address
// alone. bits must be in [1, 128].
//
// Default: 64.
func IPv6Prefix(bits int) IPOption {
	return func(c *ipConfig) error {
		if bits < 1 || bits > 128 {
			return fmt.Errorf("keyfunc: IPv6Prefix: %d bits is not in [1, 128]", bits)
		}
		c.v6bits = bits
		return nil
	}
}

// IPv4Prefix sets how many leading bits of an IPv4 client address form its
// key. bits must be in [1, 32].
//
// Default: 32, each address alone.
func IPv4Prefix(bits int) IPOption {
	return func(c *ipConfig) error {
		if bits < 1 || bits > 32 {
			return fmt.Errorf("keyfunc: IPv4Prefix: %d bits is not in [1, 32]", bits)
		}
		c.v4bits = bits
		return nil
	}
}

// PrivateNetworks returns the loopback and private address ranges
// (127.0.0.0/8, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, ::1/128,
// fc00::/7), for [TrustProxies] when the load balancer reaches the server
// over a private network (a cloud VPC, a Kubernetes cluster). Trust them only
// if no untrusted client can reach the server from inside that network.
func PrivateNetworks() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("fc00::/7"),
	}
}

// ClientIP returns a [Func] keying a request by its client's IP address, or
// an error naming the mistake when the options cannot be built: "keyfunc:
// ClientIP: option N is nil", an invalid option's own error (such as
// "keyfunc: IPv6Prefix: 0 bits is not in [1, 128]"), or a header option
// without [TrustProxies], whose header would never be read.
//
// Without options the client is the socket peer ([Request.RemoteAddr]) and
// no header is read, which is right for a server that clients reach
// directly: a header is whatever the client chose to send. Behind a reverse
// proxy or load balancer, name the proxies with [TrustProxies]; then, and only
// for requests whose peer is trusted, the client is taken from:
//
//  1. the headers named with [TrustHeader], in order;
//  2. X-Forwarded-For (or Forwarded, with [UseForwarded]), all lines joined,
//     walked from the right past trusted addresses: the first untrusted
//     address is the client.
//
// An invalid entry met on the walk, a chain of trusted addresses only, or a
// chain longer than 32 entries or 4096 bytes (all lines together, counted
// from the right) falls back to the socket peer. In Forwarded, for=unknown and
// obfuscated identifiers ("_hidden") are invalid entries.
//
// The address is normalized (port and zone removed, IPv4-mapped IPv6
// unmapped) and cut to a prefix: an IPv6 key is its /64 network
// ("2001:db8::/64") unless [IPv6Prefix] says otherwise, an IPv4 key is the
// address ("203.0.113.7") unless [IPv4Prefix] says otherwise. The key is
// never empty: a request whose peer is not an IP address (a Unix socket) is
// an error wrapping [ErrNoKey].
func ClientIP(opts ...IPOption) (Func, error) {
	c := &ipConfig{v4bits: 32, v6bits: 64}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("keyfunc: ClientIP: option %d is nil", i+1)
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if len(c.trusted) == 0 {
		switch {
		case len(c.headers) > 0:
			return nil, errors.New("keyfunc: ClientIP: TrustHeader without TrustProxies: the header would never be read")
		case c.forwarded:
			return nil, errors.New("keyfunc: ClientIP: UseForwarded without TrustProxies: the header would never be read")
		}
	}
	return c.key, nil
}

var peerIP = &ipConfig{v4bits: 32, v6bits: 64}

// PeerIP keys a request by its socket peer's address, IPv6 grouped by /64:
// it is ClientIP() without options. It reads no header, so it is the right
// default only for a server that clients reach directly.
func PeerIP(r Request) (string, error) { return peerIP.key(r) }

func (c *ipConfig) key(r Request) (string, error) {
	ra := r.RemoteAddr()
	host, peer, dotted := peerIPv4(ra)
	if !dotted {
		var ok bool
		if peer, ok = parsePeer(ra); !ok {
			return "", fmt.Errorf("%w: remote address %q is not an IP address", ErrNoKey, ra)
		}
	}
	if c.isTrusted(peer) {
		if a, ok := c.fromHeaders(r); ok {
			return c.format(a), nil
		}
	}
	if dotted && c.v4bits == 32 {
		return host, nil // already the canonical form: no need to format it
	}
	return c.format(peer), nil
}

func (c *ipConfig) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fromHeaders returns the client address that the trusted peer forwarded.
func (c *ipConfig) fromHeaders(r Request) (netip.Addr, bool) {
	for _, name := range c.headers {
		vs := r.Header(name)
		if len(vs) == 0 {
			continue
		}
		if a, ok := parseNode(trimOWS(vs[len(vs)-1])); ok {
			return a, true
		}
	}
	if c.forwarded {
		return walkForwarded(r.Header("Forwarded"), c.isTrusted)
	}
	return walkXFF(r.Header("X-Forwarded-For"), c.isTrusted)
}

// format returns the key of a normalized address: the address, or its
// network when the configured prefix is shorter than the address.
func (c *ipConfig) format(a netip.Addr) string {
	bits := c.v4bits
	if a.Is6() {
		bits = c.v6bits
	}
	if bits >= a.BitLen() {
		return a.String()
	}
	p, err := a.Prefix(bits)
	if err != nil { // unreachable: a is valid and bits in range
		return a.String()
	}
	var buf [64]byte
	return string(p.AppendTo(buf[:0]))
}

// peerIPv4 parses a socket peer address written "a.b.c.d:port", as
// net/http writes an IPv4 peer, and returns its host part and address; ok
// is false for every other form, which parsePeer reads. The host is the
// canonical spelling of the address (net/netip accepts no other spelling
// of a dotted quad), so it serves as the key as it is, without formatting
// the address again. It agrees with parsePeer wherever ok is true.
func peerIPv4(s string) (host string, a netip.Addr, ok bool) {
	// By hand, as netip.ParseAddr and strconv.ParseUint would read it (the
	// fuzz test holds the two together): this runs on every request, so
	// each field's one to three digits are read unrolled, with no loop
	// over the bytes of the address.
	var ip [4]byte
	i := 0
	for f := range ip {
		if i >= len(s) || s[i]-'0' > 9 {
			return "", netip.Addr{}, false
		}
		v := uint(s[i] - '0')
		i++
		if i < len(s) && s[i]-'0' <= 9 {
			if v == 0 { // a digit after a leading 0 ("01")
				return "", netip.Addr{}, false
			}
			v = v*10 + uint(s[i]-'0')
			i++
			if i < len(s) && s[i]-'0' <= 9 {
				if v = v*10 + uint(s[i]-'0'); v > 255 {
					return "", netip.Addr{}, false
				}
				i++
			}
		}
		sep := byte('.')
		if f == 3 {
			sep = ':'
		}
		// A fourth digit is no separator either.
		if i >= len(s) || s[i] != sep {
			return "", netip.Addr{}, false
		}
		ip[f] = byte(v)
		i++
	}
	if i >= len(s) {
		return "", netip.Addr{}, false
	}
	port := 0
	for _, c := range []byte(s[i:]) {
		if c < '0' || c > '9' {
			return "", netip.Addr{}, false
		}
		if port = port*10 + int(c-'0'); port > 65535 {
			return "", netip.Addr{}, false
		}
	}
	return s[:i-1], netip.AddrFrom4(ip), true
}

// parsePeer parses a socket peer address: "host:port", "[host]:port" or a
// bare address.
func parsePeer(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normalize(ap.Addr()), true
	}
	return parseNode(s)
}

// parseNode parses one address as found in a header: a bare IPv4 or IPv6
// address, "ipv4:port", "[ipv6]" or "[ipv6]:port". Ports are accepted
// because some load balancers (Azure) add them to X-Forwarded-For.
func parseNode(s string) (netip.Addr, bool) {
	if s == "" || len(s) > maxNodeBytes {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return normalize(a), true
	}
	if s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return normalize(a), true
		}
		return netip.Addr{}, false
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normalize(ap.Addr()), true
	}
	return netip.Addr{}, false
}

// normalize strips the zone and unmaps IPv4-mapped IPv6 addresses.
func normalize(a netip.Addr) netip.Addr {
	return a.WithZone("").Unmap()
}
