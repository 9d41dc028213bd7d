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
// becoming a store key: what it keys on is hashed.
//
// It keys on the header's first value ([Request.Header]'s first element,
// one header line), without its leading and trailing spaces and tabs,
// byte for byte: case, inner white space, commas, quoting and encodings
// are part of the key, and later lines are ignored. That suits a value the
// server compares exactly, such as an API key: two spellings it accepts
// alike would be two keys.
//
// Authorization and Proxy-Authorization (the name in any case) are read
// as credentials instead, so that one credential is one key however it is
// spelled (RFC 9110 section 11.4): the scheme in any case, followed by any
// spaces or tabs;
//
//   - Basic: the user-id and password it decodes to, decoded from base64
//     as [net/http.Request.BasicAuth] decodes it, whatever unused
//     bits the encoding carries. The key is per credential, password
//     included: per user-id alone, one wrong password would count against
//     every client of a service whose user-id is fixed ("api",
//     "x-access-token"). To limit password guessing per account, key by
//     the user-id with a key function of your own, or use the guard
//     package.
//   - Bearer: the token exactly.
//   - any other scheme: its token68 exactly, or its auth-params with names
//     in any case, in any order, a value as a token or a quoted-string
//     alike, and white space and empty list elements ignored.
//
// A credential that does not parse (Basic that is not base64 or holds no
// colon, a param given twice, more than 32 params) is an error wrapping
// [ErrInvalidKey], which never quotes it. A user-id is keyed as sent: an
// application that matches user names without regard to case should key
// by its own account, with [ContextValue] after authentication.
//
// With a secret, the key is "hmac:" followed by the unpadded base64url
// HMAC-SHA256 of what it keys on under that secret (48 bytes in all);
// without one (nil or empty), it is "sha256:" followed by the unpadded
// base64url SHA-256 of it. Prefer a secret: a plain hash of a short or
// guessable token, read from a store dump, can be checked against guesses
// offline. Changing the secret changes every key. secret is copied.
//
// A missing or empty header is an error wrapping [ErrNoKey].
//
// Header returns nil when name is not a header field name (empty, or
// holding a space, a colon or another character no field name holds, RFC
// 9110 section 5.1): no request could carry it, and every adapter refuses
// a nil key function when it is built.
func Header(name string, secret []byte) Func {
	if !isFieldName(name) {
		return nil
	}
	secret = append([]byte(nil), secret...)
	prefix := "sha256:"
	newHash := sha256.New
	if len(secret) > 0 {
		prefix = "hmac:"
		newHash = func() hash.Hash { return hmac.New(sha256.New, secret) }
	}
	credential := isCredentialHeader(name)
	return func(r Request) (string, error) {
		var v string
		if vs := r.Header(name); len(vs) > 0 {
			v = trimOWS(vs[0])
		}
		if v == "" {
			return "", fmt.Errorf("%w: header %s missing", ErrNoKey, name)
		}
		if credential {
			var err error
			if v, err = canonicalCredential(v); err != nil {
				return "", fmt.Errorf("%w (header %s)", err, name)
			}
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

// isFieldName reports whether name is a header field name: a token (RFC
// 9110 section 5.1).
func isFieldName(name string) bool { return name != "" && tokenLen(name) == len(name) }
