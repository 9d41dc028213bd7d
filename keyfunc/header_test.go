package keyfunc

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHeader(t *testing.T) {
	secret := []byte("server-side secret")
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("sk_live_123"))
	wantHMAC := "hmac:" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	// SHA-256("abc") from FIPS 180-2, base64url.
	const wantSHA = "sha256:ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"

	tests := []struct {
		name    string
		secret  []byte
		header  http.Header
		want    string
		wantErr error
	}{
		{"hmac", secret, http.Header{"X-Api-Key": {"sk_live_123"}}, wantHMAC, nil},
		{"hmac trimmed", secret, http.Header{"X-Api-Key": {" sk_live_123\t"}}, wantHMAC, nil},
		{"hmac first value", secret, http.Header{"X-Api-Key": {"sk_live_123", "other"}}, wantHMAC, nil},
		{"sha256", nil, http.Header{"X-Api-Key": {"abc"}}, wantSHA, nil},
		{"sha256 empty secret", []byte{}, http.Header{"X-Api-Key": {"abc"}}, wantSHA, nil},
		{"missing", secret, http.Header{"Authorization": {"abc"}}, "", ErrNoKey},
		{"empty", secret, http.Header{"X-Api-Key": {"  "}}, "", ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, Header("X-API-Key", tt.secret), &fakeRequest{header: tt.header}, tt.want, tt.wantErr)
		})
	}
}

func TestHeaderSecretCopied(t *testing.T) {
	secret := []byte("k1")
	fn := Header("X-API-Key", secret)
	r := &fakeRequest{header: http.Header{"X-Api-Key": {"abc"}}}
	before, _ := fn(r)
	copy(secret, "k2")
	after, _ := fn(r)
	if before != after {
		t.Errorf("key changed after the caller's secret changed: %q, %q", before, after)
	}
	other, _ := Header("X-API-Key", secret)(r)
	if other == before {
		t.Errorf("two secrets give one key %q", other)
	}
	if strings.Contains(before, "abc") || strings.Contains(before, "k1") {
		t.Errorf("key %q holds the value or the secret", before)
	}
}

// One Basic credential has 512 spellings that net/http's Request.BasicAuth
// reads alike (the scheme's case, the unused bits of the base64 padding):
// Header("Authorization") gives all of them one key.
func TestAuthorizationBasicSpellings(t *testing.T) {
	spellings := basicSpellings("Aladdin", "open sesame")
	if len(spellings) != 512 {
		t.Fatalf("%d spellings, want 512", len(spellings))
	}
	keys := map[string]int{}
	for _, v := range spellings {
		hr := httptest.NewRequest("GET", "/", nil)
		hr.Header.Set("Authorization", v)
		if u, p, ok := hr.BasicAuth(); !ok || u != "Aladdin" || p != "open sesame" {
			t.Fatalf("net/http reads %q as %q, %q, %v", v, u, p, ok)
		}
		key, err := Header("Authorization", []byte("k"))(FromHTTP(hr))
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		keys[key]++
	}
	if len(keys) != 1 {
		t.Errorf("512 spellings of one Basic credential give %d keys, want 1", len(keys))
	}
	other := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("Aladdin:open sesamE"))}}
	if k, _ := Header("Authorization", []byte("k"))(&fakeRequest{header: other}); keys[k] != 0 {
		t.Errorf("another password gives the same key %q", k)
	}
}

// A Bearer token's scheme is case-insensitive: 64 spellings, one key.
func TestAuthorizationBearerSpellings(t *testing.T) {
	keys := map[string]bool{}
	for _, scheme := range caseSpellings("Bearer") {
		r := &fakeRequest{header: http.Header{"Authorization": {scheme + " mF_9.B5f-4.1JqM"}}}
		key, err := Header("authorization", nil)(r)
		if err != nil {
			t.Fatal(err)
		}
		keys[key] = true
	}
	if len(keys) != 1 {
		t.Errorf("64 spellings of one Bearer token give %d keys, want 1", len(keys))
	}
	r := &fakeRequest{header: http.Header{"Authorization": {"Bearer mF_9.B5f-4.1Jqm"}}}
	if k, _ := Header("Authorization", nil)(r); keys[k] {
		t.Errorf("another token (case differs) gives the same key %q", k)
	}
}

// caseSpellings returns every upper and lower case spelling of the ASCII
// letters of s.
func caseSpellings(s string) []string {
	out := []string{""}
	for i := range len(s) {
		var next []string
		for _, p := range out {
			lo, up := strings.ToLower(s[i:i+1]), strings.ToUpper(s[i:i+1])
			next = append(next, p+lo)
			if up != lo {
				next = append(next, p+up)
			}
		}
		out = next
	}
	return out
}

// basicSpellings returns the spellings of the Basic credential user:pass
// that net/http reads alike: every case of the scheme, and every value of
// the unused low bits of the last base64 character before the padding.
func basicSpellings(user, pass string) []string {
	enc := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	pad := len(enc) - len(strings.TrimRight(enc, "="))
	unused := map[int]int{0: 0, 1: 2, 2: 4}[pad]
	last := len(enc) - pad - 1
	v := strings.IndexByte(alphabet, enc[last])
	var out []string
	for _, scheme := range caseSpellings("Basic") {
		for low := range 1 << unused {
			b := []byte(enc)
			b[last] = alphabet[v&^(1<<unused-1)|low]
			out = append(out, scheme+" "+string(b))
		}
	}
	return out
}
