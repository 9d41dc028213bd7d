package keyfunc

import (
	"net/netip"
	"strings"
	"testing"
)

func isTestProxy(a netip.Addr) bool {
	for _, p := range testProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// checkWalk runs walk on lines and compares the address found with want
// ("" meaning none: fall back to the peer).
func checkWalk(t *testing.T, walk func([]string, func(netip.Addr) bool) (netip.Addr, bool), lines []string, want string) {
	t.Helper()
	a, ok := walk(lines, isTestProxy)
	got := ""
	if ok {
		got = a.String()
	}
	if got != want {
		t.Errorf("walk(%q) = %q; want %q", lines, got, want)
	}
}

func TestWalkXFF(t *testing.T) {
	tests := []struct {
		lines []string
		want  string
	}{
		{nil, ""},
		{[]string{""}, ""},
		{[]string{",,, ,\t"}, ""},
		{[]string{"203.0.113.7"}, "203.0.113.7"},
		{[]string{"\t203.0.113.7 "}, "203.0.113.7"},
		{[]string{"1.1.1.1,203.0.113.7"}, "203.0.113.7"},
		{[]string{"1.1.1.1", "203.0.113.7,10.0.0.1", "", "10.0.0.2"}, "203.0.113.7"},
		{[]string{"203.0.113.7,", "10.0.0.1"}, "203.0.113.7"},
		{[]string{"10.0.0.1"}, ""},
		{[]string{"203.0.113.7 10.0.0.1"}, ""},
		{[]string{"203.0.113.7;10.0.0.1"}, ""},
		{[]string{"2001:db8::1"}, "2001:db8::1"},
		{[]string{"2001:db8:ffff::1"}, ""},
		{[]string{"[2001:db8::1]:80, 10.0.0.1:1234"}, "2001:db8::1"},
		{[]string{"::ffff:10.0.0.1, ::ffff:203.0.113.7"}, "203.0.113.7"},
		{[]string{"01.2.3.4"}, ""},
		{[]string{"203.0.113.7:99999"}, ""},
		{[]string{strings.Repeat("9", 200)}, ""},
		{[]string{"_hidden"}, ""},
	}
	for _, tt := range tests {
		checkWalk(t, walkXFF, tt.lines, tt.want)
	}
}

func TestWalkForwarded(t *testing.T) {
	tests := []struct {
		lines []string
		want  string
	}{
		{nil, ""},
		{[]string{""}, ""},
		{[]string{" , ,"}, ""},
		{[]string{"for=203.0.113.7"}, "203.0.113.7"},
		{[]string{"for = 203.0.113.7"}, "203.0.113.7"},
		{[]string{";;for=203.0.113.7;;"}, "203.0.113.7"},
		{[]string{`for="203.0.113.7"`}, "203.0.113.7"},
		{[]string{`for="[::ffff:203.0.113.7]:80"`}, "203.0.113.7"},
		{[]string{`for=[2001:db8::1]`}, "2001:db8::1"},
		{[]string{`for="[2001:db8::1"`}, ""},
		{[]string{`for="[2001:db8::1]x"`}, ""},
		{[]string{`for="[203.0.113.7]"`}, ""},
		{[]string{`for="203.0.113.7:"`}, ""},
		{[]string{`for="203.0.113.7:65536"`}, ""},
		{[]string{`for="203.0.113.7:_obf"`}, ""},
		{[]string{`for="UNKNOWN"`}, ""},
		{[]string{`for=_x;proto=http`}, ""},
		{[]string{`for=203.0.113.7;proto`}, ""},
		{[]string{`for=203.0.113.7 x`}, ""},
		{[]string{`for="203.0.113.7`}, ""},
		{[]string{`for="203.0.113.7\"`}, ""},
		{[]string{`for="203.0.113.7" x`}, ""},
		{[]string{`for=`}, ""},
		{[]string{`by=10.0.0.1`}, ""},
		{[]string{`for=203.0.113.7;by="a;b,c"`}, "203.0.113.7"},
		{[]string{`host="\\", for=203.0.113.7`}, "203.0.113.7"},
		{[]string{`for=6.6.6.6;host="\\\"", for=203.0.113.7`}, "203.0.113.7"},
		{[]string{`for=203.0.113.7;host="x\\", for=10.0.0.1`}, "203.0.113.7"},
		{[]string{"for=6.6.6.6", "for=203.0.113.7", "for=10.0.0.1"}, "203.0.113.7"},
		{[]string{"for=10.0.0.1", "for=10.0.0.2"}, ""},
	}
	for _, tt := range tests {
		checkWalk(t, walkForwarded, tt.lines, tt.want)
	}
}

// TestWalkBounds checks that both walkers give up, falling back to the peer,
// after maxForwardedEntries entries or maxForwardedBytes bytes, and that
// what lies beyond the client entry is never examined.
func TestWalkBounds(t *testing.T) {
	trustedN := func(n int, sep string) string {
		return strings.TrimSuffix(strings.Repeat("10.0.0.9, "+sep, n), ", "+sep)
	}
	tests := []struct {
		name  string
		walk  func([]string, func(netip.Addr) bool) (netip.Addr, bool)
		lines []string
		want  string
	}{
		{"XFF entries in bound", walkXFF, []string{"203.0.113.7, " + trustedN(maxForwardedEntries-1, "")}, "203.0.113.7"},
		{"XFF entries past bound", walkXFF, []string{"203.0.113.7, " + trustedN(maxForwardedEntries, "")}, ""},
		{"XFF entries past bound over lines", walkXFF, []string{"203.0.113.7", trustedN(maxForwardedEntries/2, ""), trustedN(maxForwardedEntries/2, "")}, ""},
		{"XFF bytes past bound", walkXFF, []string{"203.0.113.7," + strings.Repeat(" ", maxForwardedBytes)}, ""},
		{"XFF bytes past bound over lines", walkXFF, []string{"203.0.113.7", strings.Repeat(" ", maxForwardedBytes/2), strings.Repeat(" ", maxForwardedBytes/2)}, ""},
		{"XFF junk left of client", walkXFF, []string{strings.Repeat("x", 1<<20) + ",203.0.113.7"}, "203.0.113.7"},
		{"Forwarded entries in bound", walkForwarded, []string{"for=203.0.113.7, " + strings.Repeat("for=10.0.0.9, ", maxForwardedEntries-2) + "for=10.0.0.9"}, "203.0.113.7"},
		{"Forwarded entries past bound", walkForwarded, []string{"for=203.0.113.7, " + strings.Repeat("for=10.0.0.9, ", maxForwardedEntries-1) + "for=10.0.0.9"}, ""},
		{"Forwarded bytes past bound", walkForwarded, []string{`for=203.0.113.7;x="` + strings.Repeat(",", maxForwardedBytes) + `"`}, ""},
		{"Forwarded junk left of client", walkForwarded, []string{`for="` + strings.Repeat(`\",`, 1<<18) + ", for=203.0.113.7"}, "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkWalk(t, tt.walk, tt.lines, tt.want)
		})
	}
}

func TestUnquote(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{``, ``, true},
		{`abc`, `abc`, true},
		{`"abc"`, `abc`, true},
		{`""`, ``, true},
		{`"a\"b"`, `a"b`, true},
		{`"a\\"`, `a\`, true},
		{`"`, ``, false},
		{`"abc`, ``, false},
		{`"a"b"`, ``, false},
		{`"a\"`, ``, false},
		{`a"b`, ``, false},
		{`a b`, ``, false},
	}
	for _, tt := range tests {
		got, ok := unquote(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("unquote(%#q) = %#q, %v; want %#q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
