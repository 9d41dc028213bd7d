package httpview

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// readerFrom is a writer that records whether its ReadFrom was used.
type readerFrom struct {
	*httptest.ResponseRecorder
	used bool
}

func (r *readerFrom) ReadFrom(src io.Reader) (int64, error) {
	r.used = true
	return io.Copy(r.ResponseRecorder, src)
}

// foreign is another middleware's writer, which unwraps.
type foreign struct{ http.ResponseWriter }

func (f foreign) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// A Writer records the final status, copies through the wrapped
// ReadFrom, pushes or says it cannot, and is found by the limits further
// down through another middleware's writer that unwraps; one that does
// not unwrap hides it.
func TestWriter(t *testing.T) {
	rec := &readerFrom{ResponseRecorder: httptest.NewRecorder()}
	var w Writer[int]
	w.Reset(rec)
	w.Value = 7
	if w.Status() != http.StatusOK {
		t.Errorf("nothing written: Status %d, want 200", w.Status())
	}
	w.WriteHeader(http.StatusTeapot)
	if n, err := io.Copy(&w, io.LimitReader(strings.NewReader("body"), 4)); n != 4 || err != nil || !rec.used {
		t.Errorf("io.Copy: %d, %v, wrapped ReadFrom used %v", n, err, rec.used)
	}
	if w.Status() != http.StatusTeapot || rec.Body.String() != "body" {
		t.Errorf("Status %d body %q, want 418 and the body", w.Status(), rec.Body.String())
	}
	if err := w.Push("/x", nil); !errors.Is(err, http.ErrNotSupported) {
		t.Errorf("Push on a writer that cannot: %v", err)
	}
	if v := Outer[int](foreign{&w}); v == nil || *v != 7 {
		t.Errorf("Outer through an unwrapping writer: %v", v)
	}
	if v := Outer[int](struct{ http.ResponseWriter }{&w}); v != nil {
		t.Errorf("Outer through a writer that does not unwrap: %v, want nil", *v)
	}
	if v := Outer[string](&w); v != nil {
		t.Errorf("Outer of another value type: %v", *v)
	}
}
