package keyfunc

import "testing"

func TestRoute(t *testing.T) {
	tests := []struct {
		name    string
		r       *fakeRequest
		want    string
		wantErr error
	}{
		{"pattern", &fakeRequest{method: "GET", route: "/items/{id}"}, "/items/{id}", nil},
		{"HEAD counts with GET", &fakeRequest{method: "HEAD", route: "/items/{id}"}, "/items/{id}", nil},
		{"another method, one route", &fakeRequest{method: "DELETE", route: "/items/{id}"}, "/items/{id}", nil},
		{"made-up method", &fakeRequest{method: "BREW", route: "/items/{id}"}, "/items/{id}", nil},
		{"unknown route", &fakeRequest{method: "GET"}, "", ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, Route, tt.r, tt.want, tt.wantErr)
		})
	}
}

func TestRouteMethod(t *testing.T) {
	tests := []struct {
		method, want string
	}{
		{"GET", "GET /items/{id}"},
		{"HEAD", "GET /items/{id}"},
		{"POST", "POST /items/{id}"},
		{"PUT", "PUT /items/{id}"},
		{"PATCH", "PATCH /items/{id}"},
		{"DELETE", "DELETE /items/{id}"},
		{"OPTIONS", "OPTIONS /items/{id}"},
		{"CONNECT", "CONNECT /items/{id}"},
		{"TRACE", "TRACE /items/{id}"},
		// Every other method, a respelling included, is one key.
		{"get", "* /items/{id}"},
		{"Head", "* /items/{id}"},
		{"PROPFIND", "* /items/{id}"},
		{"BREW", "* /items/{id}"},
		{"", "* /items/{id}"},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			checkKey(t, RouteMethod, &fakeRequest{method: tt.method, route: "/items/{id}"}, tt.want, nil)
		})
	}
	checkKey(t, RouteMethod, &fakeRequest{method: "GET"}, "", ErrNoKey)
}

// A made-up method never mints a key: 1,000 methods give at most the nine
// keys of RouteMethod, and the one key of Route.
func TestRouteMethodsMintNoKeys(t *testing.T) {
	route, method := map[string]bool{}, map[string]bool{}
	for i := range 1000 {
		r := &fakeRequest{method: "M" + string(rune('A'+i%26)) + string(rune('0'+i/26%10)) + string(rune('a'+i/260)), route: "/items/{id}"}
		if i < 9 {
			r.method = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}[i]
		}
		k, err := Route(r)
		if err != nil {
			t.Fatal(err)
		}
		route[k] = true
		if k, err = RouteMethod(r); err != nil {
			t.Fatal(err)
		}
		method[k] = true
	}
	if len(route) != 1 || len(method) != 9 {
		t.Errorf("1,000 methods: Route made %d keys (want 1), RouteMethod %d (want 9)", len(route), len(method))
	}
}
