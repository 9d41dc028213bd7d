// Package bodytest builds the abusive request bodies that the body tests of
// keyfunc and of every adapter send: a gzip bomb and bodies in a stack of
// encodings. It is for tests only.
package bodytest

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"strings"
	"sync"
	"testing"
)

// BombSize is the decoded size of a [GzipBomb]: 256 MiB, 256 times
// the default bound on a body read for a key (1 MiB).
const BombSize = 256 << 20

// BombEmail is the email address at the start of a [GzipBomb].
const BombEmail = "a@b.c"

var bombs struct {
	sync.Mutex
	layers [][]byte // layers[i]: gzipped i+1 times
}

// GzipBomb returns the JSON object {"email":"a@b.c","pad":"aaa…"} of
// [BombSize] bytes gzipped layers times, to be sent with the
// Content-Encoding of [GzipEncoding](layers): about 330 KB for one layer,
// 1.5 KB for two, 300 bytes for three. The decoded body is never held in
// memory; the result is built once per layers and shared, so callers must
// not modify it. It fails t if layers < 1.
func GzipBomb(t testing.TB, layers int) []byte {
	t.Helper()
	if layers < 1 {
		t.Fatalf("GzipBomb: %d layers, want at least 1", layers)
	}
	bombs.Lock()
	defer bombs.Unlock()
	for len(bombs.layers) < layers {
		var buf bytes.Buffer
		if len(bombs.layers) == 0 {
			// BestSpeed: a tenth of the time of the other levels for 256
			// MiB; the next layer squeezes what it leaves.
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
			head := `{"email":"` + BombEmail + `","pad":"`
			tail := `"}`
			io.WriteString(zw, head)
			chunk := bytes.Repeat([]byte{'a'}, 1<<20)
			pad := BombSize - len(head) - len(tail)
			for pad > 0 {
				n := min(pad, len(chunk))
				zw.Write(chunk[:n])
				pad -= n
			}
			io.WriteString(zw, tail)
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			zw.Write(bombs.layers[len(bombs.layers)-1])
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
		}
		bombs.layers = append(bombs.layers, buf.Bytes())
	}
	return bombs.layers[layers-1]
}

// GzipEncoding returns the Content-Encoding of a body gzipped layers
// times: "gzip, gzip" for 2.
func GzipEncoding(layers int) string {
	return strings.TrimSuffix(strings.Repeat("gzip, ", layers), ", ")
}

// Encode returns body encoded with codings in the order given, as
// Content-Encoding lists them (the last one applied last): "gzip" and
// "deflate" (zlib, as HTTP means it). It fails t on any other coding.
func Encode(t testing.TB, body []byte, codings ...string) []byte {
	t.Helper()
	for _, c := range codings {
		var buf bytes.Buffer
		var w io.WriteCloser
		switch c {
		case "gzip":
			w = gzip.NewWriter(&buf)
		case "deflate":
			w = zlib.NewWriter(&buf)
		default:
			t.Fatalf("Encode: unknown coding %q", c)
		}
		w.Write(body)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		body = buf.Bytes()
	}
	return body
}
