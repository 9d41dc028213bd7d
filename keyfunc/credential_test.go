package keyfunc

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestCanonicalCredential(t *testing.T) {
	aladdin := base64.StdEncoding.EncodeToString([]byte("Aladdin:open sesame")) // QWxhZGRpbjpvcGVuIHNlc2FtZQ==
	for _, tt := range []struct {
		in, want string // want "" means rejected with ErrInvalidKey
	}{
		// Basic: decoded as net/http decodes it, encoded canonically.
		{"Basic " + aladdin, "basic " + aladdin},
		{"bAsIc " + aladdin, "basic " + aladdin},
		{"Basic QWxhZGRpbjpvcGVuIHNlc2FtZR==", "basic " + aladdin}, // unused bits set
		{"Basic QWxhZGRpbjpvcGVuIHNlc2FtZf==", "basic " + aladdin},
		{"Basic \t  " + aladdin, "basic " + aladdin},
		{"Basic\t" + aladdin, "basic " + aladdin},
		{"Basic QWxh\r\nZGRpbjpvcGVuIHNlc2FtZQ==", "basic " + aladdin}, // as encoding/base64 skips newlines
		{"Basic Og==", "basic Og=="},                                   // ":": empty user-id and password
		{"Basic " + strings.TrimRight(aladdin, "="), ""},               // padding required, as net/http
		{"Basic QWxhZGRpbg==", ""},                                     // no colon
		{"Basic QWxh ZGRpbjpvcGVuIHNlc2FtZQ==", ""},
		{"Basic", ""},
		{"Basic:" + aladdin, ""},
		{"Basic !!!!", ""},
		// Bearer: the scheme in any case, the token exactly.
		{"Bearer mF_9.B5f-4.1JqM", "bearer mF_9.B5f-4.1JqM"},
		{"BEARER   mF_9.B5f-4.1JqM", "bearer mF_9.B5f-4.1JqM"},
		{"bearer mF_9.B5f-4.1Jqm", "bearer mF_9.B5f-4.1Jqm"},
		{"Bearer a:b", "bearer a:b"},
		{"Bearer", ""},
		// Other schemes: token68 exactly, auth-params canonically.
		{"Negotiate YIIFyQYGKwYBBQUCoIIFvTCCBbmgMDAu==", "negotiate YIIFyQYGKwYBBQUCoIIFvTCCBbmgMDAu=="},
		{"NEGOTIATE", "negotiate"},
		{`Digest username="Mufasa", realm="http-auth@example.org", nc=00000001`, `digest nc=00000001, realm="http-auth@example.org", username=Mufasa`},
		{`digest NC = 00000001 ,, Realm="http-auth@example.org",username = "Mufasa",`, `digest nc=00000001, realm="http-auth@example.org", username=Mufasa`},
		{`X a="q\"uo\\te", b=""`, `x a="q\"uo\\te", b=""`},
		{`X a="\q"`, `x a=q`},
		{`X a=1, A=2`, ""},
		{`X a="unterminated`, ""},
		{`X a="\`, ""},
		{"X a=\"\x01\"", ""},
		{`X a=`, "x a="}, // a token68
		{`X a`, "x a"},
		{`X a=,b`, ""},
		{`X a b`, ""},
		{`X a=1 b=2`, ""},
		{`X , ,`, ""},
		{"X p=1", "x p=1"},
		{"", ""},
		{"(bad) x", ""},
	} {
		got, err := canonicalCredential(tt.in)
		if tt.want == "" {
			if !errors.Is(err, ErrInvalidKey) || got != "" {
				t.Errorf("canonicalCredential(%q) = %q, %v; want ErrInvalidKey", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("canonicalCredential(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// More auth-params than maxCredentialParams are refused, before they are
// sorted.
func TestCanonicalCredentialBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("X ")
	for i := range maxCredentialParams + 1 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("p")
		b.WriteString(strings.Repeat("x", i))
		b.WriteString("=1")
	}
	if got, err := canonicalCredential(b.String()); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("%d params: %q, %v; want ErrInvalidKey", maxCredentialParams+1, got, err)
	}
}

// A credential that does not parse is refused, and the error never holds
// the secret.
func TestHeaderCredentialInvalid(t *testing.T) {
	r := &fakeRequest{header: http.Header{"Proxy-Authorization": {"Basic c2VjcmV0LXBhc3N3b3Jk"}}} // "secret-password", no colon
	key, err := Header("proxy-authorization", nil)(r)
	if !errors.Is(err, ErrInvalidKey) || key != "" {
		t.Fatalf("key %q, %v; want ErrInvalidKey", key, err)
	}
	if msg := err.Error(); strings.Contains(msg, "c2VjcmV0") || strings.Contains(msg, "secret-password") {
		t.Errorf("error %q holds the credential", msg)
	}
	// Another header is keyed byte for byte, whatever it holds.
	r = &fakeRequest{header: http.Header{"X-Api-Key": {"Basic c2VjcmV0LXBhc3N3b3Jk"}}}
	if _, err := Header("X-API-Key", nil)(r); err != nil {
		t.Errorf("X-API-Key: %v", err)
	}
}

// FuzzCredential feeds arbitrary Authorization values to the credential
// parser. It never panics; a rejection wraps ErrInvalidKey; an accepted
// value's canonical form is accepted and canonical itself; and every value
// net/http's Request.BasicAuth accepts is accepted, as the canonical
// encoding of the user-id and password it reads.
func FuzzCredential(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string) {
		v = trimOWS(v)
		got, err := canonicalCredential(v)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) || got != "" {
				t.Fatalf("canonicalCredential(%q) = %q, %v; want ErrInvalidKey", v, got, err)
			}
		} else if again, err := canonicalCredential(got); err != nil || again != got {
			t.Fatalf("canonicalCredential(%q) = %q, but canonicalCredential(%q) = %q, %v", v, got, got, again, err)
		}
		hr := &http.Request{Header: http.Header{"Authorization": {v}}}
		if user, pass, ok := hr.BasicAuth(); ok {
			want := "basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
			if got != want {
				t.Fatalf("net/http reads %q as %q:%q; canonicalCredential = %q, %v; want %q", v, user, pass, got, err, want)
			}
		}
	})
}
