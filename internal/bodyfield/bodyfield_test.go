package bodyfield

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/bodytest"
)

// defaultMax is the bound keyfunc's views use by default
// (keyfunc.DefaultMaxBodyBytes).
const defaultMax = 1 << 20

func TestDecode(t *testing.T) {
	const json = `{"email":"ana@example.com"}`
	plain := []byte(json)
	gz := bodytest.Encode(t, plain, "gzip")
	gzDeflate := bodytest.Encode(t, plain, "deflate", "gzip")
	padded := []byte(`{"email":"ana@example.com","pad":"` + strings.Repeat("a", 200) + `"}`)
	gzPadded := bodytest.Encode(t, padded, "gzip")
	// Empty gzip members, one after another: each decodes to nothing, so
	// the body is empty, but the layer above produces all of them.
	var empties []byte
	for len(empties) < 8<<10 {
		empties = append(empties, bodytest.Encode(t, nil, "gzip")...)
	}
	tests := []struct {
		name     string
		encoding []string
		body     []byte
		max      int64
		want     string
		wantErr  bool // an error wrapping ErrInvalidKey
	}{
		{"no encoding", nil, plain, defaultMax, json, false},
		{"identity", []string{"identity"}, plain, defaultMax, json, false},
		{"empty list", []string{" , "}, plain, defaultMax, json, false},
		{"gzip", []string{"gzip"}, gz, defaultMax, json, false},
		{"x-gzip", []string{"x-gzip"}, gz, defaultMax, json, false},
		{"case and spaces", []string{" GZip\t"}, gz, defaultMax, json, false},
		{"deflate", []string{"deflate"}, bodytest.Encode(t, plain, "deflate"), defaultMax, json, false},
		{"deflate then gzip", []string{"deflate, gzip"}, bodytest.Encode(t, plain, "deflate", "gzip"), defaultMax, json, false},
		{"codings on two lines", []string{"deflate", "identity, gzip"}, bodytest.Encode(t, plain, "deflate", "gzip"), defaultMax, json, false},
		{"gzip twice", []string{"gzip, gzip"}, bodytest.Encode(t, plain, "gzip", "gzip"), defaultMax, json, false},
		// Not a zlib stream: taken as decoded, and no JSON.
		{"in the wrong order", []string{"gzip, deflate"}, gzDeflate, defaultMax, string(gzDeflate), false},
		{"already decoded", []string{"gzip"}, plain, defaultMax, json, false},
		{"empty body", []string{"br"}, nil, defaultMax, "", false},
		{"br", []string{"br"}, gz, defaultMax, "", true},
		{"zstd after gzip", []string{"gzip, zstd"}, gz, defaultMax, "", true},
		{"unknown", []string{"gzip;q=1"}, gz, defaultMax, "", true},
		{"three codings", []string{"gzip, gzip, gzip"}, bodytest.Encode(t, plain, "gzip", "gzip", "gzip"), defaultMax, "", true},
		{"truncated", []string{"gzip"}, gz[:len(gz)-4], defaultMax, "", true},
		{"bad checksum", []string{"gzip"}, append(gz[:len(gz)-8:len(gz)-8], 0, 0, 0, 0, 27, 0, 0, 0), defaultMax, "", true},
		{"trailing garbage", []string{"gzip"}, append(gz[:len(gz):len(gz)], "garbage"...), defaultMax, "", true},
		{"zlib with a dictionary", []string{"deflate"}, []byte{0x78, 0x20, 0, 0, 0, 1, 3, 0}, defaultMax, "", true},
		{"as sent at the bound", nil, plain, int64(len(plain)), json, false},
		{"as sent over the bound", nil, plain, int64(len(plain)) - 1, "", true},
		{"encoded over the bound", []string{"gzip"}, gz, int64(len(gz)) - 1, "", true},
		{"decoded at the bound", []string{"gzip"}, gzPadded, int64(len(padded)), string(padded), false},
		{"decoded over the bound", []string{"gzip"}, gzPadded, int64(len(padded)) - 1, "", true},
		{"inner layer over the bound", []string{"gzip, gzip"}, bodytest.Encode(t, empties, "gzip"), 4 << 10, "", true},
		{"inner layer at the bound", []string{"gzip, gzip"}, bodytest.Encode(t, empties, "gzip"), int64(len(empties)), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := bytes.Clone(tt.body)
			got, err := Decode(tt.encoding, tt.body, tt.max)
			switch {
			case tt.wantErr && !errors.Is(err, ErrInvalidKey):
				t.Fatalf("Decode = %q, %v; want an error wrapping ErrInvalidKey", got, err)
			case !tt.wantErr && err != nil:
				t.Fatalf("Decode: %v", err)
			case string(got) != tt.want:
				t.Errorf("Decode = %q; want %q", got, tt.want)
			}
			if !bytes.Equal(tt.body, sent) {
				t.Errorf("Decode modified the body")
			}
		})
	}
}

func TestDecodeBomb(t *testing.T) {
	for layers := 1; layers <= 2; layers++ {
		b := bodytest.GzipBomb(t, layers)
		enc := strings.TrimSuffix(strings.Repeat("gzip,", layers), ",")
		alloc := allocated(func() {
			if got, err := Decode([]string{enc}, b, defaultMax); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("%d layers: Decode = %d bytes, %v; want an error wrapping ErrInvalidKey", layers, len(got), err)
			}
		})
		if alloc > maxBombAlloc {
			t.Errorf("%d layers: Decode allocated %d bytes; want at most %d", layers, alloc, maxBombAlloc)
		}
	}
}

// maxBombAlloc is the most a request carrying a gzip bomb may allocate.
const maxBombAlloc = 8 << 20

// allocated returns the bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// fromBody reads a body as each common handler might: as the form its
// type declares, and as JSON when it starts as an object, whatever its
// type; two readings that disagree are refused.
func TestFromBodyReadings(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	const ana = `{"email":"ana@example.com"}`
	for _, tc := range []struct {
		ct, body string
		want     string
		wantErr  bool // an error wrapping ErrInvalidKey
	}{
		{"application/json", ana, "ana@example.com", false},
		{"text/plain", ana, "ana@example.com", false},
		{"text/plain; charset=UTF-8", " \r\n\t" + ana, "ana@example.com", false},
		{"", ana, "ana@example.com", false},
		{"application/json;", ana, "ana@example.com", false},
		{"application/json;;", ana, "ana@example.com", false},
		{`application/json; charset="x`, ana, "ana@example.com", false},
		{"application/jsonx", ana, "ana@example.com", false},
		{"application/octet-stream", ana, "ana@example.com", false},
		{"no type at all", ana, "ana@example.com", false},
		{"text/plain", `{"email":5}`, "", true},
		{"text/plain", `{"email":"a","EMAIL":"b"}`, "", true},
		{"text/plain", `[{"email":"a"}]`, "", false},
		{"text/plain", `{"email":"a"`, "", false}, // not JSON: a decoding handler fails too
		{"application/json", `{"email":"a"`, "", true},
		{"text/plain", "email=a", "", false}, // no handler reads a text body as a form
		// A form, even with malformed parameters (as net/http reads it) or
		// a type that merely starts as one (as fasthttp reads it).
		{form + `; charset="x`, "email=a", "a", false},
		{form + "x", "email=a", "a", false},
		{form + ", text/plain", "email=a", "a", false},
		{"Application/X-WWW-Form-Urlencoded", "email=a", "a", false},
		// JSON sent as a form: read as JSON too.
		{form, ana, "ana@example.com", false},
		{form, `{"x":"&email=b"}`, `b"}`, false}, // only a form reader finds it
		{form, `{"email":"a","x":"&email=a"}`, "", true},
		// A form sent as JSON is no JSON: refused.
		{"application/json", "email=a", "", true},
		{"multipart/form-data", "--b\r\n", "", true},
		{`multipart/form-data; boundary="b`, "--b\r\n", "", true},
	} {
		got, err := fromBody(tc.ct, []byte(tc.body), "email")
		if tc.wantErr != (err != nil) || err != nil && !errors.Is(err, ErrInvalidKey) || got != tc.want {
			t.Errorf("fromBody(%q, %q) = %q, %v; want %q (error %v)", tc.ct, tc.body, got, err, tc.want, tc.wantErr)
		}
	}
}

// RequestField reads the body first and falls back to the query, as the
// view of FromHTTP does.
func TestField(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	for _, tc := range []struct {
		ct, body, query string
		want            string
		wantErr         error
	}{
		{form, "email=body%40example.com", "email=query@example.com", "", ErrInvalidKey},
		{form, "email=same%40example.com", "email=same@example.com", "same@example.com", nil},
		{"text/plain", `{"email":"json@example.com"}`, "email=query@example.com", "", ErrInvalidKey},
		{"text/plain", `{"email":"json@example.com"}`, "email=json@example.com", "json@example.com", nil},
		{form, "other=1", "email=query@example.com", "query@example.com", nil},
		{"application/json", `{"email":"json@example.com"}`, "", "json@example.com", nil},
		{"text/plain", "email=body@example.com", "email=query@example.com", "query@example.com", nil},
		{form, "", "email=a&email=a", "a", nil},
		{form, "", "email=a&email=b", "", ErrInvalidKey},
		{form, "email=a&email=b", "email=a", "", ErrInvalidKey},
		{form, "", "", "", nil},
		{form, "", "%zz&email=a", "a", nil}, // a malformed pair is skipped
	} {
		got, err := Field(tc.ct, []byte(tc.body), tc.query, "email")
		if got != tc.want || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("Field(%q, %q, %q) = %q, %v; want %q, %v", tc.ct, tc.body, tc.query, got, err, tc.want, tc.wantErr)
		}
	}
}

// FuzzDecode decodes arbitrary bodies with arbitrary Content-Encoding
// headers (lines split at "\n") within a small bound. It never produces
// more than the bound, never modifies the body, and every error wraps
// ErrInvalidKey; a body without codings comes back as is. Its seeds, in
// testdata, include a two-layer gzip bomb and a layer of empty gzip members.
func FuzzDecode(f *testing.F) {
	const max = 4 << 10
	f.Fuzz(func(t *testing.T, encoding string, body []byte) {
		lines := strings.Split(encoding, "\n")
		sent := bytes.Clone(body)
		got, err := Decode(lines, body, max)
		if !bytes.Equal(body, sent) {
			t.Fatalf("Decode modified the body")
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("Decode error %v does not wrap ErrInvalidKey", err)
			}
			return
		}
		if len(got) > max {
			t.Fatalf("Decode returned %d bytes; want at most %d", len(got), max)
		}
		if strings.Trim(encoding, " \t\n,") == "" && !bytes.Equal(got, body) {
			t.Fatalf("Decode without codings = %q; want the body %q", got, body)
		}
	})
}

// FuzzFromBody reads the field "email" of arbitrary bodies with arbitrary
// Content-Types. It never panics; every error wraps ErrInvalidKey; and a
// type that declares no form, multipart or JSON body reads as no type at
// all: what it claims never changes the key.
func FuzzFromBody(f *testing.F) {
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		got, err := fromBody(contentType, body, "email")
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("fromBody(%q, %q) error %v does not wrap ErrInvalidKey", contentType, body, err)
		}
		if err != nil && got != "" {
			t.Fatalf("fromBody(%q, %q) = %q with error %v", contentType, body, got, err)
		}
		if kind, _ := bodyKind(contentType); kind == noFields {
			plain, perr := fromBody("", body, "email")
			if plain != got || (perr == nil) != (err == nil) {
				t.Fatalf("fromBody(%q, %q) = %q, %v; without a type %q, %v", contentType, body, got, err, plain, perr)
			}
		}
	})
}
