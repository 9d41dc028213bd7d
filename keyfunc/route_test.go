package keyfunc

import "testing"

func TestRoute(t *testing.T) {
	tests := []struct {
		name    string
		r       *fakeRequest
		want    string
		wantErr error
	}{
		{"pattern", &fakeRequest{method: "GET", route: "/items/{id}"}, "GET /items/{id}", nil},
		{"method distinguishes", &fakeRequest{method: "DELETE", route: "/items/{id}"}, "DELETE /items/{id}", nil},
		{"unknown route", &fakeRequest{method: "GET"}, "", ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, Route, tt.r, tt.want, tt.wantErr)
		})
	}
}
