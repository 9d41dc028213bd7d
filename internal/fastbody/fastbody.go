// Package fastbody is the part of the fasthttp request view that fiber's
// two majors share (fiberlimit for v2, fiber3limit for v3): the peer's
// address, header values
// copied out of fasthttp's reused buffers, and a body field read within a
// bound, a streamed body included, by internal/bodyfield. It names no
// fasthttp type, so that the root module does not require fasthttp: the
// adapters pass their *fasthttp.Request and its header, whose methods
// these interfaces list.
package fastbody

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/ratekit/ratekit/internal/bodyfield"
)

// Header is what is read of a *fasthttp.RequestHeader.
type Header interface {
	ContentLength() int
	ContentType() []byte
	PeekAll(key string) [][]byte
}

// Body is what is read and put back of a *fasthttp.Request's body.
type Body interface {
	IsBodyStream() bool
	Body() []byte
	BodyStream() io.Reader
	SetBodyStream(bodyStream io.Reader, bodySize int)
}

// Values returns every value of the named header, each a copy (fasthttp
// reuses its buffers), or nil if it is absent.
func Values(h Header, name string) []string { return Strings(h.PeekAll(name)) }

// Strings returns a copy of each of raw as a string, or nil for none: the
// values fasthttp's PeekAll returns, in buffers it reuses.
func Strings(raw [][]byte) []string {
	if len(raw) == 0 {
		return nil
	}
	vs := make([]string, len(raw))
	for i, v := range raw {
		vs[i] = string(v)
	}
	return vs
}

// Field returns the named field of the request body or the URL query
// (rawQuery), as keyfunc.Request's Field documents: the body as sent,
// decoded within maxBody by bodyfield. pkg names the adapter in errors.
func Field(pkg string, h Header, b Body, rawQuery []byte, name string, maxBody int64) (string, error) {
	ct := string(h.ContentType())
	raw, err := rawBody(pkg, h, b, maxBody)
	if err != nil {
		return "", err
	}
	body, err := bodyfield.Decode(Values(h, "Content-Encoding"), raw, maxBody)
	if err != nil {
		return "", err
	}
	return bodyfield.Field(ct, body, string(rawQuery), name)
}

// rawBody returns the request body as sent, or an error when it is
// declared longer than maxBytes. fasthttp holds the body in memory unless
// the app streams request bodies (StreamRequestBody); a streamed body of a
// declared length up to maxBytes is read and put back as the body stream,
// and one of unknown length is refused unread, since what was read of it
// could not be put back in front of the rest.
func rawBody(pkg string, h Header, b Body, maxBytes int64) ([]byte, error) {
	n := int64(h.ContentLength()) // -1: chunked
	if n > maxBytes {
		return nil, fmt.Errorf("%w: request body of %d bytes is larger than %d", bodyfield.ErrInvalidKey, n, maxBytes)
	}
	if !b.IsBodyStream() {
		return b.Body(), nil
	}
	if n < 0 {
		return nil, fmt.Errorf("%s: %w: a streamed request body of unknown length is not read to find a key", pkg, bodyfield.ErrInvalidKey)
	}
	data, err := io.ReadAll(io.LimitReader(b.BodyStream(), n))
	var replay io.Reader = bytes.NewReader(data)
	if err != nil {
		replay = io.MultiReader(replay, errReader{err})
	}
	b.SetBodyStream(replay, int(n))
	if err != nil {
		return nil, fmt.Errorf("%s: read request body: %w", pkg, err)
	}
	return data, nil
}

// errReader is the rest of a body stream that failed.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// RemoteAddr returns a's String, "ip:port" for a TCP address, in one
// allocation where net.TCPAddr's String takes two.
func RemoteAddr(a net.Addr) string {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		if a == nil {
			return ""
		}
		return a.String()
	}
	ip, ok := netip.AddrFromSlice(t.IP)
	if !ok || t.Port < 0 || t.Port > 0xffff {
		return t.String()
	}
	// net.IP's String writes an IPv4-mapped address as IPv4.
	ip = ip.Unmap()
	if t.Zone != "" && ip.Is6() {
		ip = ip.WithZone(t.Zone)
	}
	var buf [64]byte
	return string(netip.AddrPortFrom(ip, uint16(t.Port)).AppendTo(buf[:0]))
}
