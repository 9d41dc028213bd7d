package httpview_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
)

func TestRequest(t *testing.T) {
	req := httptest.NewRequest("POST", "/items/7?x=1", strings.NewReader("email=ana%40example.com"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Pattern = "POST /items/{id}"
	if got := httpview.New(req, "/items/:id").Route(); got != "/items/:id" {
		t.Errorf("Route %q", got)
	}
	if got := httpview.New(req, "").Route(); got != "/items/{id}" {
		t.Errorf("Route without a router pattern %q, want the ServeMux pattern", got)
	}
	calls := 0
	lazy := httpview.NewFunc(req, func(*http.Request) string { calls++; return "" })
	if calls != 0 {
		t.Error("route computed eagerly")
	}
	if got := lazy.Route(); got != "/items/{id}" || calls != 1 {
		t.Errorf("Route %q after %d calls", got, calls)
	}
	r := httpview.New(req, "")
	if v, err := r.Field("email"); v != "ana@example.com" || err != nil {
		t.Errorf("Field = %q, %v", v, err)
	}
	if v, _ := r.Field("x"); v != "1" {
		t.Errorf("query Field = %q", v)
	}
	if err := req.ParseForm(); err != nil || req.PostForm.Get("email") != "ana@example.com" {
		t.Errorf("the handler does not see the body: %v %v", req.PostForm, err)
	}
	if r.Method() != "POST" || r.RemoteAddr() != "192.0.2.1:1234" || r.Context() != req.Context() {
		t.Error("view does not reflect the request")
	}
}

// MaxBody bounds what Field reads, as keyfunc.MaxBodyBytes does.
func TestRequestMaxBody(t *testing.T) {
	body := "email=ana%40example.com"
	for _, tc := range []struct {
		max     int64
		wantErr error
	}{
		{0, nil}, // the default bound
		{int64(len(body)), nil},
		{int64(len(body)) - 1, keyfunc.ErrInvalidKey},
	} {
		req := httptest.NewRequest("POST", "/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r := httpview.New(req, "")
		r.MaxBody = tc.max
		v, err := r.Field("email")
		if !errors.Is(err, tc.wantErr) || (err == nil && v != "ana@example.com") {
			t.Errorf("MaxBody %d: Field = %q, %v, want error %v", tc.max, v, err, tc.wantErr)
		}
	}
}

func TestReset(t *testing.T) {
	a := httptest.NewRequest("GET", "/a?email=ana@example.com", nil)
	a.RemoteAddr = "192.0.2.1:1"
	b := httptest.NewRequest("GET", "/b", nil)
	b.RemoteAddr = "192.0.2.2:2"
	b.Pattern = "GET /b"
	v := httpview.New(a, "/a")
	v.MaxBody, v.Native = 10, "ctx"
	if f, err := v.Field("email"); err != nil || f != "ana@example.com" {
		t.Fatalf("Field = %q, %v", f, err)
	}
	v.Reset(b, "", nil)
	if v.RemoteAddr() != "192.0.2.2:2" || v.Route() != "/b" || v.MaxBody != 0 || v.Native != nil {
		t.Errorf("after Reset: %q %q %d %v, want the view of the second request alone", v.RemoteAddr(), v.Route(), v.MaxBody, v.Native)
	}
	if f, _ := v.Field("email"); f != "" {
		t.Errorf("after Reset, Field = %q: the first request's query leaked", f)
	}
	v.Reset(b, "", func(*http.Request) string { return "/from-func" })
	if v.Route() != "/from-func" {
		t.Errorf("Route with a route function = %q", v.Route())
	}
}

// The route of a ServeMux pattern is the same for every method it serves:
// its method, and the one a request sends, are never part of it.
func TestRouteSameForEveryMethod(t *testing.T) {
	mux := http.NewServeMux()
	var got []string
	record := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = append(got, httpview.NewFunc(r, nil).Route())
	})
	mux.Handle("GET /items/{id}", record)
	mux.Handle("/any/{id}", record)
	mux.Handle("GET example.com/host", record)
	for _, tc := range []struct{ method, target, want string }{
		{"GET", "/items/1", "/items/{id}"},
		{"HEAD", "/items/2", "/items/{id}"},
		{"GET", "/any/1", "/any/{id}"},
		{"DELETE", "/any/1", "/any/{id}"},
		{"BREW", "/any/1", "/any/{id}"},
		{"HEAD", "http://example.com/host", "example.com/host"},
	} {
		got = got[:0]
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.target, nil))
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s %s: routes %q, want [%q]", tc.method, tc.target, got, tc.want)
		}
	}
}
