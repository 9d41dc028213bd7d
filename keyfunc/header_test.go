package keyfunc

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
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
