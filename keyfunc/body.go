package keyfunc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"strings"
)

// maxFieldBytes bounds one multipart field value read by [BodyField].
const maxFieldBytes = 64 << 10

// BodyField returns the named field of a request body that has already been
// read, for adapters whose framework keeps the body in memory (fasthttp) and
// for [FromHTTP]. contentType is the request's Content-Type header:
//
//   - application/x-www-form-urlencoded: the field's value, matched exactly;
//   - multipart/form-data: the value of the non-file part with that form name;
//   - application/json or any "+json" type: a top-level string member of the
//     object, its name matched case-insensitively as encoding/json matches
//     struct fields;
//   - anything else: no fields.
//
// It returns "" when the body has no such field. A field given more than once
// with different values, or a JSON member that is not a string, is an error
// wrapping [ErrInvalidKey]: the handler and the limiter could otherwise read
// different values, and a client could pick the one the limiter sees. A
// malformed body is an error too.
func BodyField(contentType string, body []byte, name string) (string, error) {
	if len(body) == 0 {
		return "", nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", nil // not a form or JSON body: no fields
	}
	switch {
	case mt == "application/x-www-form-urlencoded":
		// Like net/http's ParseForm: keep the well-formed pairs of a body
		// with a bad escape somewhere else.
		vs, _ := url.ParseQuery(string(body))
		return singleValue(vs[name], name)
	case mt == "multipart/form-data":
		return multipartField(body, params["boundary"], name)
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return jsonField(body, name)
	}
	return "", nil
}

// singleValue returns the one value of a field given zero or more times, and
// an error if it was given with different values.
// RequestField returns a request's field name as every [Request] view
// reads it: from the body when it has the field (see [BodyField]), else
// from the URL query string rawQuery (its value, given once or always the
// same). An empty body has no fields, whatever its content type. Adapters
// for frameworks other than net/http implement [Request.Field] with it, so
// that a field reads the same in every framework.
func RequestField(contentType string, body []byte, rawQuery, name string) (string, error) {
	if len(body) > 0 {
		v, err := BodyField(contentType, body, name)
		if v != "" || err != nil {
			return v, err
		}
	}
	if rawQuery == "" {
		return "", nil
	}
	vs, _ := url.ParseQuery(rawQuery) // the well-formed pairs, as URL.Query keeps them
	return singleValue(vs[name], name)
}

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
		return "", errors.New("keyfunc: multipart body without boundary")
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var vs []string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("keyfunc: multipart body: %w", err)
		}
		if p.FormName() != name || p.FileName() != "" {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p, maxFieldBytes+1))
		if err != nil {
			return "", fmt.Errorf("keyfunc: multipart body: %w", err)
		}
		if len(b) > maxFieldBytes {
			return "", fmt.Errorf("%w: field %q is longer than %d bytes", ErrInvalidKey, name, maxFieldBytes)
		}
		vs = append(vs, string(b))
	}
	return singleValue(vs, name)
}

func jsonField(body []byte, name string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return "", fmt.Errorf("keyfunc: JSON body: %w", err)
	}
	if tok != json.Delim('{') {
		return "", nil // an array or a scalar: no top-level fields
	}
	var vs []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("keyfunc: JSON body: %w", err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", fmt.Errorf("keyfunc: JSON body: %w", err)
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
		return "", fmt.Errorf("keyfunc: JSON body: %w", err)
	}
	return singleValue(vs, name)
}
