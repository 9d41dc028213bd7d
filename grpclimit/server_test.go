package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/core"
)

// The test service, test.Echo, is written by hand (there is no protoc
// here) with well-known types as messages:
//
//   - Say and Other (unary) answer the request's value; a value "code:N"
//     answers status code N instead, and "panic" panics.
//   - Chat (bidirectional) answers every message it receives, and ends
//     with status code N on a message "code:N"; when receiving fails with anything but io.EOF it ends with Internal, so
//     that a test can tell its status from the interceptor's.
const (
	methodSay   = "/test.Echo/Say"
	methodOther = "/test.Echo/Other"
	methodChat  = "/test.Echo/Chat"
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// echo is the service's implementation; it counts what reached it.
type echo struct {
	calls    atomic.Int64 // unary handler calls and streams started
	messages atomic.Int64 // stream messages received
}

func (s *echo) answer(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	s.calls.Add(1)
	v := in.GetValue()
	if v == "panic" {
		panic("test.Echo: asked to panic")
	}
	if n, ok := strings.CutPrefix(v, "code:"); ok {
		code, err := strconv.Atoi(n)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, "bad code")
		}
		return nil, status.Error(codes.Code(code), "as asked")
	}
	return wrapperspb.String(v), nil
}

func (s *echo) chat(stream grpc.ServerStream) error {
	s.calls.Add(1)
	for {
		in := new(wrapperspb.StringValue)
		if err := stream.RecvMsg(in); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return status.Error(codes.Internal, "chat: receive failed")
		}
		s.messages.Add(1)
		if n, ok := strings.CutPrefix(in.GetValue(), "code:"); ok {
			code, _ := strconv.Atoi(n)
			return status.Error(codes.Code(code), "as asked")
		}
		if err := stream.SendMsg(in); err != nil {
			return err
		}
	}
}

func unaryHandler(method string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*echo)
		if interceptor == nil {
			return s.answer(ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/" + method}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return s.answer(ctx, req.(*wrapperspb.StringValue))
		})
	}
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Say", Handler: unaryHandler("Say")},
		{MethodName: "Other", Handler: unaryHandler("Other")},
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Chat",
		Handler:       func(srv any, stream grpc.ServerStream) error { return srv.(*echo).chat(stream) },
		ServerStreams: true,
		ClientStreams: true,
	}},
}

// serve starts a grpc.Server with opts on a 127.0.0.1 listener and returns
// a client connection to it and the service.
func serve(t testing.TB, opts ...grpc.ServerOption) (*grpc.ClientConn, *echo) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	svc := &echo{}
	srv.RegisterService(&echoDesc, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, svc
}

// unary calls a unary method with value and returns the answer and the
// response header metadata.
func unary(ctx context.Context, conn *grpc.ClientConn, method, value string) (string, metadata.MD, error) {
	var header metadata.MD
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, method, wrapperspb.String(value), out, grpc.Header(&header))
	return out.GetValue(), header, err
}

// say calls Say with value from ctx's deadline-free background.
func say(t *testing.T, conn *grpc.ClientConn, value string) (string, metadata.MD, error) {
	t.Helper()
	return unary(context.Background(), conn, methodSay, value)
}

// memory returns a memory limiter of p on clock.
func memory(t testing.TB, p core.Policy, clock core.Clock) *core.Memory {
	t.Helper()
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// refusal is what a refused call's status must hold: its code, the
// RetryInfo's seconds (0: no RetryInfo), and the QuotaFailure's subject
// ("": no QuotaFailure).
type refusal struct {
	code    codes.Code
	retry   int64
	subject string
}

// checkRefusal decodes err's status and details and compares them with
// want; the QuotaFailure's description must be the status message.
func checkRefusal(t *testing.T, what string, err error, want refusal) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Errorf("%s: error %v is not a status", what, err)
		return
	}
	var got refusal
	got.code = st.Code()
	quotas := 0
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			delay := d.GetRetryDelay()
			if delay.GetNanos() != 0 {
				t.Errorf("%s: RetryInfo %v is not whole seconds", what, delay.AsDuration())
			}
			got.retry = delay.GetSeconds()
		case *errdetails.QuotaFailure:
			quotas++
			vs := d.GetViolations()
			if len(vs) != 1 {
				t.Errorf("%s: QuotaFailure has %d violations, want 1", what, len(vs))
				continue
			}
			got.subject = vs[0].GetSubject()
			if vs[0].GetDescription() != st.Message() {
				t.Errorf("%s: QuotaFailure description %q, want the status message %q", what, vs[0].GetDescription(), st.Message())
			}
		default:
			t.Errorf("%s: unexpected detail %T: %v", what, d, d)
		}
	}
	if got != want || quotas > 1 {
		t.Errorf("%s: status %v: got %+v (%d QuotaFailures), want %+v", what, st.Proto(), got, quotas, want)
	}
	if st.Message() == "" {
		t.Errorf("%s: empty status message", what)
	}
}

// checkMD compares the named keys of md with want; "" wants the key absent.
func checkMD(t *testing.T, what string, md metadata.MD, want map[string]string) {
	t.Helper()
	for k, w := range want {
		got := strings.Join(md.Get(k), ", ")
		if got != w {
			t.Errorf("%s: metadata %s = %q, want %q", what, k, got, w)
		}
	}
}

// down is a limiter whose store is unreachable; it cannot give units back.
type down struct{}

var errDown = errors.New("store unreachable")

func (down) AllowN(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errDown
}
func (down) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errDown
}
func (down) Reset(context.Context, string) error { return errDown }

// hookLog records what an error hook receives.
type hookLog struct {
	mu   sync.Mutex
	errs []string
}

func (h *hookLog) hook(_ context.Context, method string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, method+": "+err.Error())
}

func (h *hookLog) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.errs...)
}
