package keyfunc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/bodytest"
)

func TestFromHTTP(t *testing.T) {
	type ctxKey struct{}
	hr := httptest.NewRequest("POST", "/items/42", nil)
	hr.RemoteAddr = "203.0.113.7:5555"
	hr.Header.Add("X-Forwarded-For", "6.6.6.6")
	hr.Header.Add("X-Forwarded-For", "203.0.113.7")
	hr = hr.WithContext(context.WithValue(hr.Context(), ctxKey{}, "u1"))
	r := FromHTTP(hr)

	if got := r.RemoteAddr(); got != "203.0.113.7:5555" {
		t.Errorf("RemoteAddr() = %q; want %q", got, "203.0.113.7:5555")
	}
	if got := r.Method(); got != "POST" {
		t.Errorf("Method() = %q; want POST", got)
	}
	if got := r.Header("x-forwarded-for"); len(got) != 2 || got[0] != "6.6.6.6" || got[1] != "203.0.113.7" {
		t.Errorf("Header(x-forwarded-for) = %q; want both lines", got)
	}
	if got := r.Header("X-Missing"); got != nil {
		t.Errorf("Header(X-Missing) = %q; want nil", got)
	}
	if got := r.Context().Value(ctxKey{}); got != "u1" {
		t.Errorf("Context().Value = %v; want u1", got)
	}
	if got := r.Route(); got != "" {
		t.Errorf("Route() without a mux = %q; want \"\"", got)
	}
}

func TestFromHTTPRoute(t *testing.T) {
	tests := []struct {
		pattern, target, want string
	}{
		{"GET /items/{id}", "/items/42", "/items/{id}"},
		{"/static/", "/static/app.js", "/static/"},
		{"POST example.com/login", "http://example.com/login", "example.com/login"},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			var got string
			mux := http.NewServeMux()
			mux.HandleFunc(tt.pattern, func(w http.ResponseWriter, r *http.Request) {
				got = FromHTTP(r).Route()
			})
			method := "GET"
			if strings.HasPrefix(tt.pattern, "POST") {
				method = "POST"
			}
			mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, tt.target, nil))
			if got != tt.want {
				t.Errorf("Route() = %q; want %q", got, tt.want)
			}
		})
	}

	hr := httptest.NewRequest("GET", "/items/42", nil)
	hr.Pattern = "GET /ignored"
	r := FromHTTP(hr, RouteFunc(func(*http.Request) string { return "/items/:id" }))
	if got := r.Route(); got != "/items/:id" {
		t.Errorf("Route() with RouteFunc = %q; want %q", got, "/items/:id")
	}
}

func multipartBody(t *testing.T, fields [][2]string, file bool) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, f := range fields {
		if err := w.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if file {
		fw, err := w.CreateFormFile("email", "email.txt")
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(fw, "file@example.com")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), buf.String()
}

func TestFromHTTPField(t *testing.T) {
	mpType, mpBody := multipartBody(t, [][2]string{{"password", "x"}, {"email", "mp@example.com"}}, true)
	mpTwiceType, mpTwiceBody := multipartBody(t, [][2]string{{"email", "a@example.com"}, {"email", "b@example.com"}}, false)
	const form = "application/x-www-form-urlencoded"
	const json = "application/json"
	tests := []struct {
		name        string
		target      string
		contentType string
		body        string
		want        string
		wantErr     error // errors.Is; errAny for any error
	}{
		{"form", "/login", form, "email=ana%40example.com&password=x", "ana@example.com", nil},
		{"form missing", "/login", form, "password=x", "", nil},
		{"form repeated same", "/login", form, "email=a&email=a", "a", nil},
		{"form repeated different", "/login", form, "email=a&email=b", "", ErrInvalidKey},
		{"form name is case-sensitive", "/login", form, "EMAIL=a", "", nil},
		{"form bad escape elsewhere", "/login", form, "x=%zz&email=a", "a", nil},
		{"form with charset", "/login", form + "; charset=utf-8", "email=a", "a", nil},
		{"json", "/login", json, `{"password":"x","email":"ana@example.com"}`, "ana@example.com", nil},
		{"json +json type", "/login", "application/vnd.api+json", `{"email":"a"}`, "a", nil},
		{"json case-insensitive", "/login", json, `{"EMAIL":"a"}`, "a", nil},
		{"json two spellings different", "/login", json, `{"email":"a","Email":"b"}`, "", ErrInvalidKey},
		{"json two spellings same", "/login", json, `{"email":"a","Email":"a"}`, "a", nil},
		{"json not a string", "/login", json, `{"email":["a","b"]}`, "", ErrInvalidKey},
		{"json nested not read", "/login", json, `{"user":{"email":"a"}}`, "", nil},
		{"json array", "/login", json, `[{"email":"a"}]`, "", nil},
		{"json malformed", "/login", json, `{"email":"a"`, "", errAny},
		{"json trailing data ignored", "/login", json, `{"email":"a"}}`, "a", nil},
		{"json escapes", "/login", json, `{"email":"\u0061na@example.com"}`, "ana@example.com", nil},
		{"multipart", "/login", mpType, mpBody, "mp@example.com", nil},
		{"multipart repeated different", "/login", mpTwiceType, mpTwiceBody, "", ErrInvalidKey},
		{"multipart without boundary", "/login", "multipart/form-data", mpBody, "", errAny},
		{"text body is no form", "/login", "text/plain", "email=a", "", nil},
		{"JSON sent as text", "/login", "text/plain", `{"email":"a"}`, "a", nil},
		{"JSON without a type", "/login", "", `{"email":"a"}`, "a", nil},
		{"no content type", "/login", "", "email=a", "", nil},
		{"query fallback", "/login?email=q", form, "password=x", "q", nil},
		{"body and query differ", "/login?email=q", form, "email=b", "", ErrInvalidKey},
		{"body and query agree", "/login?email=b", form, "email=b", "b", nil},
		{"query only", "/login?email=q", "", "", "q", nil},
		{"query repeated different", "/login?email=a&email=b", "", "", "", ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hr := httptest.NewRequest("POST", tt.target, strings.NewReader(tt.body))
			if tt.contentType != "" {
				hr.Header.Set("Content-Type", tt.contentType)
			}
			got, err := FromHTTP(hr).Field("email")
			switch {
			case tt.wantErr == errAny && err == nil,
				tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("Field = %q, %v; want error %v", got, err, tt.wantErr)
			case got != tt.want:
				t.Errorf("Field = %q; want %q", got, tt.want)
			}
			checkBody(t, hr, tt.body)
		})
	}
}

// errAny matches any error in test tables.
var errAny = errors.New("any error")

// checkBody checks that the handler still reads the whole, unchanged body.
func checkBody(t *testing.T, hr *http.Request, want string) {
	t.Helper()
	got, err := io.ReadAll(hr.Body)
	if err != nil {
		t.Fatalf("reading body after Field: %v", err)
	}
	if string(got) != want {
		t.Errorf("body after Field = %q; want %q", got, want)
	}
}

func TestFromHTTPFieldBodyIntact(t *testing.T) {
	body := "email=ana%40example.com&password=secret"
	hr := httptest.NewRequest("POST", "/login", strings.NewReader(body))
	hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")

	// Two views of one request (two limiters) read the body once.
	for i := range 2 {
		if got, err := FromHTTP(hr).Field("email"); got != "ana@example.com" || err != nil {
			t.Fatalf("view %d: Field = %q, %v", i, got, err)
		}
	}
	// The handler parses the form as usual.
	if got := hr.FormValue("password"); got != "secret" {
		t.Errorf("handler FormValue(password) = %q; want secret", got)
	}
	if err := hr.Body.Close(); err != nil {
		t.Errorf("Body.Close: %v", err)
	}
}

func TestFromHTTPFieldLimits(t *testing.T) {
	body := `{"email":"` + strings.Repeat("a", 100) + `"}`

	t.Run("declared length over limit", func(t *testing.T) {
		hr := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		hr.Header.Set("Content-Type", "application/json")
		if got, err := FromHTTP(hr, MaxBodyBytes(50)).Field("email"); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("Field = %q, %v; want an error wrapping ErrInvalidKey", got, err)
		}
		checkBody(t, hr, body)
	})
	t.Run("unknown length over limit", func(t *testing.T) {
		hr := httptest.NewRequest("POST", "/login", io.MultiReader(strings.NewReader(body)))
		hr.ContentLength = -1
		hr.Header.Set("Content-Type", "application/json")
		if got, err := FromHTTP(hr, MaxBodyBytes(50)).Field("email"); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("Field = %q, %v; want an error wrapping ErrInvalidKey", got, err)
		}
		checkBody(t, hr, body)
	})
	t.Run("at limit", func(t *testing.T) {
		hr := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		hr.Header.Set("Content-Type", "application/json")
		if got, err := FromHTTP(hr, MaxBodyBytes(int64(len(body)))).Field("email"); err != nil || len(got) != 100 {
			t.Fatalf("Field = %q, %v; want 100 bytes", got, err)
		}
		checkBody(t, hr, body)
	})
	t.Run("read error", func(t *testing.T) {
		errRead := errors.New("connection reset")
		hr := httptest.NewRequest("POST", "/login", nil)
		hr.Body = io.NopCloser(io.MultiReader(strings.NewReader(`{"em`), &errReader{errRead}))
		hr.ContentLength = -1
		hr.Header.Set("Content-Type", "application/json")
		if _, err := FromHTTP(hr).Field("email"); !errors.Is(err, errRead) {
			t.Fatalf("Field error = %v; want %v", err, errRead)
		}
		got, err := io.ReadAll(hr.Body)
		if string(got) != `{"em` || !errors.Is(err, errRead) {
			t.Errorf("handler reads %q, %v; want the same bytes and error", got, err)
		}
	})
	t.Run("no body", func(t *testing.T) {
		hr := httptest.NewRequest("GET", "/login", nil)
		if got, err := FromHTTP(hr).Field("email"); got != "" || err != nil {
			t.Fatalf("Field = %q, %v; want \"\", nil", got, err)
		}
	})
	// Any body may be JSON a handler decodes: one the limiter cannot read
	// within the bound, whatever its type, is refused.
	t.Run("other content types read too", func(t *testing.T) {
		hr := httptest.NewRequest("POST", "/login?email=q", strings.NewReader(body))
		hr.Header.Set("Content-Type", "application/octet-stream")
		hr.Header.Set("Content-Encoding", "br")
		if got, err := FromHTTP(hr, MaxBodyBytes(50)).Field("email"); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("Field = %q, %v; want an error wrapping ErrInvalidKey", got, err)
		}
		checkBody(t, hr, body)
	})
	t.Run("other content types without fields", func(t *testing.T) {
		const bin = "\x89PNG\r\n"
		hr := httptest.NewRequest("POST", "/login?email=q", strings.NewReader(bin))
		hr.Header.Set("Content-Type", "image/png")
		if got, err := FromHTTP(hr).Field("email"); got != "q" || err != nil {
			t.Fatalf("Field = %q, %v; want the query's \"q\"", got, err)
		}
		checkBody(t, hr, bin)
	})
}

func TestFromHTTPFieldEncoded(t *testing.T) {
	json := []byte(`{"email":"ana@example.com"}`)
	form := []byte("email=ana%40example.com")
	tests := []struct {
		name        string
		contentType string
		encoding    []string
		body        []byte
		max         int64
		wantErr     bool // an error wrapping ErrInvalidKey
	}{
		{"gzip json", "application/json", []string{"gzip"}, bodytest.Encode(t, json, "gzip"), 0, false},
		{"deflate form", "application/x-www-form-urlencoded", []string{"deflate"}, bodytest.Encode(t, form, "deflate"), 0, false},
		{"deflate then gzip", "application/json", []string{"deflate", "gzip"}, bodytest.Encode(t, json, "deflate", "gzip"), 0, false},
		// echo's Decompress leaves the header on the decoded body.
		{"decoded by earlier middleware", "application/json", []string{"gzip"}, json, 0, false},
		{"br", "application/json", []string{"br"}, json, 0, true},
		{"corrupt", "application/json", []string{"gzip"}, bodytest.Encode(t, json, "gzip")[:20], 0, true},
		{"decoded over the bound", "application/json", []string{"gzip"}, bodytest.Encode(t, json, "gzip"), int64(len(json)) - 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hr := httptest.NewRequest("POST", "/login", bytes.NewReader(tt.body))
			hr.Header.Set("Content-Type", tt.contentType)
			for _, e := range tt.encoding {
				hr.Header.Add("Content-Encoding", e)
			}
			got, err := FromHTTP(hr, MaxBodyBytes(tt.max)).Field("email")
			switch {
			case tt.wantErr && !errors.Is(err, ErrInvalidKey):
				t.Fatalf("Field = %q, %v; want an error wrapping ErrInvalidKey", got, err)
			case !tt.wantErr && (err != nil || got != "ana@example.com"):
				t.Fatalf("Field = %q, %v; want ana@example.com", got, err)
			}
			checkBody(t, hr, string(tt.body))
		})
	}
}

func TestFromHTTPFieldEncodedViews(t *testing.T) {
	json := []byte(`{"email":"ana@example.com","pad":"` + strings.Repeat("a", 100) + `"}`)
	gz := bodytest.Encode(t, json, "gzip")
	hr := httptest.NewRequest("POST", "/login", bytes.NewReader(gz))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Content-Encoding", "gzip")

	// Two limiters: the second view decodes nothing again, and one with a
	// smaller bound refuses what the first accepted.
	for i := range 2 {
		if got, err := FromHTTP(hr).Field("email"); got != "ana@example.com" || err != nil {
			t.Fatalf("view %d: Field = %q, %v", i, got, err)
		}
	}
	if got, err := FromHTTP(hr, MaxBodyBytes(int64(len(json))-1)).Field("email"); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("view with a smaller bound: Field = %q, %v; want an error wrapping ErrInvalidKey", got, err)
	}
	if got, err := FromHTTP(hr, MaxBodyBytes(int64(len(gz))-1)).Field("email"); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("view with a bound under the body as sent: Field = %q, %v; want an error wrapping ErrInvalidKey", got, err)
	}
	checkBody(t, hr, string(gz))
}

// TestFromHTTPFieldBomb sends a body gzipped twice that inflates to 256
// MiB: it is refused, having allocated a few MiB, and the handler still
// reads the 1.5 KB sent.
func TestFromHTTPFieldBomb(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		b := bodytest.GzipBomb(t, 2)
		hr := httptest.NewRequest("POST", "/login", bytes.NewReader(b))
		if chunked {
			hr.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b)))
			hr.ContentLength = -1
		}
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Content-Encoding", "gzip, gzip")
		alloc := allocated(func() {
			if got, err := FromHTTP(hr).Field("email"); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Field = %q, %v; want an error wrapping ErrInvalidKey", got, err)
			}
		})
		if alloc > maxBombAlloc {
			t.Errorf("chunked %v: Field allocated %d bytes; want at most %d", chunked, alloc, maxBombAlloc)
		}
		checkBody(t, hr, string(b))
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

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
