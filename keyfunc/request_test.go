package keyfunc

import (
	"context"
	"errors"
	"net/http"
	"testing"
)

// fakeRequest is a Request built field by field, as an adapter for a
// framework other than net/http would build it.
type fakeRequest struct {
	remote   string
	header   http.Header
	method   string
	route    string
	ctx      context.Context
	fields   map[string]string
	fieldErr error
}

var _ Request = (*fakeRequest)(nil)

func (f *fakeRequest) RemoteAddr() string          { return f.remote }
func (f *fakeRequest) Header(name string) []string { return f.header.Values(name) }
func (f *fakeRequest) Method() string              { return f.method }
func (f *fakeRequest) Route() string               { return f.route }

func (f *fakeRequest) Context() context.Context {
	if f.ctx == nil {
		return context.Background()
	}
	return f.ctx
}

func (f *fakeRequest) Field(name string) (string, error) {
	return f.fields[name], f.fieldErr
}

// checkKey runs fn on r and compares the key and the error with want and
// wantErr (nil: no error; otherwise matched with errors.Is).
func checkKey(t *testing.T, fn Func, r Request, want string, wantErr error) {
	t.Helper()
	got, err := fn(r)
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			t.Fatalf("key = %q, %v; want error %v", got, err, wantErr)
		}
		if got != "" {
			t.Errorf("key = %q with error %v; want \"\"", got, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("key: unexpected error %v; want %q", err, want)
	}
	if got != want {
		t.Errorf("key = %q; want %q", got, want)
	}
}
