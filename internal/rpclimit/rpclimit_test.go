package rpclimit_test

import (
	"context"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/rpclimit"
	"github.com/ratekit/ratekit/keyfunc"
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func memory(t *testing.T, p core.Policy, clock core.Clock) *core.Memory {
	t.Helper()
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func call(peer, method string, md map[string][]string) *rpclimit.Call {
	return &rpclimit.Call{Ctx: context.Background(), Peer: peer, Procedure: method,
		Metadata: func(name string) []string { return md[name] }}
}

type header struct{ name, value string }

func headers(v *rpclimit.Verdict) []header {
	var hs []header
	v.Headers(func(n, val string) { hs = append(hs, header{n, val}) })
	return hs
}

// A denial is ResourceExhausted with the Retry-After and the policy, and
// the rate headers are the HTTP adapters' values, lowercase.
func TestDenied(t *testing.T) {
	clock := core.NewManualClock(start)
	l, err := rpclimit.New("test", memory(t, core.Policy{Name: "api", Limit: 2, Window: 20 * time.Second}, clock), rpclimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := call("192.0.2.1:5000", "/pkg.S/M", nil)
	for i := range 2 {
		v := l.Check(c)
		if !v.Serve() {
			t.Fatalf("call %d refused: %+v", i+1, v.Refusal())
		}
		want := []header{{"ratelimit-policy", `"api";q=2;w=20`}, {"ratelimit", `"api";r=` + string(rune('1'-i)) + ";t=" + []string{"10", "20"}[i]}}
		if got := headers(&v); !slices.Equal(got, want) {
			t.Errorf("call %d headers %v, want %v", i+1, got, want)
		}
	}
	v := l.Check(c)
	if v.Serve() {
		t.Fatal("third call served")
	}
	r := v.Refusal()
	if r.Code != rpclimit.CodeResourceExhausted || r.RetryAfter != 10 || r.Policy != "api" || r.QuotaSubject != "policy:api" || !strings.Contains(r.Message, "10 seconds") {
		t.Errorf("refusal %+v", r)
	}
	want := []header{{"ratelimit-policy", `"api";q=2;w=20`}, {"ratelimit", `"api";r=0;t=10`}, {"retry-after", "10"}}
	if got := headers(&v); !slices.Equal(got, want) {
		t.Errorf("denied headers %v, want %v", got, want)
	}
}

// AddHeaders writes what Headers passes, under canonical names, for a
// served call, a denied one and one in a dry run.
func TestAddHeaders(t *testing.T) {
	clock := core.NewManualClock(start)
	for _, cfg := range []rpclimit.Config{{}, {DryRun: true}} {
		l, err := rpclimit.New("test", memory(t, core.Policy{Name: "api", Limit: 1, Window: 20 * time.Second}, clock), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			v := l.Check(call("192.0.2.1:5000", "/pkg.S/M", nil))
			want := http.Header{}
			for _, h := range headers(&v) {
				want.Add(h.name, h.value)
			}
			got := http.Header{"Ratelimit": {"outer"}}
			v.AddHeaders(got)
			want["Ratelimit"] = append([]string{"outer"}, want["Ratelimit"]...)
			if len(want) < 2 || !reflect.DeepEqual(got, want) {
				t.Errorf("dry run %v, call %d: AddHeaders wrote %v, want %v", cfg.DryRun, i+1, got, want)
			}
		}
	}
}

// The call view gives keyfunc the peer, the metadata and the method: the
// client IP from x-forwarded-for only behind a trusted proxy, read from
// the right; a metadata value; the method as the route.
func TestCallView(t *testing.T) {
	ip, err := keyfunc.ClientIP(keyfunc.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")))
	if err != nil {
		t.Fatal(err)
	}
	md := map[string][]string{"x-forwarded-for": {"198.51.100.9, 203.0.113.5"}, "x-api-key": {"k1"}}
	for _, tt := range []struct {
		name string
		f    keyfunc.Func
		peer string
		want string
	}{
		{"untrusted peer", ip, "192.0.2.1:1", "192.0.2.1"},
		{"trusted proxy", ip, "10.1.2.3:1", "203.0.113.5"},
		{"route", keyfunc.Route, "192.0.2.1:1", "/pkg.S/M"},
		{"joined", keyfunc.Join(keyfunc.Route, keyfunc.PeerIP), "192.0.2.1:1", "8:/pkg.S/M9:192.0.2.1"},
	} {
		got, err := tt.f(call(tt.peer, "/pkg.S/M", md))
		if err != nil || got != tt.want {
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	hashed, err := keyfunc.Header("X-API-Key", []byte("secret"))(call("192.0.2.1:1", "/pkg.S/M", md))
	if err != nil || hashed == "" || strings.Contains(hashed, "k1") {
		t.Errorf("hashed API key %q, %v", hashed, err)
	}
}

// Per-method limiters from the map and from the function; a nil limiter
// or a malformed method name is a construction error.
func TestMethods(t *testing.T) {
	clock := core.NewManualClock(start)
	one := func() core.Limiter { return memory(t, core.Policy{Limit: 1, Window: time.Minute}, clock) }
	def, fromFunc := one(), one()
	l, err := rpclimit.New("test", def, rpclimit.Config{
		Methods: map[string]core.Limiter{"/pkg.S/A": one()},
		MethodFunc: func(m string) core.Limiter {
			if m == "/pkg.S/B" {
				return fromFunc
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each method has its own count of one: A and B by their own limiter,
	// C and D by the default one, which they share.
	for _, tt := range []struct {
		method string
		serve  bool
	}{{"/pkg.S/A", true}, {"/pkg.S/A", false}, {"/pkg.S/B", true}, {"/pkg.S/B", false}, {"/pkg.S/C", true}, {"/pkg.S/D", false}} {
		v := l.Check(call("192.0.2.1:1", tt.method, nil))
		if v.Serve() != tt.serve {
			t.Errorf("%s: served %v, want %v", tt.method, v.Serve(), tt.serve)
		}
	}
	for _, cfg := range []rpclimit.Config{
		{Methods: map[string]core.Limiter{"/pkg.S/A": nil}},
		{Methods: map[string]core.Limiter{"pkg.S/A": def}},
	} {
		if _, err := rpclimit.New("test", def, cfg); err == nil || !strings.HasPrefix(err.Error(), "test: method") {
			t.Errorf("New(%v): %v, want an error naming the method", cfg.Methods, err)
		}
	}
	if _, err := rpclimit.New("test", nil, rpclimit.Config{}); err == nil {
		t.Error("New with a nil limiter succeeded")
	}
}

// mustFailover returns core.NewFailover(remote, opts...).
func mustFailover(t *testing.T, remote core.Limiter, opts ...core.FailoverOption) *core.Failover {
	t.Helper()
	f, err := core.NewFailover(remote, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Every kind of refusal has its code; caller errors are refused, never
// served, whatever the error policy.
func TestRefusalCodes(t *testing.T) {
	clock := core.NewManualClock(start)
	p := core.Policy{Limit: 2, Window: time.Minute}
	closed := core.FailClosed()
	for _, tt := range []struct {
		name  string
		l     core.Limiter
		cfg   rpclimit.Config
		code  uint32
		retry int64
	}{
		{"cost too high", memory(t, p, clock), rpclimit.Config{Cost: func(context.Context, string) (int64, error) { return 3, nil }}, rpclimit.CodeResourceExhausted, 0},
		{"bad cost", memory(t, p, clock), rpclimit.Config{Cost: func(context.Context, string) (int64, error) { return 0, nil }}, rpclimit.CodeInvalidArgument, 0},
		{"no peer", memory(t, p, clock), rpclimit.Config{}, rpclimit.CodeInvalidArgument, 0},
		{"store down, fail closed", down{}, rpclimit.Config{ErrorPolicy: &closed}, rpclimit.CodeUnavailable, 1},
		// A Failover of the user's failing closed: the same refusal, retried
		// when its open breaker lets a call through.
		{"store down, a Failover failing closed", mustFailover(t, down{}, core.WithErrorPolicy(closed), core.WithBreaker(1, 30*time.Second), core.WithClock(clock)),
			rpclimit.Config{}, rpclimit.CodeUnavailable, 30},
		{"unusable method limiter", memory(t, p, clock), rpclimit.Config{
			CountIf:    func(uint32) bool { return true },
			MethodFunc: func(string) core.Limiter { return down{} },
		}, rpclimit.CodeUnavailable, 1},
	} {
		l, err := rpclimit.New("test", tt.l, tt.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		peer := "192.0.2.1:1"
		if tt.name == "no peer" {
			peer = ""
		}
		v := l.Check(call(peer, "/pkg.S/M", nil))
		if r := v.Refusal(); v.Serve() || r.Code != tt.code || r.RetryAfter != tt.retry || r.Message == "" || (r.QuotaSubject != "") != (tt.code == rpclimit.CodeResourceExhausted) {
			t.Errorf("%s: served %v, refusal %+v; want code %d, retry %d", tt.name, v.Serve(), r, tt.code, tt.retry)
		}
	}
}

// With CountIf, a call is counted before the handler and given back unless
// its code is accepted.
func TestCountIf(t *testing.T) {
	clock := core.NewManualClock(start)
	m := memory(t, core.Policy{Limit: 2, Window: time.Minute}, clock)
	l, err := rpclimit.New("test", m, rpclimit.Config{CountIf: func(code uint32) bool { return code == 16 }, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []uint32{0, 0, 5, 16, 16} {
		v := l.Check(call("192.0.2.1:1", "/pkg.S/M", nil))
		if !v.Serve() {
			t.Fatalf("refused with %d of 2 failures counted", code)
		}
		v.Done(code)
	}
	if v := l.Check(call("192.0.2.1:1", "/pkg.S/M", nil)); v.Serve() {
		t.Error("served after two counted failures")
	}
}

// down is a limiter whose store is unreachable and that cannot give units
// back.
type down struct{}

func (down) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, context.DeadlineExceeded
}
func (down) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, context.DeadlineExceeded
}
func (down) Reset(context.Context, string) error { return nil }
