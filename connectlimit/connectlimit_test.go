package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/connectlimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

const (
	sayProc    = "/test.v1.Echo/Say"    // unary
	uploadProc = "/test.v1.Echo/Upload" // client stream
	chatProc   = "/test.v1.Echo/Chat"   // bidirectional stream
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// protocols are the wire protocols every client test runs over.
var protocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}},
}

// server is a Connect service with the three kinds of handler behind an
// interceptor, on an HTTP/2 TLS httptest server, counting what its
// handlers were given.
type server struct {
	url    string
	client *http.Client
	calls  atomic.Int64 // handler calls of every kind
	msgs   atomic.Int64 // stream messages handed to handlers
}

// newServer serves the handlers behind ic. Say answers its message, or
// fails with code N for the message "code:N"; Upload counts the messages
// it receives; Chat echoes each message.
func newServer(t *testing.T, ic connect.Interceptor) *server {
	t.Helper()
	s := &server{}
	opt := connect.WithInterceptors(ic)
	mux := http.NewServeMux()
	mux.Handle(sayProc, connect.NewUnaryHandler(sayProc,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			s.calls.Add(1)
			var c int
			if _, err := fmt.Sscanf(req.Msg.Value, "code:%d", &c); err == nil {
				if c == 2 {
					return nil, errors.New("not a connect error")
				}
				return nil, connect.NewError(connect.Code(c), errors.New("failed as asked"))
			}
			return connect.NewResponse(wrapperspb.String("said " + req.Msg.Value)), nil
		}, opt))
	mux.Handle(uploadProc, connect.NewClientStreamHandler(uploadProc,
		func(_ context.Context, st *connect.ClientStream[wrapperspb.StringValue]) (*connect.Response[wrapperspb.Int64Value], error) {
			s.calls.Add(1)
			var n int64
			for st.Receive() {
				n++
				s.msgs.Add(1)
			}
			if err := st.Err(); err != nil {
				return nil, err
			}
			return connect.NewResponse(wrapperspb.Int64(n)), nil
		}, opt))
	mux.Handle(chatProc, connect.NewBidiStreamHandler(chatProc,
		func(_ context.Context, st *connect.BidiStream[wrapperspb.StringValue, wrapperspb.StringValue]) error {
			s.calls.Add(1)
			for {
				m, err := st.Receive()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				s.msgs.Add(1)
				if err := st.Send(m); err != nil {
					return err
				}
			}
		}, opt))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.url, s.client = srv.URL, srv.Client()
	return s
}

func (s *server) say(opts []connect.ClientOption) *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue] {
	return connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](s.client, s.url+sayProc, opts...)
}

func (s *server) upload(opts []connect.ClientOption) *connect.Client[wrapperspb.StringValue, wrapperspb.Int64Value] {
	return connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](s.client, s.url+uploadProc, opts...)
}

func (s *server) chat(opts []connect.ClientOption) *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue] {
	return connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](s.client, s.url+chatProc, opts...)
}

// sayCall makes one unary call with msg and the request headers hdr
// (name, value pairs).
func sayCall(c *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue], msg string, hdr ...string) (*connect.Response[wrapperspb.StringValue], error) {
	req := connect.NewRequest(wrapperspb.String(msg))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header().Add(hdr[i], hdr[i+1])
	}
	return c.CallUnary(context.Background(), req)
}

// uploadCall streams n messages and returns the response.
func uploadCall(c *connect.Client[wrapperspb.StringValue, wrapperspb.Int64Value], n int) (*connect.Response[wrapperspb.Int64Value], error) {
	st := c.CallClientStream(context.Background())
	for i := range n {
		// A refused stream may be closed before the messages are
		// sent: Send then reports io.EOF, and CloseAndReceive the error.
		if err := st.Send(wrapperspb.String(fmt.Sprint("m", i))); err != nil {
			break
		}
	}
	return st.CloseAndReceive()
}

func memory(t testing.TB, p core.Policy, clock core.Clock) *core.Memory {
	t.Helper()
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// refusal is what a client reads from a refused call's error.
type refusal struct {
	code    connect.Code
	message string
	retry   int64    // RetryInfo's retry_delay in seconds; -1 without RetryInfo
	quota   []string // the QuotaFailure violations' subjects
	meta    map[string][]string
}

func readRefusal(t *testing.T, err error) refusal {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T), want a *connect.Error", err, err)
	}
	r := refusal{code: ce.Code(), message: ce.Message(), retry: -1, meta: map[string][]string{}}
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatalf("detail %s: %v", d.Type(), err)
		}
		switch v := v.(type) {
		case *errdetails.RetryInfo:
			if r.retry != -1 {
				t.Errorf("two RetryInfo details")
			}
			if v.RetryDelay.Nanos != 0 {
				t.Errorf("retry_delay %v, want whole seconds", v.RetryDelay.AsDuration())
			}
			r.retry = v.RetryDelay.Seconds
		case *errdetails.QuotaFailure:
			for _, vi := range v.Violations {
				r.quota = append(r.quota, vi.Subject)
				if vi.Description != ce.Message() {
					t.Errorf("violation %s: description %q, want the message %q", vi.Subject, vi.Description, ce.Message())
				}
			}
		default:
			t.Errorf("unexpected detail %s", d.Type())
		}
	}
	for _, h := range []string{"Ratelimit", "Ratelimit-Policy", "Retry-After"} {
		if vs := ce.Meta().Values(h); vs != nil {
			r.meta[h] = vs
		}
	}
	return r
}

func checkRefusal(t *testing.T, what string, err error, want refusal) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: served, want %v", what, want.code)
		return
	}
	got := readRefusal(t, err)
	if got.code != want.code || (want.message != "" && got.message != want.message) || got.retry != want.retry || !slices.Equal(got.quota, want.quota) {
		t.Errorf("%s: got code %v, message %q, retry %d, quota %q; want %v, %q, %d, %q",
			what, got.code, got.message, got.retry, got.quota, want.code, want.message, want.retry, want.quota)
	}
	checkHeaders(t, what+": error meta", got.meta, want.meta)
}

// checkHeaders compares the rate headers in h with want, where a missing
// name means the header must be absent.
func checkHeaders(t *testing.T, what string, h map[string][]string, want map[string][]string) {
	t.Helper()
	for _, name := range []string{"Ratelimit", "Ratelimit-Policy", "Retry-After"} {
		if got := h[name]; !slices.Equal(got, want[name]) {
			t.Errorf("%s: %s %q, want %q", what, name, got, want[name])
		}
	}
}

func rateHeaders(h http.Header) map[string][]string {
	return map[string][]string{"Ratelimit": h.Values("Ratelimit"), "Ratelimit-Policy": h.Values("Ratelimit-Policy"), "Retry-After": h.Values("Retry-After")}
}

// Two calls per 20 s: the first two are served with the rate headers the
// HTTP middleware writes; the third is refused with ResourceExhausted,
// RetryInfo, QuotaFailure and the headers in the error's metadata, without
// calling the handler; after the Retry-After, a call is served again.
func TestUnary(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Name: "api", Limit: 2, Window: 20 * time.Second}, clock)))
			c := s.say(proto.opts)
			policy := []string{`"api";q=2;w=20`}
			for i, want := range []string{`"api";r=1;t=10`, `"api";r=0;t=20`} {
				res, err := sayCall(c, "hi")
				if err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
				if res.Msg.Value != "said hi" {
					t.Errorf("call %d: answer %q", i+1, res.Msg.Value)
				}
				checkHeaders(t, fmt.Sprint("call ", i+1), rateHeaders(res.Header()), map[string][]string{"Ratelimit": {want}, "Ratelimit-Policy": policy})
			}
			_, err := sayCall(c, "hi")
			checkRefusal(t, "call 3", err, refusal{
				code: connect.CodeResourceExhausted, message: "Try again in 10 seconds.", retry: 10, quota: []string{"policy:api"},
				meta: map[string][]string{"Ratelimit": {`"api";r=0;t=10`}, "Ratelimit-Policy": policy, "Retry-After": {"10"}},
			})
			if n := s.calls.Load(); n != 2 {
				t.Errorf("handler called %d times, want 2", n)
			}
			clock.Advance(10 * time.Second)
			if _, err := sayCall(c, "hi"); err != nil {
				t.Errorf("after the Retry-After: %v", err)
			}
		})
	}
}

// A served call whose handler fails still carries the rate headers, as an
// HTTP error response does.
func TestHandlerErrorHeaders(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Name: "api", Limit: 2, Window: 20 * time.Second}, clock)))
			_, err := sayCall(s.say(proto.opts), "code:5")
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound {
				t.Fatalf("error %v, want the handler's NotFound", err)
			}
			checkHeaders(t, "failed call", rateHeaders(ce.Meta()), map[string][]string{
				"Ratelimit": {`"api";r=1;t=10`}, "Ratelimit-Policy": {`"api";q=2;w=20`},
			})
		})
	}
}

// A stream is one request at its start, however many messages it carries:
// two streams are served, with the rate headers on the response headers,
// and the third is refused before its handler runs.
func TestStreamStart(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Name: "streams", Limit: 2, Window: 20 * time.Second}, clock)))
			c := s.upload(proto.opts)
			for i, want := range []string{`"streams";r=1;t=10`, `"streams";r=0;t=20`} {
				res, err := uploadCall(c, 5)
				if err != nil {
					t.Fatalf("stream %d: %v", i+1, err)
				}
				if res.Msg.Value != 5 {
					t.Errorf("stream %d: handler got %d messages, want 5", i+1, res.Msg.Value)
				}
				checkHeaders(t, fmt.Sprint("stream ", i+1), rateHeaders(res.Header()),
					map[string][]string{"Ratelimit": {want}, "Ratelimit-Policy": {`"streams";q=2;w=20`}})
			}
			_, err := uploadCall(c, 5)
			checkRefusal(t, "stream 3", err, refusal{
				code: connect.CodeResourceExhausted, message: "Try again in 10 seconds.", retry: 10, quota: []string{"policy:streams"},
				meta: map[string][]string{"Ratelimit": {`"streams";r=0;t=10`}, "Ratelimit-Policy": {`"streams";q=2;w=20`}, "Retry-After": {"10"}},
			})
			if n := s.calls.Load(); n != 2 {
				t.Errorf("handler called %d times, want 2", n)
			}
		})
	}
}

// With WithPerMessage a bidirectional stream costs 1 at its start and 1 per
// message: with 4 units, three messages are echoed and the fourth ends the
// stream with the refusal, which the handler returned from Receive.
func TestPerMessage(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Name: "msgs", Limit: 4, Window: 40 * time.Second}, clock), connectlimit.WithPerMessage()))
			st := s.chat(proto.opts).CallBidiStream(context.Background())
			for i := range 5 {
				if err := st.Send(wrapperspb.String(fmt.Sprint("m", i))); err != nil {
					break
				}
			}
			if err := st.CloseRequest(); err != nil {
				t.Fatal(err)
			}
			var echoed []string
			var err error
			for {
				var m *wrapperspb.StringValue
				if m, err = st.Receive(); err != nil {
					break
				}
				echoed = append(echoed, m.Value)
			}
			st.CloseResponse()
			if want := []string{"m0", "m1", "m2"}; !slices.Equal(echoed, want) {
				t.Errorf("echoed %q, want %q", echoed, want)
			}
			// The response headers are the stream start's.
			checkHeaders(t, "response headers", rateHeaders(st.ResponseHeader()),
				map[string][]string{"Ratelimit": {`"msgs";r=3;t=10`}, "Ratelimit-Policy": {`"msgs";q=4;w=40`}})
			checkRefusal(t, "message 4", err, refusal{
				code: connect.CodeResourceExhausted, message: "Try again in 10 seconds.", retry: 10, quota: []string{"policy:msgs"},
				meta: map[string][]string{"Ratelimit": {`"msgs";r=3;t=10`, `"msgs";r=0;t=10`}, "Ratelimit-Policy": {`"msgs";q=4;w=40`, `"msgs";q=4;w=40`}, "Retry-After": {"10"}},
			})
			if n := s.msgs.Load(); n != 3 {
				t.Errorf("handler was handed %d messages, want 3", n)
			}
		})
	}
}

// Unary calls are charged once with WithPerMessage too; without it, a
// stream's messages are not charged (TestStreamStart).
func TestPerMessageUnary(t *testing.T) {
	clock := core.NewManualClock(start)
	s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Limit: 2, Window: time.Minute}, clock), connectlimit.WithPerMessage()))
	c := s.say(nil)
	for i := range 2 {
		if _, err := sayCall(c, "hi"); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if _, err := sayCall(c, "hi"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("call 3: %v, want ResourceExhausted", err)
	}
}

// Procedures get limiters of their own from the map and from the
// function; the others share the default limiter, and the QuotaFailure
// names the policy that refused.
func TestProcedures(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			one := func(name string) core.Limiter {
				return memory(t, core.Policy{Name: name, Limit: 1, Window: time.Minute}, clock)
			}
			var asked []string
			s := newServer(t, connectlimit.NewInterceptor(one("default"),
				connectlimit.WithProcedures(map[string]core.Limiter{sayProc: one("say")}),
				connectlimit.WithProcedureFunc(func(p string) core.Limiter {
					asked = append(asked, p)
					if p == uploadProc {
						return one("upload")
					}
					return nil
				}),
			))
			if _, err := sayCall(s.say(proto.opts), "hi"); err != nil {
				t.Fatal(err)
			}
			_, err := sayCall(s.say(proto.opts), "hi")
			checkRefusal(t, "say 2", err, refusal{code: connect.CodeResourceExhausted, retry: 60, quota: []string{"policy:say"},
				meta: map[string][]string{"Ratelimit": {`"say";r=0;t=60`}, "Ratelimit-Policy": {`"say";q=1;w=60`}, "Retry-After": {"60"}}})
			for i := range 2 {
				if _, err := uploadCall(s.upload(proto.opts), 1); err != nil {
					if i == 0 {
						t.Fatal(err)
					}
					if q := readRefusal(t, err).quota; !slices.Equal(q, []string{"policy:upload"}) {
						t.Errorf("upload 2 refused by %q, want policy:upload", q)
					}
				} else if i == 1 {
					t.Error("upload 2 served")
				}
			}
			// Chat has no limiter of its own: the default one, of 1.
			st := s.chat(proto.opts).CallBidiStream(context.Background())
			st.CloseRequest()
			if _, err := st.Receive(); !errors.Is(err, io.EOF) {
				t.Errorf("chat 1: %v, want a served stream", err)
			}
			st.CloseResponse()
			st = s.chat(proto.opts).CallBidiStream(context.Background())
			st.CloseRequest()
			_, err = st.Receive()
			st.CloseResponse()
			if q := readRefusal(t, err).quota; !slices.Equal(q, []string{"policy:default"}) {
				t.Errorf("chat 2 refused by %q, want policy:default", q)
			}
			// The function is asked once per procedure not in the map, at
			// its first call, a nil answer included.
			if want := []string{uploadProc, chatProc}; !slices.Equal(asked, want) {
				t.Errorf("procedure function asked for %q, want %q", asked, want)
			}
		})
	}
}

// down is a limiter whose store is unreachable.
type down struct{}

func (down) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errStoreDown
}
func (down) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errStoreDown
}
func (down) Reset(context.Context, string) error { return nil }

var errStoreDown = errors.New("store down")

// hookLog records what the error hook receives.
type hookLog struct {
	mu   sync.Mutex
	seen []string // "procedure: error"
}

func (h *hookLog) hook(_ context.Context, procedure string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, procedure+": "+err.Error())
}

func (h *hookLog) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// A failing limiter: failing closed refuses unary calls and streams with
// Unavailable and a RetryInfo of 1 s, no QuotaFailure and no rate
// headers, the handler not called; failing open (the default) serves them
// without rate headers. The hook sees each error with its procedure.
func TestErrorPolicy(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			var log hookLog
			s := newServer(t, connectlimit.NewInterceptor(down{},
				connectlimit.WithErrorPolicy(core.FailClosed()), connectlimit.WithErrorHook(log.hook)))
			want := refusal{code: connect.CodeUnavailable, message: "The request could not be checked against its rate limit. Try again in 1 second.",
				retry: 1, meta: map[string][]string{"Retry-After": {"1"}}}
			_, err := sayCall(s.say(proto.opts), "hi")
			checkRefusal(t, "unary", err, want)
			_, err = uploadCall(s.upload(proto.opts), 2)
			checkRefusal(t, "stream", err, want)
			if n := s.calls.Load(); n != 0 {
				t.Errorf("handler called %d times, want 0", n)
			}
			got := log.all()
			if len(got) != 2 || !strings.HasPrefix(got[0], sayProc+": ") || !strings.HasPrefix(got[1], uploadProc+": ") || !strings.Contains(got[0], errStoreDown.Error()) {
				t.Errorf("hook saw %q, want the store's error for %s and %s", got, sayProc, uploadProc)
			}

			open := newServer(t, connectlimit.NewInterceptor(down{}))
			res, err := sayCall(open.say(proto.opts), "hi")
			if err != nil {
				t.Fatalf("fail open: %v", err)
			}
			checkHeaders(t, "fail open", rateHeaders(res.Header()), nil)
		})
	}
}

// The caller's faults are refused with InvalidArgument, without details,
// whatever the error policy, and the handler is not called: a failing or
// non-positive cost, an invalid key, and a key function that finds
// nothing: never keyed by the peer's address instead.
func TestCallerErrors(t *testing.T) {
	invalidKey := func(keyfunc.Request) (string, error) {
		return "", fmt.Errorf("bad: %w", keyfunc.ErrInvalidKey)
	}
	for _, tt := range []struct {
		name string
		opt  connectlimit.Option
		hook string // what the hook's error contains
	}{
		{"cost error", connectlimit.WithCost(func(context.Context, string) (int64, error) { return 0, errors.New("no cost") }), "no cost"},
		{"zero cost", connectlimit.WithCost(func(context.Context, string) (int64, error) { return 0, nil }), "cost 0"},
		{"invalid key", connectlimit.WithKey(invalidKey), "bad"},
		{"missing key", connectlimit.WithKey(keyfunc.Header("X-API-Key", []byte("secret"))), keyfunc.ErrNoKey.Error()},
	} {
		for _, proto := range protocols {
			t.Run(tt.name+"/"+proto.name, func(t *testing.T) {
				var log hookLog
				s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Limit: 10, Window: time.Minute}, core.NewManualClock(start)),
					tt.opt, connectlimit.WithErrorPolicy(core.FailOpen()), connectlimit.WithErrorHook(log.hook)))
				_, err := sayCall(s.say(proto.opts), "hi")
				checkRefusal(t, "unary", err, refusal{code: connect.CodeInvalidArgument, retry: -1})
				_, err = uploadCall(s.upload(proto.opts), 1)
				checkRefusal(t, "stream", err, refusal{code: connect.CodeInvalidArgument, retry: -1})
				if n := s.calls.Load(); n != 0 {
					t.Errorf("handler called %d times, want 0", n)
				}
				if got := log.all(); len(got) != 2 || !strings.Contains(got[0], tt.hook) {
					t.Errorf("hook saw %q, want 2 errors containing %q", got, tt.hook)
				}
			})
		}
	}
	s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Limit: 10, Window: time.Minute}, core.NewManualClock(start)),
		connectlimit.WithKey(keyfunc.Header("X-API-Key", []byte("secret")))))
	_, err := sayCall(s.say(nil), "hi")
	checkRefusal(t, "no API key", err, refusal{code: connect.CodeInvalidArgument, retry: -1})
}

// A call costing more than the policy can ever allow is ResourceExhausted
// with a QuotaFailure but no RetryInfo, since retrying cannot help, and the
// handler is not called.
func TestCostTooHigh(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Name: "api", Limit: 2, Window: time.Minute}, core.NewManualClock(start)),
				connectlimit.WithCost(func(_ context.Context, p string) (int64, error) {
					if p == sayProc {
						return 3, nil
					}
					return 1, nil
				})))
			_, err := sayCall(s.say(proto.opts), "hi")
			// The key's rate metadata as it is: nothing was counted.
			checkRefusal(t, "unary", err, refusal{code: connect.CodeResourceExhausted, retry: -1, quota: []string{"policy:api"},
				message: "This request costs 3 units; the policy allows at most 2 at once, so retrying cannot help.",
				meta:    map[string][]string{"Ratelimit": {`"api";r=2;t=0`}, "Ratelimit-Policy": {`"api";q=2;w=60`}}})
			if n := s.calls.Load(); n != 0 {
				t.Errorf("handler called %d times, want 0", n)
			}
			if _, err := uploadCall(s.upload(proto.opts), 1); err != nil {
				t.Errorf("a procedure costing 1: %v", err)
			}
		})
	}
}

// recorder is a limiter that records the keys it is asked about.
type recorder struct {
	core.Limiter
	mu   sync.Mutex
	keys []string
}

func (r *recorder) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
	return r.Limiter.AllowN(ctx, key, n)
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

// Keys: the peer's address by default and behind an untrusted proxy; the
// X-Forwarded-For address, read from the right, only when the peer is a
// trusted proxy; an API key header, hashed; the procedure, joined.
func TestKeys(t *testing.T) {
	trusted, err := keyfunc.ClientIP(keyfunc.TrustProxies(netip.MustParsePrefix("127.0.0.0/8")))
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := keyfunc.ClientIP(keyfunc.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")))
	if err != nil {
		t.Fatal(err)
	}
	xff := []string{"X-Forwarded-For", "198.51.100.9, 203.0.113.5"}
	for _, proto := range protocols {
		for _, tt := range []struct {
			name string
			key  keyfunc.Func
			hdr  []string
			want string
		}{
			{"default", nil, xff, "127.0.0.1"},
			{"untrusted proxy", untrusted, xff, "127.0.0.1"},
			{"trusted proxy", trusted, xff, "203.0.113.5"},
			{"procedure and peer", keyfunc.Join(keyfunc.Route, keyfunc.PeerIP), nil, "17:/test.v1.Echo/Say9:127.0.0.1"},
		} {
			t.Run(proto.name+"/"+tt.name, func(t *testing.T) {
				rec := &recorder{Limiter: memory(t, core.Policy{Limit: 10, Window: time.Minute}, core.NewManualClock(start))}
				var opts []connectlimit.Option
				if tt.key != nil {
					opts = append(opts, connectlimit.WithKey(tt.key))
				}
				s := newServer(t, connectlimit.NewInterceptor(rec, opts...))
				if _, err := sayCall(s.say(proto.opts), "hi", tt.hdr...); err != nil {
					t.Fatal(err)
				}
				if got := rec.seen(); !slices.Equal(got, []string{tt.want}) {
					t.Errorf("keys %q, want %q", got, tt.want)
				}
			})
		}
		t.Run(proto.name+"/api key", func(t *testing.T) {
			rec := &recorder{Limiter: memory(t, core.Policy{Limit: 10, Window: time.Minute}, core.NewManualClock(start))}
			s := newServer(t, connectlimit.NewInterceptor(rec, connectlimit.WithKey(keyfunc.Header("X-API-Key", []byte("secret")))))
			for _, k := range []string{"k1", "k1", "k2"} {
				// gRPC sends header names lowercase; the Connect protocol
				// as given.
				if _, err := sayCall(s.say(proto.opts), "hi", "x-api-key", k); err != nil {
					t.Fatal(err)
				}
			}
			got := rec.seen()
			if len(got) != 3 || got[0] != got[1] || got[0] == got[2] || strings.Contains(got[0], "k1") {
				t.Errorf("keys %q: want the same hashed key twice, then another", got)
			}
		})
	}
}

// WithCountIf counts only the calls whose code it accepts, and is given 0
// for a success, the handler's code for a connect error and Unknown for
// any other error.
func TestCountIf(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			var mu sync.Mutex
			var codes []connect.Code
			s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Name: "login", Limit: 2, Window: time.Minute}, clock),
				connectlimit.WithClock(clock),
				connectlimit.WithCountIf(func(c connect.Code) bool {
					mu.Lock()
					codes = append(codes, c)
					mu.Unlock()
					return c == connect.CodeUnauthenticated
				})))
			c := s.say(proto.opts)
			for _, msg := range []string{"ok", "ok", "ok", "code:2", "code:5", "code:16", "ok", "code:16"} {
				_, err := sayCall(c, msg)
				if got := readRefusalCode(err); got == connect.CodeResourceExhausted {
					t.Fatalf("%s refused before two failures were counted", msg)
				}
			}
			_, err := sayCall(c, "ok")
			checkRefusal(t, "after two counted failures", err, refusal{code: connect.CodeResourceExhausted, retry: 30, quota: []string{"policy:login"},
				meta: map[string][]string{"Ratelimit": {`"login";r=0;t=30`}, "Ratelimit-Policy": {`"login";q=2;w=60`}, "Retry-After": {"30"}}})
			mu.Lock()
			defer mu.Unlock()
			want := []connect.Code{0, 0, 0, connect.CodeUnknown, connect.CodeNotFound, connect.CodeUnauthenticated, 0, connect.CodeUnauthenticated}
			if !slices.Equal(codes, want) {
				t.Errorf("count-if given %v, want %v", codes, want)
			}
		})
	}
}

func readRefusalCode(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// Skipped calls are served without being counted or getting rate headers;
// in a dry run a denied call is served, reported, with r=0 and no
// Retry-After.
func TestSkipAndDryRun(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			type report struct {
				procedure string
				allowed   bool
			}
			var mu sync.Mutex
			var reports []report
			s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Name: "try", Limit: 1, Window: time.Minute}, clock),
				connectlimit.WithSkip(func(_ context.Context, p string) bool { return p == uploadProc }),
				connectlimit.WithDryRun(func(_ context.Context, p string, d core.Decision) {
					mu.Lock()
					reports = append(reports, report{p, d.Allowed})
					mu.Unlock()
				})))
			for i := range 3 {
				res, err := uploadCall(s.upload(proto.opts), 1)
				if err != nil {
					t.Fatalf("skipped stream %d: %v", i+1, err)
				}
				checkHeaders(t, "skipped stream", rateHeaders(res.Header()), nil)
			}
			for i, want := range []string{`"try";r=0;t=60`, `"try";r=0;t=60`} {
				res, err := sayCall(s.say(proto.opts), "hi")
				if err != nil {
					t.Fatalf("dry run call %d: %v", i+1, err)
				}
				checkHeaders(t, fmt.Sprint("dry run call ", i+1), rateHeaders(res.Header()),
					map[string][]string{"Ratelimit": {want}, "Ratelimit-Policy": {`"try";q=1;w=60`}})
			}
			mu.Lock()
			defer mu.Unlock()
			if want := []report{{sayProc, false}}; !slices.Equal(reports, want) {
				t.Errorf("dry run reports %v, want %v", reports, want)
			}
		})
	}
}

// On a client the interceptor does nothing: its unary calls and streams
// are neither limited nor counted.
func TestClientPassThrough(t *testing.T) {
	rec := &recorder{Limiter: memory(t, core.Policy{Limit: 1, Window: time.Minute}, core.NewManualClock(start))}
	s := newServer(t, connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc { return next }))
	opts := []connect.ClientOption{connect.WithInterceptors(connectlimit.NewInterceptor(rec))}
	for range 3 {
		if _, err := sayCall(s.say(opts), "hi"); err != nil {
			t.Fatal(err)
		}
		if _, err := uploadCall(s.upload(opts), 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.seen(); len(got) != 0 {
		t.Errorf("client calls were counted under %q", got)
	}
}

// Parallel calls over one limit: exactly the limit is served.
func TestConcurrent(t *testing.T) {
	const callers, limit = 24, 5
	clock := core.NewManualClock(start)
	s := newServer(t, connectlimit.NewInterceptor(memory(t, core.Policy{Limit: limit, Window: time.Minute}, clock)))
	c := s.say([]connect.ClientOption{connect.WithGRPC()})
	var served, refused atomic.Int64
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-ready
			_, err := sayCall(c, "hi")
			switch connect.CodeOf(err) {
			case connect.CodeResourceExhausted:
				refused.Add(1)
			default:
				if err != nil {
					t.Error(err)
				}
				served.Add(1)
			}
		})
	}
	close(ready)
	wg.Wait()
	if served.Load() != limit || refused.Load() != callers-limit || s.calls.Load() != limit {
		t.Errorf("served %d, refused %d, handler called %d; want %d, %d, %d", served.Load(), refused.Load(), s.calls.Load(), limit, callers-limit, limit)
	}
}

// A nil option and a nil clock panic with the message every constructor
// of ratekit gives them.
func TestNewInterceptorMessages(t *testing.T) {
	m := memory(t, core.Policy{Limit: 1, Window: time.Minute}, core.NewManualClock(start))
	for _, tt := range []struct {
		opts []connectlimit.Option
		want string
	}{
		{[]connectlimit.Option{nil}, "connectlimit: NewInterceptor: option 1 is nil"},
		{[]connectlimit.Option{connectlimit.WithPerMessage(), nil}, "connectlimit: NewInterceptor: option 2 is nil"},
		{[]connectlimit.Option{connectlimit.WithClock(nil)}, "connectlimit: NewInterceptor: WithClock(nil): a clock is required"},
		{[]connectlimit.Option{connectlimit.WithKey(nil)}, "connectlimit: NewInterceptor: WithKey(nil): a function is required"},
		{[]connectlimit.Option{connectlimit.WithCost(nil)}, "connectlimit: NewInterceptor: WithCost(nil): a function is required"},
		{[]connectlimit.Option{connectlimit.WithProcedureFunc(nil)}, "connectlimit: NewInterceptor: WithProcedureFunc(nil): a function is required"},
		{[]connectlimit.Option{connectlimit.WithDryRun(nil)}, "connectlimit: NewInterceptor: WithDryRun(nil): a function is required"},
		{[]connectlimit.Option{connectlimit.WithClock(core.SystemClock{}), connectlimit.WithClock(nil)}, "connectlimit: NewInterceptor: WithClock(nil): a clock is required"},
	} {
		got := func() (p any) {
			defer func() { p = recover() }()
			connectlimit.NewInterceptor(m, tt.opts...)
			return nil
		}()
		if err, ok := got.(error); !ok || err.Error() != tt.want {
			t.Errorf("NewInterceptor panicked with %v, want %q", got, tt.want)
		}
	}
}

// A configuration mistake panics at construction, with the package's name.
func TestNewInterceptorPanics(t *testing.T) {
	clock := core.NewManualClock(start)
	m := memory(t, core.Policy{Limit: 1, Window: time.Minute}, clock)
	for _, tt := range []struct {
		name string
		l    core.Limiter
		opts []connectlimit.Option
	}{
		{"nil limiter", nil, nil},
		{"nil option", m, []connectlimit.Option{nil}},
		{"malformed procedure", m, []connectlimit.Option{connectlimit.WithProcedures(map[string]core.Limiter{"test.v1.Echo/Say": m})}},
		{"nil procedure limiter", m, []connectlimit.Option{connectlimit.WithProcedures(map[string]core.Limiter{sayProc: nil})}},
		{"fallback nil", m, []connectlimit.Option{connectlimit.WithErrorPolicy(core.Fallback(nil))}},
		{"count-if without refunds", down{}, []connectlimit.Option{connectlimit.WithCountIf(func(connect.Code) bool { return true })}},
		{"nil clock", m, []connectlimit.Option{connectlimit.WithClock(nil)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				err, ok := r.(error)
				if !ok || !strings.HasPrefix(err.Error(), "connectlimit: NewInterceptor: ") {
					t.Errorf("panicked with %v, want an error from connectlimit: NewInterceptor", r)
				}
			}()
			connectlimit.NewInterceptor(tt.l, tt.opts...)
		})
	}
}
