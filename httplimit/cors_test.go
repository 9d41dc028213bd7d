package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/keyfunc"
)

func TestPreflight(t *testing.T) {
	for _, tt := range []struct {
		method string
		header map[string]string
		want   bool
	}{
		{"OPTIONS", map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "DELETE"}, true},
		{"OPTIONS", map[string]string{"Origin": "https://app.example"}, false},
		{"OPTIONS", map[string]string{"Access-Control-Request-Method": "DELETE"}, false},
		{"OPTIONS", nil, false},
		{"GET", map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "DELETE"}, false},
		// Methods are case-sensitive; browsers send OPTIONS.
		{"options", map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "DELETE"}, false},
	} {
		r := httptest.NewRequest(tt.method, "/", nil)
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		if got := httplimit.Preflight(keyfunc.FromHTTP(r)); got != tt.want {
			t.Errorf("%s %v: Preflight %v, want %v", tt.method, tt.header, got, tt.want)
		}
	}
}

// peekHeader is a HeaderReader such as fasthttp's *ResponseHeader.
type peekHeader struct{ h http.Header }

func (p peekHeader) Set(name, value string) { p.h.Set(name, value) }
func (p peekHeader) Add(name, value string) { p.h.Add(name, value) }
func (p peekHeader) PeekAll(name string) [][]byte {
	var vs [][]byte
	for _, v := range p.h.Values(name) {
		vs = append(vs, []byte(v))
	}
	return vs
}

// writeOnly is a HeaderWriter that cannot read back.
type writeOnly struct{ h http.Header }

func (w writeOnly) Set(name, value string) { w.h.Set(name, value) }
func (w writeOnly) Add(name, value string) { w.h.Add(name, value) }

// A response a CORS middleware marked with Access-Control-Allow-Origin
// lists the engine's fields in Access-Control-Expose-Headers, each once,
// after what was listed; any other response is left alone.
func TestExposeHeaders(t *testing.T) {
	const ietf = "Retry-After, RateLimit, RateLimit-Policy"
	for _, tt := range []struct {
		name   string
		opts   []httplimit.Option
		before map[string][]string
		sink   func(http.Header) httplimit.HeaderWriter
		want   []string // Access-Control-Expose-Headers, allowed and denied
	}{
		{name: "no CORS response", want: nil},
		{name: "empty origin", before: map[string][]string{"Access-Control-Allow-Origin": {""}}, want: nil},
		{name: "default style", before: map[string][]string{"Access-Control-Allow-Origin": {"*"}}, want: []string{ietf}},
		{
			name:   "every style",
			opts:   []httplimit.Option{httplimit.WithHeaders(httplimit.IETFHeaders, httplimit.LegacyHeaders, httplimit.XRateLimitHeaders)},
			before: map[string][]string{"Access-Control-Allow-Origin": {"*"}},
			want: []string{ietf + ", RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset" +
				", X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset"},
		},
		{
			name:   "no rate headers",
			opts:   []httplimit.Option{httplimit.WithHeaders(httplimit.NoHeaders)},
			before: map[string][]string{"Access-Control-Allow-Origin": {"*"}},
			want:   []string{"Retry-After"},
		},
		{
			name:   "appended to the middleware's own",
			before: map[string][]string{"Access-Control-Allow-Origin": {"https://a.example"}, "Access-Control-Expose-Headers": {"X-Request-Id", "ETag"}},
			want:   []string{"X-Request-Id, ETag, " + ietf},
		},
		{
			name:   "names listed already, in any case",
			before: map[string][]string{"Access-Control-Allow-Origin": {"https://a.example"}, "Access-Control-Expose-Headers": {"retry-after,ratelimit , X-Request-Id"}},
			want:   []string{"retry-after,ratelimit , X-Request-Id, RateLimit-Policy"},
		},
		{
			name:   "all listed",
			before: map[string][]string{"Access-Control-Allow-Origin": {"*"}, "Access-Control-Expose-Headers": {"RateLimit-Policy, RateLimit, Retry-After"}},
			want:   []string{"RateLimit-Policy, RateLimit, Retry-After"},
		},
		{
			name:   "through a HeaderReader",
			before: map[string][]string{"Access-Control-Allow-Origin": {"https://a.example"}, "Access-Control-Expose-Headers": {"X-Request-Id"}},
			sink:   func(h http.Header) httplimit.HeaderWriter { return peekHeader{h} },
			want:   []string{"X-Request-Id, " + ietf},
		},
		{
			name:   "a HeaderWriter cannot read",
			before: map[string][]string{"Access-Control-Allow-Origin": {"https://a.example"}},
			sink:   func(h http.Header) httplimit.HeaderWriter { return writeOnly{h} },
			want:   nil,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := httplimit.MustNew(newLimiter(t, core.Policy{Limit: 1, Window: time.Minute}), tt.opts...)
			for _, step := range []string{"allowed", "denied"} {
				h := http.Header{}
				for k, v := range tt.before {
					h[k] = append([]string(nil), v...)
				}
				var w httplimit.HeaderWriter = h
				if tt.sink != nil {
					w = tt.sink(h)
				}
				res := e.Check(keyfunc.FromHTTP(httptest.NewRequest("GET", "/", nil)))
				res.WriteHeaders(w)
				if step == "denied" && res.Serve() {
					t.Fatal("second request served, want denied")
				}
				if got := h.Values("Access-Control-Expose-Headers"); strings.Join(got, "|") != strings.Join(tt.want, "|") {
					t.Errorf("%s: Access-Control-Expose-Headers %q, want %q", step, got, tt.want)
				}
			}
		})
	}
}

// Two limits on one request list the names once.
func TestExposeHeadersStacked(t *testing.T) {
	outer := httplimit.Middleware(newLimiter(t, core.Policy{Limit: 5, Window: time.Minute}))
	inner := httplimit.Middleware(newLimiter(t, core.Policy{Limit: 5, Window: time.Minute}), httplimit.WithHeaders(httplimit.IETFHeaders, httplimit.XRateLimitHeaders))
	h := outer(inner(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	w := httptest.NewRecorder()
	w.Header().Set("Access-Control-Allow-Origin", "*")
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	want := "Retry-After, RateLimit, RateLimit-Policy, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset"
	if got := w.Header().Values("Access-Control-Expose-Headers"); len(got) != 1 || got[0] != want {
		t.Errorf("Access-Control-Expose-Headers %q, want [%q]", got, want)
	}
}

// A CORS response whose Access-Control-Expose-Headers is not set yet costs
// no allocation more than any other.
func TestExposeHeadersAllocations(t *testing.T) {
	e := httplimit.MustNew(newLimiter(t, core.Policy{Limit: core.MaxLimit, Window: time.Second}))
	req := httptest.NewRequest("GET", "/hello", nil)
	h := make(http.Header)
	origin := []string{"https://app.example"}
	var view httpview.Request
	allocs := testing.AllocsPerRun(200, func() {
		clear(h)
		h["Access-Control-Allow-Origin"] = origin
		view.Reset(req, "/hello", nil) // an adapter's view is pooled
		res := e.Check(&view)
		res.WriteHeaders(h)
	})
	if allocs > maxAllocs() {
		t.Errorf("%v allocations per allowed CORS request, want at most %v", allocs, maxAllocs())
	}
}

// WriteDenied exposes its Retry-After on a CORS response.
func TestWriteDeniedExposesRetryAfter(t *testing.T) {
	d := core.Decision{RetryAfter: time.Second, Policy: core.Policy{Name: "login"}}
	rec := httptest.NewRecorder()
	rec.Header().Set("Access-Control-Allow-Origin", "https://app.example")
	rec.Header().Set("Access-Control-Expose-Headers", "X-Request-Id")
	httplimit.WriteDenied(rec, d)
	if got := rec.Header().Values("Access-Control-Expose-Headers"); len(got) != 1 || got[0] != "X-Request-Id, Retry-After" {
		t.Errorf("Access-Control-Expose-Headers %q, want [\"X-Request-Id, Retry-After\"]", got)
	}
	rec = httptest.NewRecorder()
	httplimit.WriteDenied(rec, d)
	if got := rec.Header().Values("Access-Control-Expose-Headers"); got != nil {
		t.Errorf("no CORS response: Access-Control-Expose-Headers %q, want none", got)
	}
}

// A response whose headers are empty when the engine writes them is
// written without looking the fields up; a refusal's own
// Access-Control-Allow-Origin (a WithDenied response's) is still read, and
// the engine's fields exposed, on a fresh header as on one that holds
// other fields already.
func TestExposeHeadersFreshDenied(t *testing.T) {
	req := httptest.NewRequest("GET", "/", nil)
	for _, before := range []http.Header{{}, {"X-Other": {"1"}}} {
		l, err := core.New(core.Policy{Limit: 1, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		e := httplimit.MustNew(l, httplimit.WithDenied(func(keyfunc.Request, core.Decision) httplimit.Response {
			return httplimit.Response{Header: http.Header{"Access-Control-Allow-Origin": {"*"}}, Body: []byte("slow down")}
		}))
		for i, want := range []string{"", "Retry-After, RateLimit, RateLimit-Policy"} {
			h := before.Clone()
			res := e.Check(httpview.New(req, "/"))
			res.WriteHeaders(h)
			if got := h.Get("Access-Control-Expose-Headers"); got != want {
				t.Errorf("request %d, headers %v before: Access-Control-Expose-Headers %q, want %q", i+1, before, got, want)
			}
			if h.Get("RateLimit") == "" || h.Get("RateLimit-Policy") == "" {
				t.Errorf("request %d: no rate headers: %v", i+1, h)
			}
		}
	}
}
