// Package bodyfield reads a field of a request body the one way every
// request view of ratekit reads it (keyfunc.FromHTTP's and fiberlimit's):
// [Decode] undoes the body's Content-Encoding within a bound, and [Field]
// reads the field from the decoded body and the URL query as every common
// handler might read it, refusing what two readings give differently.
package bodyfield

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"strings"
)

// ErrInvalidKey is keyfunc.ErrInvalidKey, which keyfunc declares as this
// value: every error here for a body or field that cannot be used wraps
// it.
var ErrInvalidKey = errors.New("keyfunc: invalid key")

// maxFieldBytes bounds one multipart field value read by fromBody.
const maxFieldBytes = 64 << 10

// fromBody returns the named field of a request body already read and
// decoded, read as [Field] documents.
func fromBody(contentType string, body []byte, name string) (string, error) {
	if len(body) == 0 {
		return "", nil
	}
	var v string
	var err error
	switch kind, params := bodyKind(contentType); kind {
	case fieldsJSON:
		return jsonField(body, name)
	case fieldsForm:
		// Like net/http's ParseForm: keep the well-formed pairs of a body
		// with a bad escape somewhere else.
		vs, _ := url.ParseQuery(string(body))
		v, err = singleValue(vs[name], name)
	case fieldsMultipart:
		v, err = multipartField(body, params["boundary"], name)
	}
	if err != nil || !looksJSONObject(body) {
		return v, err
	}
	j, err := jsonField(body, name)
	var notJSON *jsonSyntaxError
	switch {
	case errors.As(err, &notJSON):
		return v, nil // not JSON: a handler decoding it fails too
	case err != nil:
		return "", err // a member that is no string, or given twice
	case v != "" && j != "" && v != j:
		return "", fmt.Errorf("%w: field %q given with different values as a form field and as a JSON member", ErrInvalidKey, name)
	case j != "":
		return j, nil
	}
	return v, nil
}

// looksJSONObject reports whether body starts with "{" after JSON white
// space, as a JSON object does.
func looksJSONObject(body []byte) bool {
	for _, c := range body {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}

// A fieldsKind is the kind of body a Content-Type declares.
type fieldsKind uint8

const (
	noFields fieldsKind = iota
	fieldsForm
	fieldsMultipart
	fieldsJSON
)

// bodyKind returns what kind of body contentType declares, and the media
// type's parameters (nil when they are malformed).
func bodyKind(contentType string) (fieldsKind, map[string]string) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		// The type of a header with malformed parameters, as net/http's
		// ParseForm takes it; without even a type, the header as fasthttp
		// and echo match it, by its start.
		params = nil
		if mt == "" {
			mt = strings.ToLower(strings.TrimSpace(contentType))
		}
	}
	switch {
	case strings.HasPrefix(mt, "application/x-www-form-urlencoded"):
		return fieldsForm, params
	case strings.HasPrefix(mt, "multipart/form-data"):
		return fieldsMultipart, params
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return fieldsJSON, params
	}
	return noFields, nil
}

// maxCodings bounds how many content codings [Decode] undoes for one
// body. One is usual; more serve no purpose but to multiply the work, which
// is at most maxCodings times the bound.
const maxCodings = 2

// A coding is a content coding that [Decode] decodes.
type coding uint8

const (
	codingGzip    coding = iota + 1 // gzip, x-gzip: RFC 1952
	codingDeflate                   // deflate: the zlib format, RFC 1950
)

func (c coding) String() string {
	if c == codingGzip {
		return "gzip"
	}
	return "deflate"
}

// Decode returns body, a request body as sent, decoded as its
// Content-Encoding header says, for [Field]. encoding holds the header's
// lines as keyfunc.Request's Header returns them; each is a
// comma-separated list of codings, in the order they were applied.
// Decoding undoes them in reverse, each through a reader that stops as
// soon as its output passes maxBytes, so that no layer of a stacked
// encoding ever produces more than maxBytes+1 bytes, however small the
// body. maxBytes must be positive: the caller's bound (keyfunc's
// DefaultMaxBodyBytes unless configured).
//
// gzip (or x-gzip) and deflate (the zlib format, as HTTP means it) are
// decoded, and identity is skipped. An error wrapping [ErrInvalidKey]
// reports any other coding (such as br or zstd), more than 2 codings, a
// body larger than maxBytes as sent or decoded, or a corrupt encoded
// body. A body without codings is returned as is, as is one that does not
// start as its last coding's format does: middleware such as echo's
// Decompress decodes the body and leaves the header in place.
func Decode(encoding []string, body []byte, maxBytes int64) ([]byte, error) {
	if int64(len(body)) > maxBytes {
		return nil, fmt.Errorf("%w: request body of %d bytes is larger than %d", ErrInvalidKey, len(body), maxBytes)
	}
	if len(encoding) == 0 || len(body) == 0 {
		return body, nil
	}
	codings, err := parseCodings(encoding)
	if err != nil {
		return nil, err
	}
	if len(codings) == 0 || !looksEncoded(codings[len(codings)-1], body) {
		return body, nil
	}
	var r io.Reader = bytes.NewReader(body)
	for i := len(codings) - 1; i >= 0; i-- {
		var dec io.Reader
		switch codings[i] {
		case codingGzip:
			dec, err = gzip.NewReader(r)
		case codingDeflate:
			dec, err = zlib.NewReader(r)
		}
		if err != nil {
			return nil, decodeError(codings[i].String(), err, maxBytes)
		}
		r = &boundedReader{r: dec, n: maxBytes}
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, decodeError("encoded", err, maxBytes)
	}
	return out, nil
}

// decodeError is the error of Decode for err met decoding what.
func decodeError(what string, err error, maxBytes int64) error {
	if errors.Is(err, errDecodedTooLarge) {
		return fmt.Errorf("%w: request body is larger than %d bytes decoded", ErrInvalidKey, maxBytes)
	}
	return fmt.Errorf("%w: %s request body: %w", ErrInvalidKey, what, err)
}

// parseCodings returns the codings of the Content-Encoding lines, in the
// order listed, without identity.
func parseCodings(lines []string) ([]coding, error) {
	var cs []coding
	for _, line := range lines {
		for c := range strings.SplitSeq(line, ",") {
			c = strings.TrimSpace(c)
			var cd coding
			switch {
			case c == "", strings.EqualFold(c, "identity"):
				continue
			case strings.EqualFold(c, "gzip"), strings.EqualFold(c, "x-gzip"):
				cd = codingGzip
			case strings.EqualFold(c, "deflate"):
				cd = codingDeflate
			default:
				if len(c) > 32 {
					c = c[:32] + "..."
				}
				return nil, fmt.Errorf("%w: request body Content-Encoding %q is not decoded to find a key (gzip and deflate are)", ErrInvalidKey, c)
			}
			if len(cs) == maxCodings {
				return nil, fmt.Errorf("%w: request body Content-Encoding lists more than %d codings", ErrInvalidKey, maxCodings)
			}
			cs = append(cs, cd)
		}
	}
	return cs, nil
}

// looksEncoded reports whether b starts as a body encoded with c does: the
// gzip magic number, or a zlib header for deflate.
func looksEncoded(c coding, b []byte) bool {
	if len(b) < 2 {
		return false
	}
	if c == codingGzip {
		return b[0] == 0x1f && b[1] == 0x8b
	}
	// CMF: method 8 (deflate), window at most 32 KiB; FCHECK makes the
	// first two bytes a multiple of 31.
	return b[0]&0x0f == 8 && b[0]>>4 <= 7 && (uint(b[0])<<8|uint(b[1]))%31 == 0
}

// errDecodedTooLarge is a boundedReader's error once it has passed its
// bound.
var errDecodedTooLarge = errors.New("bodyfield: decoded body too large")

// boundedReader reads r until r has produced n bytes, then one more at
// most, with errDecodedTooLarge.
type boundedReader struct {
	r io.Reader
	n int64 // bytes r may still produce
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n < 0 {
		return 0, errDecodedTooLarge
	}
	if int64(len(p)) > b.n+1 {
		p = p[:b.n+1]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if b.n < 0 {
		return n, errDecodedTooLarge
	}
	return n, err
}

// Field returns a request's field name as every request view reads it,
// from body (the body decoded by [Decode]; an empty body has no fields)
// and from the URL query string rawQuery. contentType is the Content-Type
// header. The body is read as every common handler might read it, and
// they must agree:
//
//   - as a URL-encoded form (the field's value, matched exactly) when the
//     media type is application/x-www-form-urlencoded, even with malformed
//     parameters, as net/http's ParseForm reads it, or merely starts so, as
//     fasthttp reads it;
//   - as a multipart form (the non-file part with that form name) when the
//     media type is multipart/form-data;
//   - as a JSON object (a top-level string member, its name matched
//     case-insensitively as encoding/json does) when the media type is
//     application/json or "+json", and, whatever the type, when the body
//     starts with "{": handlers that decode JSON without looking at the
//     type read it, so a client cannot hide behind text/plain.
//
// It returns "" when neither has the field. A field given twice with
// different values (in one reading, between a form and JSON, or between
// the body and the query), a JSON member that is not a string, and a
// malformed multipart or JSON body of its declared type are errors
// wrapping [ErrInvalidKey]: handlers read one or the other, so the limiter
// keys only what they all read alike. A body that only looks like JSON is
// read by its declared type alone.
func Field(contentType string, body []byte, rawQuery, name string) (string, error) {
	var v string
	if len(body) > 0 {
		var err error
		if v, err = fromBody(contentType, body, name); err != nil {
			return "", err
		}
	}
	if rawQuery == "" {
		return v, nil
	}
	vs, _ := url.ParseQuery(rawQuery) // the well-formed pairs, as URL.Query keeps them
	q, err := singleValue(vs[name], name)
	switch {
	case err != nil:
		return "", err
	case v != "" && q != "" && q != v:
		return "", fmt.Errorf("%w: field %q given with different values in the body and in the query", ErrInvalidKey, name)
	case v == "":
		return q, nil
	}
	return v, nil
}

// singleValue returns the one value of a field given zero or more times, and
// an error if it was given with different values.
func singleValue(vs []string, name string) (string, error) {
	v := ""
	for i, s := range vs {
		if i == 0 {
			v = s
		} else if s != v {
			return "", fmt.Errorf("%w: field %q given more than once with different values", ErrInvalidKey, name)
		}
	}
	return v, nil
}

func multipartField(body []byte, boundary, name string) (string, error) {
	if boundary == "" {
		return "", fmt.Errorf("%w: multipart body without boundary", ErrInvalidKey)
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var vs []string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%w: multipart body: %w", ErrInvalidKey, err)
		}
		if p.FormName() != name || p.FileName() != "" {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p, maxFieldBytes+1))
		if err != nil {
			return "", fmt.Errorf("%w: multipart body: %w", ErrInvalidKey, err)
		}
		if len(b) > maxFieldBytes {
			return "", fmt.Errorf("%w: field %q is longer than %d bytes", ErrInvalidKey, name, maxFieldBytes)
		}
		vs = append(vs, string(b))
	}
	return singleValue(vs, name)
}

// jsonSyntaxError is jsonField's error for a body that is not JSON.
type jsonSyntaxError struct{ err error }

func (e *jsonSyntaxError) Error() string {
	return ErrInvalidKey.Error() + ": JSON body: " + e.err.Error()
}
func (e *jsonSyntaxError) Unwrap() []error { return []error{ErrInvalidKey, e.err} }

func jsonField(body []byte, name string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return "", &jsonSyntaxError{err}
	}
	if tok != json.Delim('{') {
		return "", nil // an array or a scalar: no top-level fields
	}
	var vs []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", &jsonSyntaxError{err}
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", &jsonSyntaxError{err}
		}
		// encoding/json fills a struct field from any member whose name
		// matches case-insensitively, the last one winning; a strict decoder
		// takes the exact match. Both must see what the limiter sees.
		if !strings.EqualFold(key, name) {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%w: JSON member %q is not a string", ErrInvalidKey, key)
		}
		vs = append(vs, s)
	}
	if _, err := dec.Token(); err != nil {
		return "", &jsonSyntaxError{err}
	}
	return singleValue(vs, name)
}
