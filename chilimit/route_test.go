package chilimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/chilimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// recordKey returns middleware keyed by keyfunc.Route that records the
// keys it computes (or the error text): the route pattern, whatever the
// method.
func recordKey(t *testing.T, got *[]string) func(http.Handler) http.Handler {
	l, err := core.New(core.Policy{Limit: 100, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return chilimit.New(l, httplimit.WithKey(func(r keyfunc.Request) (string, error) {
		k, err := keyfunc.Route(r)
		if err != nil {
			*got = append(*got, "error")
		} else {
			*got = append(*got, k)
		}
		return k, err
	}))
}

func TestRouteKeysUseThePattern(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	var got []string
	mw := recordKey(t, &got)

	r := chi.NewRouter()
	r.With(mw).Get("/items/{id}", ok)
	r.Route("/api", func(r chi.Router) {
		r.Route("/v1", func(r chi.Router) {
			r.With(mw).Post("/users/{user}/files/*", ok)
		})
	})
	r.Group(func(r chi.Router) {
		r.Use(mw)
		r.Get("/grouped/{id}", ok)
	})
	r.With(mw).Handle("/any/{id}", ok) // every method: one key
	top := chi.NewRouter()
	top.Use(mw) // before routing: the route is found on the tree
	top.Get("/top/{id}", ok)
	top.Handle("/all/{id}", ok)
	mounted := chi.NewRouter()
	mounted.Route("/api", func(r chi.Router) {
		r.Use(mw) // inside a mounted router: its prefix is not the route
		r.Get("/x/{id}", ok)
		r.Route("/v2", func(r chi.Router) { r.Post("/y/{id}", ok) })
	})

	mux := http.NewServeMux()
	mux.Handle("GET /mux/{id}", mw(ok))

	for _, tc := range []struct {
		h            http.Handler
		method, path string
		want         string
	}{
		{r, "GET", "/items/42", "/items/{id}"},
		{r, "POST", "/api/v1/users/ana/files/a/b", "/api/v1/users/{user}/files/*"},
		{r, "GET", "/grouped/7", "/grouped/{id}"},
		{r, "PUT", "/any/7", "/any/{id}"},
		{r, "DELETE", "/any/8", "/any/{id}"},
		{top, "GET", "/top/7", "/top/{id}"},
		{top, "HEAD", "/top/7", "/top/{id}"},
		{top, "PATCH", "/all/1", "/all/{id}"},
		{top, "PURGE", "/all/1", "error"}, // a method chi does not know: 405, no key
		{top, "GET", "/nowhere", "error"},
		{mounted, "GET", "/api/x/3", "/api/x/{id}"},
		{mounted, "POST", "/api/v2/y/4", "/api/v2/y/{id}"},
		{mux, "GET", "/mux/9", "/mux/{id}"},
		{mux, "HEAD", "/mux/9", "/mux/{id}"},
	} {
		got = got[:0]
		tc.h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s %s: keys %q, want [%q]", tc.method, tc.path, got, tc.want)
		}
	}
}
