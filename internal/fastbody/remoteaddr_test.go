package fastbody_test

import (
	"net"
	"testing"

	"github.com/ratekit/ratekit/internal/fastbody"
)

func TestRemoteAddr(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, // 16-byte, IPv4-mapped
		&net.TCPAddr{IP: net.IP{192, 0, 2, 1}, Port: 80},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 8080, Zone: "eth0"},
		&net.TCPAddr{IP: net.ParseIP("::ffff:198.51.100.7"), Port: 0},
		&net.TCPAddr{IP: nil, Port: 5},
		&net.TCPAddr{IP: net.IP{1, 2, 3}, Port: 5},
		&net.UnixAddr{Name: "/tmp/s", Net: "unix"},
	} {
		if got, want := fastbody.RemoteAddr(a), a.String(); got != want {
			t.Errorf("RemoteAddr(%#v) = %q, want %q as String writes it", a, got, want)
		}
	}
	if got := fastbody.RemoteAddr(nil); got != "" {
		t.Errorf("RemoteAddr(nil) = %q", got)
	}
	a := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}
	if n := testing.AllocsPerRun(100, func() { fastbody.RemoteAddr(a) }); n > 1 {
		t.Errorf("RemoteAddr allocates %v times, want 1", n)
	}
}
