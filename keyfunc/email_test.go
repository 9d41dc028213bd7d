package keyfunc

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
)

func TestNormalizeEmail(t *testing.T) {
	tests := []struct {
		in   string
		opts []EmailOption
		want string // "" means rejected with ErrInvalidKey
	}{
		// One account, many spellings.
		{"ana@example.com", nil, "ana@example.com"},
		{" Ana@Example.COM ", nil, "ana@example.com"},
		{"\tANA@EXAMPLE.COM\r\n", nil, "ana@example.com"},
		{"ＡＮＡ@example.com", nil, "ana@example.com"},
		{"ａｎａ＠ｅｘａｍｐｌｅ．ｃｏｍ", nil, "ana@example.com"},
		{"\u00a0ana@example.com\u3000", nil, "ana@example.com"},
		{"ana@example.com.", nil, "ana@example.com"},
		{"Straße@example.com", nil, "strasse@example.com"},
		{"ΣΊΣΥΦΟΣ@example.com", nil, "σίσυφοσ@example.com"},
		{"e\u0301@example.com", nil, "é@example.com"},
		{"ﬁ@example.com", nil, "fi@example.com"},
		{"\u13ec@example.com", nil, "\u13ec@example.com"}, // Cherokee folds to upper case
		{"\uabbc@example.com", nil, "\u13ec@example.com"},
		// IDNA domains.
		{"ana@bücher.de", nil, "ana@xn--bcher-kva.de"},
		{"ana@BÜCHER.DE", nil, "ana@xn--bcher-kva.de"},
		{"ana@xn--bcher-kva.de", nil, "ana@xn--bcher-kva.de"},
		{"ana@XN--BCHER-KVA.DE", nil, "ana@xn--bcher-kva.de"},
		{"ana@例え.jp", nil, "ana@xn--r8jz45g.jp"},
		{"ana@localhost", nil, "ana@localhost"},
		// Split at the last @.
		{`"a@b"@example.com`, nil, `"a@b"@example.com`},
		// Gmail folding, off by default.
		{"a.na+promo@gmail.com", nil, "a.na+promo@gmail.com"},
		{"a.na+promo@gmail.com", []EmailOption{FoldGmail()}, "ana@gmail.com"},
		{"A.na+promo@GoogleMail.com", []EmailOption{FoldGmail()}, "ana@gmail.com"},
		{"a.na@gmail.com", []EmailOption{FoldGmail()}, "ana@gmail.com"},
		{"a.na+x+y@gmail.com", []EmailOption{FoldGmail()}, "ana@gmail.com"},
		{"a.na+promo@example.com", []EmailOption{FoldGmail()}, "a.na+promo@example.com"},
		{"a.na@gmail.com.evil.com", []EmailOption{FoldGmail()}, "a.na@gmail.com.evil.com"},
		{"+promo@gmail.com", []EmailOption{FoldGmail()}, ""},
		{"...@gmail.com", []EmailOption{FoldGmail()}, ""},
		// Rejected, not silently keyed.
		{"", nil, ""},
		{"   ", nil, ""},
		{"ana", nil, ""},
		{"ana@", nil, ""},
		{"@example.com", nil, ""},
		{"ana@.", nil, ""},
		{"ana\u200b@example.com", nil, ""},
		{"ana@exa\u200bmple.com", nil, ""},
		{"\u200bana@example.com", nil, ""},
		{"\u00adana@example.com", nil, ""},
		{"ana\u2060@example.com", nil, ""},
		{"\ufeffana@example.com", nil, ""},
		{"ana\u202e@example.com", nil, ""},
		{"ana\x00@example.com", nil, ""},
		{"ana\x7f@example.com", nil, ""},
		{"an a@example.com", nil, ""},
		{"an\u00a0a@example.com", nil, ""},
		{"ana\u00a8@example.com", nil, ""},
		{"ana\xff@example.com", nil, ""},
		{"ana@exa_mple.com", nil, ""},
		{"ana@a..b", nil, ""},
		{"ana@-example.com", nil, ""},
		{"ana@" + strings.Repeat("a", 300) + ".com", nil, ""},
		{strings.Repeat("a", maxEmailBytes) + "@example.com", nil, ""},
	}
	for _, tt := range tests {
		got, err := NormalizeEmail(tt.in, tt.opts...)
		if tt.want == "" {
			if !errors.Is(err, ErrInvalidKey) || got != "" {
				t.Errorf("NormalizeEmail(%+q) = %+q, %v; want ErrInvalidKey", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("NormalizeEmail(%+q) = %+q, %v; want %+q", tt.in, got, err, tt.want)
		}
	}
}

// TestNormalizeEmailUnicodeReplacement checks that U+FFFD spelled out is
// accepted as a character, while the same bytes' absence (invalid UTF-8)
// is rejected.
func TestNormalizeEmailUnicodeReplacement(t *testing.T) {
	if got, err := NormalizeEmail("\uFFFD@example.com"); err != nil || got != "\uFFFD@example.com" {
		t.Errorf("NormalizeEmail(U+FFFD) = %+q, %v", got, err)
	}
}

func TestEmail(t *testing.T) {
	errField := errors.New("body too large")
	tests := []struct {
		name     string
		fields   map[string]string
		fieldErr error
		opts     []EmailOption
		want     string
		wantErr  error
	}{
		{"normalized", map[string]string{"email": " Ana@Example.COM "}, nil, nil, "ana@example.com", nil},
		{"gmail", map[string]string{"email": "a.na+x@gmail.com"}, nil, []EmailOption{FoldGmail()}, "ana@gmail.com", nil},
		{"missing", map[string]string{"login": "ana@example.com"}, nil, nil, "", ErrNoKey},
		{"blank", map[string]string{"email": "  "}, nil, nil, "", ErrNoKey},
		{"invalid", map[string]string{"email": "ana\u200b@example.com"}, nil, nil, "", ErrInvalidKey},
		{"field error", nil, errField, nil, "", errField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakeRequest{fields: tt.fields, fieldErr: tt.fieldErr}
			checkKey(t, Email("email", tt.opts...), r, tt.want, tt.wantErr)
		})
	}
}

// TestNormalizeEmailEveryRune checks, for every printable rune r, that
// "r@example.com" is rejected or normalizes to a fixed point: x/text's case
// folding once sent Cherokee letters back and forth between cases.
func TestNormalizeEmailEveryRune(t *testing.T) {
	if testing.Short() {
		t.Skip("checks all of Unicode")
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !unicode.IsPrint(r) {
			continue
		}
		in := string(r) + "@example.com"
		got, err := NormalizeEmail(in)
		if err != nil {
			continue
		}
		if again, err := NormalizeEmail(got); again != got || err != nil {
			t.Errorf("NormalizeEmail(%+q) = %+q, but NormalizeEmail(%+q) = %+q, %v", in, got, got, again, err)
		}
	}
}

// The JSON body of a login keys the same account whatever the request says
// its Content-Type is, as handlers that decode JSON without looking at the
// type (json.NewDecoder, gin's ShouldBindJSON) read it; none of them
// yields no key.
func TestEmailWhateverContentType(t *testing.T) {
	const body = `{"email":"Ana@Example.com","password":"guess"}`
	for _, ct := range []string{
		"application/json", "text/plain", "", "application/json;", "application/json;;",
		"text/plain;charset=UTF-8", "application/octet-stream", "application/x-www-form-urlencoded",
		`application/json; charset="x`, "json", "application/json x", "multipart/form-data; boundary=b",
	} {
		hr := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		if ct != "" {
			hr.Header.Set("Content-Type", ct)
		}
		key, err := Email("email")(FromHTTP(hr))
		if err == nil && key != "ana@example.com" || err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Content-Type %q: key %q, %v; want ana@example.com or a refusal (ErrInvalidKey)", ct, key, err)
		}
		checkBody(t, hr, body)
	}
}
