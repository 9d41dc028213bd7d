package keyfunc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A constructor without an error result that is given a configuration it
// cannot build returns nil, which every adapter refuses when it is built,
// rather than a Func that fails on every request.
func TestUnbuildableFuncIsNil(t *testing.T) {
	ok := constant("a")
	tests := []struct {
		name string
		f    Func
	}{
		{"Join of nothing", Join()},
		{"Join of nil", Join(nil)},
		{"Join with a nil part", Join(ok, nil)},
		{"Join with a nil first part", Join(nil, ok)},
		{"Prefix of nil", Prefix("ns", nil)},
		{"Header with an empty name", Header("", nil)},
		{"Header with a space in its name", Header("X-API-Key ", []byte("s"))},
		{"Header with a colon in its name", Header("X-API-Key:", nil)},
		{"Header with a space inside its name", Header("API Key", nil)},
		{"ContextValue of nil", ContextValue(nil)},
		{"ContextValue of an uncomparable key", ContextValue([]string{"user"})},
		{"Email of an empty field name", Email("")},
		{"Email with a nil option", Email("email", nil)},
		{"Email with a nil option after one", Email("email", FoldGmail(), nil)},
	}
	for _, tt := range tests {
		if tt.f != nil {
			t.Errorf("%s: got a Func; want nil", tt.name)
		}
	}
}

// The same constructors return a Func for every configuration they can
// build.
func TestBuildableFuncIsNotNil(t *testing.T) {
	type ctxKey struct{}
	tests := []struct {
		name string
		f    Func
	}{
		{"Join of one", Join(constant("a"))},
		{"Prefix with an empty namespace", Prefix("", constant("a"))},
		{"Header", Header("X-API-Key", nil)},
		{"Header in lower case", Header("authorization", []byte("s"))},
		{"ContextValue", ContextValue(ctxKey{})},
		{"ContextValue of a string", ContextValue("user")},
		{"Email", Email("email", FoldGmail())},
	}
	for _, tt := range tests {
		if tt.f == nil {
			t.Errorf("%s: got nil; want a Func", tt.name)
		}
	}
}

func TestNormalizeEmailNilOption(t *testing.T) {
	for _, tc := range []struct {
		opts []EmailOption
		want string
	}{
		{[]EmailOption{nil}, "keyfunc: NormalizeEmail: option 1 is nil"},
		{[]EmailOption{FoldGmail(), nil}, "keyfunc: NormalizeEmail: option 2 is nil"},
	} {
		got, err := NormalizeEmail("ana@example.com", tc.opts...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("NormalizeEmail with options %d = %q, %v; want the error %q", len(tc.opts), got, err, tc.want)
		}
	}
}

func TestTrustHeaderInvalidName(t *testing.T) {
	for _, name := range []string{"", "X-Real-IP ", "X Real IP", "X-Real-IP:", "X-Real-IP\n"} {
		_, err := ClientIP(TrustProxies(testProxies...), TrustHeader(name))
		if err == nil || !strings.HasPrefix(err.Error(), "keyfunc: TrustHeader: ") {
			t.Errorf("TrustHeader(%q): ClientIP error = %v; want one from keyfunc: TrustHeader", name, err)
		}
	}
}

func TestClientIPNilOptionNumbered(t *testing.T) {
	_, err := ClientIP(UseForwarded(), nil)
	if want := "keyfunc: ClientIP: option 2 is nil"; err == nil || err.Error() != want {
		t.Errorf("ClientIP(UseForwarded(), nil) error = %v; want %q", err, want)
	}
}

func TestRouteFuncNil(t *testing.T) {
	if RouteFunc(nil) != nil {
		t.Errorf("RouteFunc(nil) is an option; want nil")
	}
}

// FromHTTP has no error result: a nil option is reported by the view's
// Field, the one method that returns errors, and the other methods read
// the request as without it.
func TestFromHTTPNilOption(t *testing.T) {
	hr := httptest.NewRequest(http.MethodPost, "/login?email=ana@example.com", strings.NewReader(`{"email":"ana@example.com"}`))
	hr.Pattern = "POST /login"
	hr.RemoteAddr = "203.0.113.7:5555"
	ctx := context.WithValue(hr.Context(), userKey{}, "u1")
	hr = hr.WithContext(ctx)
	r := FromHTTP(hr, MaxBodyBytes(1<<10), nil)
	got, err := r.Field("email")
	if want := "keyfunc: FromHTTP: option 2 is nil"; err == nil || err.Error() != want {
		t.Errorf("Field = %q, %v; want the error %q", got, err, want)
	}
	if r.Route() != "/login" || r.Method() != http.MethodPost || r.RemoteAddr() != "203.0.113.7:5555" || r.Context().Value(userKey{}) != "u1" {
		t.Errorf("view with a nil option: Route %q, Method %q, RemoteAddr %q; want the request's", r.Route(), r.Method(), r.RemoteAddr())
	}
	checkBody(t, hr, `{"email":"ana@example.com"}`)
}
