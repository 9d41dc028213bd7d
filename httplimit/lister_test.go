package httplimit_test

import (
	"iter"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
)

// listingHeader is a header such as fasthttp's *ResponseHeader: it sets
// canonical names, takes bytes, reads back and lists its fields (All). It
// records the calls that normalize a name.
type listingHeader struct {
	h          http.Header
	normalized []string // names of the calls that normalize them
}

func (l *listingHeader) Set(name, value string) {
	l.normalized = append(l.normalized, "Set "+name)
	l.h.Set(name, value)
}
func (l *listingHeader) Add(name, value string) {
	l.normalized = append(l.normalized, "Add "+name)
	l.h.Add(name, value)
}
func (l *listingHeader) SetBytesV(name string, v []byte) { l.Set(name, string(v)) }
func (l *listingHeader) AddBytesV(name string, v []byte) { l.Add(name, string(v)) }
func (l *listingHeader) SetCanonical(name, v []byte)     { l.h[string(name)] = []string{string(v)} }
func (l *listingHeader) PeekAll(name string) [][]byte {
	l.normalized = append(l.normalized, "PeekAll "+name)
	var vs [][]byte
	for _, v := range l.h.Values(name) {
		vs = append(vs, []byte(v))
	}
	return vs
}
func (l *listingHeader) All() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for k, vs := range l.h {
			for _, v := range vs {
				if !yield([]byte(k), []byte(v)) {
					return
				}
			}
		}
	}
}

// visitingHeader is a listingHeader that visits its fields (VisitAll), as
// fasthttp did before it had All.
type visitingHeader struct{ l *listingHeader }

func (v visitingHeader) Set(name, value string)          { v.l.Set(name, value) }
func (v visitingHeader) Add(name, value string)          { v.l.Add(name, value) }
func (v visitingHeader) SetBytesV(name string, b []byte) { v.l.SetBytesV(name, b) }
func (v visitingHeader) AddBytesV(name string, b []byte) { v.l.AddBytesV(name, b) }
func (v visitingHeader) SetCanonical(name, b []byte)     { v.l.SetCanonical(name, b) }
func (v visitingHeader) PeekAll(name string) [][]byte    { return v.l.PeekAll(name) }
func (v visitingHeader) VisitAll(f func(key, value []byte)) {
	for k, b := range v.l.All() {
		f(k, b)
	}
}

// A header that lists its fields gets the IETF fields set by their
// canonical names when they are not there yet, added to when they are, and
// is read for Access-Control-Allow-Origin by one pass over its fields: no
// call that normalizes a name, unless a field is there already.
func TestListingHeaderWrites(t *testing.T) {
	req := httptest.NewRequest("GET", "/", nil)
	for _, visit := range []bool{false, true} {
		for _, tt := range []struct {
			name           string
			before         http.Header
			wantRateLimit  int // values of RateLimit after
			wantNormalized []string
			wantExposed    bool
		}{
			{name: "fresh", before: http.Header{}, wantRateLimit: 1},
			{name: "after another limit", before: http.Header{"Ratelimit": {`"app";r=2;t=60`}, "Ratelimit-Policy": {`"app";q=3;w=3600`}},
				wantRateLimit: 2, wantNormalized: []string{"Add Ratelimit-Policy", "Add Ratelimit"}},
			{name: "CORS", before: http.Header{"Access-Control-Allow-Origin": {"*"}}, wantRateLimit: 1,
				wantNormalized: []string{"PeekAll Access-Control-Expose-Headers"}, wantExposed: true},
			{name: "CORS with an empty origin", before: http.Header{"Access-Control-Allow-Origin": {""}}, wantRateLimit: 1},
		} {
			e := httplimit.MustNew(newLimiter(t, core.Policy{Name: "api", Limit: 10, Window: time.Minute}))
			l := &listingHeader{h: tt.before.Clone()}
			var w httplimit.HeaderWriter = l
			if visit {
				w = visitingHeader{l}
			}
			var view httpview.Request
			view.Reset(req, "/", nil)
			res := e.Check(&view)
			res.WriteHeaders(w)
			if got := l.h.Values("Ratelimit"); len(got) != tt.wantRateLimit || got[len(got)-1] != `"api";r=9;t=6` {
				t.Errorf("visit %v, %s: RateLimit %q", visit, tt.name, got)
			}
			if got := l.h.Values("Ratelimit-Policy"); len(got) != tt.wantRateLimit || got[len(got)-1] != `"api";q=10;w=60` {
				t.Errorf("visit %v, %s: RateLimit-Policy %q", visit, tt.name, got)
			}
			slices.Sort(l.normalized)
			slices.Sort(tt.wantNormalized)
			if !slices.Equal(l.normalized, tt.wantNormalized) {
				t.Errorf("visit %v, %s: normalizing calls %q, want %q", visit, tt.name, l.normalized, tt.wantNormalized)
			}
			if got := l.h.Get("Access-Control-Expose-Headers") != ""; got != tt.wantExposed {
				t.Errorf("visit %v, %s: exposed %v, want %v", visit, tt.name, got, tt.wantExposed)
			}
		}
	}
}
