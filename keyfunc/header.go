package keyfunc

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
)

// Header returns a [Func] keying a request by a header that identifies the
// caller, such as an API key or a bearer token, without the secret ever
// becoming a store key: the header's first value, trimmed of spaces and
// tabs, is hashed.
//
// With a secret, the key is "hmac:" followed by the unpadded base64url
// HMAC-SHA256 of the value under that secret (48 bytes in all); without one
// (nil or empty), it is "sha256:" followed by the unpadded base64url SHA-256
// of the value. Prefer a secret: a plain hash of a short or guessable token,
// read from a store dump, can be checked against guesses offline. Changing
// the secret changes every key. secret is copied.
//
// A missing or empty header is an error wrapping [ErrNoKey].
func Header(name string, secret []byte) Func {
	secret = append([]byte(nil), secret...)
	prefix := "sha256:"
	newHash := sha256.New
	if len(secret) > 0 {
		prefix = "hmac:"
		newHash = func() hash.Hash { return hmac.New(sha256.New, secret) }
	}
	return func(r Request) (string, error) {
		var v string
		if vs := r.Header(name); len(vs) > 0 {
			v = trimOWS(vs[0])
		}
		if v == "" {
			return "", fmt.Errorf("%w: header %s missing", ErrNoKey, name)
		}
		h := newHash()
		h.Write([]byte(v))
		var sum [sha256.Size]byte
		buf := make([]byte, 0, len(prefix)+base64.RawURLEncoding.EncodedLen(sha256.Size))
		buf = append(buf, prefix...)
		buf = base64.RawURLEncoding.AppendEncode(buf, h.Sum(sum[:0]))
		return string(buf), nil
	}
}
