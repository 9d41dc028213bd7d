package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// unaryServer serves with l and opts as its only unary interceptor.
func unaryServer(t *testing.T, l core.Limiter, opts ...grpclimit.Option) (*grpc.ClientConn, *echo) {
	t.Helper()
	return serve(t, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(l, opts...)))
}

// A denied unary call is ResourceExhausted with RetryInfo and QuotaFailure
// details, and the handler is not called; allowed and denied calls carry
// the rate header metadata, the values the HTTP adapters write.
func TestUnaryDenied(t *testing.T) {
	clock := core.NewManualClock(start)
	conn, svc := unaryServer(t, memory(t, core.Policy{Name: "api", Limit: 2, Window: 20 * time.Second}, clock))
	for i, want := range []string{`"api";r=1;t=10`, `"api";r=0;t=20`} {
		got, md, err := say(t, conn, "hi")
		if err != nil || got != "hi" {
			t.Fatalf("call %d: %q, %v", i+1, got, err)
		}
		checkMD(t, fmt.Sprintf("call %d", i+1), md, map[string]string{
			"ratelimit-policy": `"api";q=2;w=20`, "ratelimit": want, "retry-after": "",
		})
	}
	_, md, err := say(t, conn, "hi")
	checkRefusal(t, "third call", err, refusal{codes.ResourceExhausted, 10, "policy:api"})
	if msg := status.Convert(err).Message(); msg != "Try again in 10 seconds." {
		t.Errorf("third call: message %q", msg)
	}
	checkMD(t, "third call", md, map[string]string{
		"ratelimit-policy": `"api";q=2;w=20`, "ratelimit": `"api";r=0;t=10`, "retry-after": "10",
	})
	if n := svc.calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2", n)
	}
	clock.Advance(10 * time.Second)
	if _, md, err := say(t, conn, "hi"); err != nil {
		t.Errorf("after the RetryInfo's delay: %v", err)
	} else {
		checkMD(t, "after the delay", md, map[string]string{"ratelimit": `"api";r=0;t=20`})
	}
}

// A refusal that retrying later can help carries grpc-retry-pushback-ms in
// its trailer, so that gRPC's own client retries wait the Retry-After; a
// cost too high, which retrying cannot help, does not.
func TestPushback(t *testing.T) {
	clock := core.NewManualClock(start)
	conn, _ := unaryServer(t, memory(t, core.Policy{Name: "api", Limit: 1, Window: 20 * time.Second}, clock))
	call := func() metadata.MD {
		var trailer metadata.MD
		out := new(wrapperspb.StringValue)
		_ = conn.Invoke(context.Background(), methodSay, wrapperspb.String("hi"), out, grpc.Trailer(&trailer))
		return trailer
	}
	if tr := call(); len(tr.Get("grpc-retry-pushback-ms")) != 0 {
		t.Errorf("allowed call: trailer %v", tr)
	}
	if got := call().Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "20000" {
		t.Errorf("denied call: grpc-retry-pushback-ms %q, want [20000]", got)
	}

	costly, _ := unaryServer(t, memory(t, core.Policy{Limit: 1, Window: time.Second}, clock),
		grpclimit.WithCost(func(context.Context, string) (int64, error) { return 2, nil }))
	var trailer metadata.MD
	err := costly.Invoke(context.Background(), methodSay, wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted || len(trailer.Get("grpc-retry-pushback-ms")) != 0 {
		t.Errorf("cost too high: %v, trailer %v; want ResourceExhausted and no pushback", err, trailer)
	}
}

// openChat starts a Chat stream.
func openChat(t *testing.T, conn *grpc.ClientConn) grpc.ClientStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := conn.NewStream(ctx, &echoDesc.Streams[0], methodChat)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// exchange sends value on s and returns the answer.
func exchange(s grpc.ClientStream, value string) (string, error) {
	if err := s.SendMsg(wrapperspb.String(value)); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	out := new(wrapperspb.StringValue)
	err := s.RecvMsg(out)
	return out.GetValue(), err
}

// A stream is one call, checked when it starts: its messages are free, and
// a refused stream never reaches the handler.
func TestStreamStart(t *testing.T) {
	clock := core.NewManualClock(start)
	l := memory(t, core.Policy{Name: "streams", Limit: 1, Window: 10 * time.Second}, clock)
	conn, svc := serve(t, grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(l)))

	s := openChat(t, conn)
	for i := range 5 {
		if got, err := exchange(s, fmt.Sprint(i)); err != nil || got != fmt.Sprint(i) {
			t.Fatalf("message %d: %q, %v", i, got, err)
		}
	}
	md, err := s.Header()
	if err != nil {
		t.Fatal(err)
	}
	checkMD(t, "first stream", md, map[string]string{"ratelimit-policy": `"streams";q=1;w=10`, "ratelimit": `"streams";r=0;t=10`})
	s.CloseSend()
	if err := s.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
		t.Fatalf("first stream ended with %v, want io.EOF", err)
	}

	s = openChat(t, conn)
	_, err = exchange(s, "x")
	checkRefusal(t, "second stream", err, refusal{codes.ResourceExhausted, 10, "policy:streams"})
	md, _ = s.Header()
	checkMD(t, "second stream", md, map[string]string{"ratelimit": `"streams";r=0;t=10`, "retry-after": "10"})
	if n := svc.calls.Load(); n != 1 {
		t.Errorf("%d streams reached the handler, want 1", n)
	}
}

// With WithPerMessage every received message is charged too; a refused
// message ends the stream with ResourceExhausted and its details, whatever
// the handler returns, and its rate metadata are in the trailer.
func TestStreamPerMessage(t *testing.T) {
	clock := core.NewManualClock(start)
	l := memory(t, core.Policy{Name: "chat", Limit: 3, Window: 30 * time.Second}, clock)
	conn, svc := serve(t, grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(l, grpclimit.WithPerMessage())))

	s := openChat(t, conn)
	for _, v := range []string{"a", "b"} {
		if got, err := exchange(s, v); err != nil || got != v {
			t.Fatalf("message %s: %q, %v", v, got, err)
		}
	}
	_, err := exchange(s, "c")
	checkRefusal(t, "third message", err, refusal{codes.ResourceExhausted, 10, "policy:chat"})
	md, _ := s.Header()
	checkMD(t, "header", md, map[string]string{"ratelimit": `"chat";r=2;t=10`, "retry-after": ""})
	checkMD(t, "trailer", s.Trailer(), map[string]string{
		"ratelimit-policy": `"chat";q=3;w=30`, "ratelimit": `"chat";r=0;t=10`, "retry-after": "10",
	})
	if n := svc.messages.Load(); n != 2 {
		t.Errorf("the handler received %d messages, want 2", n)
	}

	// The stream's start is refused now too.
	s = openChat(t, conn)
	_, err = exchange(s, "d")
	checkRefusal(t, "next stream", err, refusal{codes.ResourceExhausted, 10, "policy:chat"})
	if n := svc.calls.Load(); n != 1 {
		t.Errorf("%d streams reached the handler, want 1", n)
	}
}

// Methods may have limits of their own, from a map or a function; the
// others share the default limiter.
func TestPerMethod(t *testing.T) {
	clock := core.NewManualClock(start)
	def := memory(t, core.Policy{Name: "api", Limit: 2, Window: 20 * time.Second}, clock)
	other := memory(t, core.Policy{Name: "other", Limit: 1, Window: 10 * time.Second}, clock)
	chat := memory(t, core.Policy{Name: "chat", Limit: 1, Window: 30 * time.Second}, clock)
	var (
		mu    sync.Mutex
		asked []string
	)
	opts := []grpclimit.Option{
		grpclimit.WithMethods(map[string]core.Limiter{methodOther: other}),
		grpclimit.WithMethodFunc(func(m string) core.Limiter {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, m)
			if m == methodChat {
				return chat
			}
			return nil
		}),
	}
	conn, _ := serve(t,
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(def, opts[0])),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(def, opts...)))

	ctx := context.Background()
	if _, md, err := unary(ctx, conn, methodOther, "x"); err != nil {
		t.Fatalf("Other: %v", err)
	} else {
		checkMD(t, "Other", md, map[string]string{"ratelimit-policy": `"other";q=1;w=10`})
	}
	_, _, err := unary(ctx, conn, methodOther, "x")
	checkRefusal(t, "second Other", err, refusal{codes.ResourceExhausted, 10, "policy:other"})
	for i := range 2 {
		if _, md, err := say(t, conn, "x"); err != nil {
			t.Fatalf("Say %d: %v", i+1, err)
		} else {
			checkMD(t, "Say", md, map[string]string{"ratelimit-policy": `"api";q=2;w=20`})
		}
	}
	if _, err := exchange(openChat(t, conn), "x"); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	_, err = exchange(openChat(t, conn), "x")
	checkRefusal(t, "second Chat", err, refusal{codes.ResourceExhausted, 30, "policy:chat"})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, []string{methodChat}) {
		t.Errorf("WithMethodFunc asked for %q, want Chat once", asked)
	}
}

// Skipped calls are served without being counted and without metadata.
func TestSkip(t *testing.T) {
	clock := core.NewManualClock(start)
	conn, _ := unaryServer(t, memory(t, core.Policy{Limit: 1, Window: time.Minute}, clock),
		grpclimit.WithSkip(func(_ context.Context, m string) bool { return m == methodOther }))
	for i := range 3 {
		_, md, err := unary(context.Background(), conn, methodOther, "x")
		if err != nil {
			t.Fatalf("skipped call %d: %v", i+1, err)
		}
		checkMD(t, "skipped call", md, map[string]string{"ratelimit": "", "ratelimit-policy": ""})
	}
	if _, _, err := say(t, conn, "x"); err != nil {
		t.Fatalf("Say: %v", err)
	}
	_, _, err := say(t, conn, "x")
	checkRefusal(t, "second Say", err, refusal{codes.ResourceExhausted, 60, "policy:default"})
}

// A dry run serves denied calls, reports them, and sets the metadata
// without retry-after.
func TestDryRun(t *testing.T) {
	clock := core.NewManualClock(start)
	var mu sync.Mutex
	var denied []string
	conn, svc := unaryServer(t, memory(t, core.Policy{Name: "candidate", Limit: 1, Window: time.Minute}, clock),
		grpclimit.WithDryRun(func(_ context.Context, m string, d core.Decision) {
			mu.Lock()
			defer mu.Unlock()
			denied = append(denied, fmt.Sprintf("%s allowed=%v retry=%v", m, d.Allowed, d.RetryAfter))
		}))
	for range 2 {
		if _, _, err := say(t, conn, "x"); err != nil {
			t.Fatal(err)
		}
	}
	_, md, err := say(t, conn, "x")
	if err != nil {
		t.Fatal(err)
	}
	checkMD(t, "denied in a dry run", md, map[string]string{"ratelimit": `"candidate";r=0;t=60`, "retry-after": ""})
	mu.Lock()
	defer mu.Unlock()
	want := []string{methodSay + " allowed=false retry=1m0s", methodSay + " allowed=false retry=1m0s"}
	if !slices.Equal(denied, want) {
		t.Errorf("dry-run reports %q, want %q", denied, want)
	}
	if n := svc.calls.Load(); n != 3 {
		t.Errorf("handler called %d times, want 3", n)
	}
}

// With WithCountIf, only the calls that end in an accepted code stay
// counted.
func TestCountIf(t *testing.T) {
	clock := core.NewManualClock(start)
	unauthenticated := func(c codes.Code) bool { return c == codes.Unauthenticated }
	conn, _ := unaryServer(t, memory(t, core.Policy{Name: "login", Limit: 2, Window: time.Hour}, clock),
		grpclimit.WithCountIf(unauthenticated), grpclimit.WithClock(clock))
	for i, v := range []string{"ok", "ok", "code:5", "ok", "code:16", "ok", "code:16"} {
		_, _, err := say(t, conn, v)
		if want := unaryCode(v); status.Code(err) != want {
			t.Fatalf("call %d (%s): %v, want %v", i+1, v, err, want)
		}
	}
	_, _, err := say(t, conn, "ok")
	checkRefusal(t, "after two Unauthenticated", err, refusal{codes.ResourceExhausted, 1800, "policy:login"})
}

// unaryCode is the code Say answers value with when served.
func unaryCode(value string) codes.Code {
	var n int
	if _, err := fmt.Sscanf(value, "code:%d", &n); err == nil {
		return codes.Code(n)
	}
	return codes.OK
}

// With WithCountIf and WithPerMessage, a stream's messages are judged by
// the code the stream ends with.
func TestCountIfStream(t *testing.T) {
	clock := core.NewManualClock(start)
	l := memory(t, core.Policy{Name: "upload", Limit: 3, Window: time.Hour}, clock)
	conn, _ := serve(t, grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(l,
		grpclimit.WithPerMessage(), grpclimit.WithCountIf(grpclimit.Failures), grpclimit.WithClock(clock))))
	// Two streams of three units each that end OK: all given back.
	for i := range 2 {
		s := openChat(t, conn)
		for _, v := range []string{"a", "b"} {
			if _, err := exchange(s, v); err != nil {
				t.Fatalf("stream %d, message %s: %v", i+1, v, err)
			}
		}
		s.CloseSend()
		if err := s.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
			t.Fatalf("stream %d ended with %v", i+1, err)
		}
	}
	// A failed stream keeps its start and its message counted: 2 of 3.
	_, err := exchange(openChat(t, conn), "code:16")
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("failing stream: %v", err)
	}
	s := openChat(t, conn)
	_, err = exchange(s, "a")
	checkRefusal(t, "a message over the limit", err, refusal{codes.ResourceExhausted, 1200, "policy:upload"})
}

// Failures accepts every code but OK.
func TestFailures(t *testing.T) {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if got := grpclimit.Failures(c); got != (c != codes.OK) {
			t.Errorf("Failures(%v) = %v", c, got)
		}
	}
}

// When the limiter fails, the error policy decides: fail open serves
// without metadata, fail closed answers Unavailable with a RetryInfo of 1
// second, a fallback limiter decides instead. The error reaches the hook.
func TestErrorPolicy(t *testing.T) {
	clock := core.NewManualClock(start)
	t.Run("fail closed", func(t *testing.T) {
		var h hookLog
		conn, svc := unaryServer(t, down{}, grpclimit.WithErrorPolicy(core.FailClosed()), grpclimit.WithErrorHook(h.hook))
		_, md, err := say(t, conn, "x")
		checkRefusal(t, "fail closed", err, refusal{codes.Unavailable, 1, ""})
		checkMD(t, "fail closed", md, map[string]string{"ratelimit": "", "retry-after": "1"})
		if n := svc.calls.Load(); n != 0 {
			t.Errorf("handler called %d times", n)
		}
		if got := h.got(); len(got) != 1 || !strings.HasPrefix(got[0], methodSay+": ") || !strings.Contains(got[0], errDown.Error()) {
			t.Errorf("error hook got %q", got)
		}
	})
	t.Run("fail open", func(t *testing.T) {
		var h hookLog
		conn, _ := unaryServer(t, down{}, grpclimit.WithErrorHook(h.hook))
		_, md, err := say(t, conn, "x")
		if err != nil {
			t.Fatalf("fail open: %v", err)
		}
		checkMD(t, "fail open", md, map[string]string{"ratelimit": "", "ratelimit-policy": ""})
		if got := h.got(); len(got) != 1 {
			t.Errorf("error hook got %q", got)
		}
	})
	t.Run("fallback", func(t *testing.T) {
		local := memory(t, core.Policy{Name: "local", Limit: 1, Window: time.Minute}, clock)
		conn, _ := unaryServer(t, down{}, grpclimit.WithErrorPolicy(core.Fallback(local)))
		if _, md, err := say(t, conn, "x"); err != nil {
			t.Fatal(err)
		} else {
			checkMD(t, "fallback", md, map[string]string{"ratelimit": `"local";r=0;t=60`})
		}
		_, _, err := say(t, conn, "x")
		checkRefusal(t, "fallback denies", err, refusal{codes.ResourceExhausted, 60, "policy:local"})
	})
}

// A nil option and a nil clock panic with the message every constructor
// of ratekit gives them.
func TestConstructorMessages(t *testing.T) {
	l := memory(t, core.Policy{Limit: 1, Window: time.Minute}, core.NewManualClock(start))
	for _, tt := range []struct {
		opts []grpclimit.Option
		want string
	}{
		{[]grpclimit.Option{nil}, "option 1 is nil"},
		{[]grpclimit.Option{grpclimit.WithPerMessage(), nil}, "option 2 is nil"},
		{[]grpclimit.Option{grpclimit.WithClock(nil)}, "WithClock(nil): a clock is required"},
		{[]grpclimit.Option{grpclimit.WithKey(nil)}, "WithKey(nil): a function is required"},
		{[]grpclimit.Option{grpclimit.WithCost(nil)}, "WithCost(nil): a function is required"},
		{[]grpclimit.Option{grpclimit.WithSkip(nil)}, "WithSkip(nil): a function is required"},
		{[]grpclimit.Option{grpclimit.WithDryRun(nil)}, "WithDryRun(nil): a function is required"},
		{[]grpclimit.Option{grpclimit.WithCountIf(nil)}, "WithCountIf(nil): a function is required"},
		{[]grpclimit.Option{grpclimit.WithErrorHook(nil)}, "WithErrorHook(nil): a function is required"},
		{[]grpclimit.Option{grpclimit.WithMethodFunc(nil)}, "WithMethodFunc(nil): a function is required"},
		{[]grpclimit.Option{grpclimit.WithClock(core.SystemClock{}), grpclimit.WithClock(nil)}, "WithClock(nil): a clock is required"},
	} {
		for who, build := range map[string]func(){
			"grpclimit: UnaryServerInterceptor":  func() { grpclimit.UnaryServerInterceptor(l, tt.opts...) },
			"grpclimit: StreamServerInterceptor": func() { grpclimit.StreamServerInterceptor(l, tt.opts...) },
		} {
			got := func() (p any) {
				defer func() { p = recover() }()
				build()
				return nil
			}()
			want := who + ": " + tt.want
			if err, ok := got.(error); !ok || err.Error() != want {
				t.Errorf("%s panicked with %v, want %q", who, got, want)
			}
		}
	}
}

// The call's own faults are InvalidArgument, without details, and never
// reach the handler, whatever the error policy; a cost above the policy's
// capacity is ResourceExhausted without a RetryInfo.
func TestCallerErrors(t *testing.T) {
	clock := core.NewManualClock(start)
	invalidKey := func(keyfunc.Request) (string, error) {
		return "", fmt.Errorf("tenant %q: %w", "a\x00b", keyfunc.ErrInvalidKey)
	}
	noRate := map[string]string{"ratelimit": "", "ratelimit-policy": "", "retry-after": ""}
	for _, tt := range []struct {
		name  string
		opt   grpclimit.Option
		want  refusal
		hooks int
		md    map[string]string
	}{
		{"invalid key", grpclimit.WithKey(invalidKey), refusal{codes.InvalidArgument, 0, ""}, 1, noRate},
		{"missing key", grpclimit.WithKey(keyfunc.Header("X-API-Key", []byte("secret"))), refusal{codes.InvalidArgument, 0, ""}, 1, noRate},
		{"cost 0", grpclimit.WithCost(func(context.Context, string) (int64, error) { return 0, nil }), refusal{codes.InvalidArgument, 0, ""}, 1, noRate},
		{"cost error", grpclimit.WithCost(func(context.Context, string) (int64, error) { return 0, errors.New("no size") }), refusal{codes.InvalidArgument, 0, ""}, 1, noRate},
		{"cost too high", grpclimit.WithCost(func(context.Context, string) (int64, error) { return 5, nil }), refusal{codes.ResourceExhausted, 0, "policy:api"}, 1,
			// The key's rate metadata as it is: nothing was counted.
			map[string]string{"ratelimit": `"api";r=2;t=0`, "ratelimit-policy": `"api";q=2;w=60`, "retry-after": ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var h hookLog
			conn, svc := unaryServer(t, memory(t, core.Policy{Name: "api", Limit: 2, Window: time.Minute}, clock),
				tt.opt, grpclimit.WithErrorPolicy(core.FailOpen()), grpclimit.WithErrorHook(h.hook))
			_, md, err := say(t, conn, "x")
			checkRefusal(t, tt.name, err, tt.want)
			checkMD(t, tt.name, md, tt.md)
			if n := svc.calls.Load(); n != 0 {
				t.Errorf("handler called %d times", n)
			}
			if got := h.got(); len(got) != tt.hooks {
				t.Errorf("error hook got %q, want %d errors", got, tt.hooks)
			}
		})
	}
}

// A key read from metadata: a missing one is refused, never keyed by the
// peer's address, as in HTTP.
func TestMetadataKey(t *testing.T) {
	clock := core.NewManualClock(start)
	conn, _ := unaryServer(t, memory(t, core.Policy{Limit: 1, Window: time.Minute}, clock),
		grpclimit.WithKey(keyfunc.Header("X-API-Key", []byte("secret"))))
	withKey := func(k string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", k)
	}
	for _, tt := range []struct {
		ctx  context.Context
		want codes.Code
	}{
		{withKey("k1"), codes.OK},
		{withKey("k2"), codes.OK},
		{withKey("k1"), codes.ResourceExhausted},
		{context.Background(), codes.InvalidArgument}, // not the peer's address
		{context.Background(), codes.InvalidArgument},
		{withKey("k2"), codes.ResourceExhausted},
	} {
		_, _, err := unary(tt.ctx, conn, methodSay, "x")
		if status.Code(err) != tt.want {
			md, _ := metadata.FromOutgoingContext(tt.ctx)
			t.Errorf("call with %v: %v, want %v", md, err, tt.want)
		}
	}
}

// x-forwarded-for is read only when the peer is a trusted proxy, from the
// right; an untrusted peer sending it is keyed by its own address.
func TestForwardedFor(t *testing.T) {
	xff := func(v string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", v)
	}
	for _, tt := range []struct {
		name    string
		trusted string
		want    []codes.Code
	}{
		// 127.0.0.1, the test's peer, is the proxy: each client its key,
		// and the client's own entry on the left is never reached.
		{"trusted proxy", "127.0.0.0/8", []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
		// The peer is not a proxy: one key, its own address.
		{"untrusted peer", "10.0.0.0/8", []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ip, err := keyfunc.ClientIP(keyfunc.TrustProxies(netip.MustParsePrefix(tt.trusted)))
			if err != nil {
				t.Fatal(err)
			}
			conn, _ := unaryServer(t, memory(t, core.Policy{Limit: 1, Window: time.Minute}, core.NewManualClock(start)), grpclimit.WithKey(ip))
			for i, v := range []string{"198.51.100.1", "198.51.100.2", "203.0.113.9, 198.51.100.1"} {
				_, _, err := unary(xff(v), conn, methodSay, "x")
				if status.Code(err) != tt.want[i] {
					t.Errorf("x-forwarded-for %q: %v, want %v", v, err, tt.want[i])
				}
			}
		})
	}
}

// The interceptor chains with go-grpc-middleware v2's: logging sees the
// refusal's code, recovery turns a panicking handler into Internal (the
// call stays counted), and the details survive the chain.
func TestMiddlewareChain(t *testing.T) {
	clock := core.NewManualClock(start)
	var mu sync.Mutex
	var logged []string
	logger := logging.LoggerFunc(func(_ context.Context, _ logging.Level, msg string, fields ...any) {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "grpc.code" {
				logged = append(logged, fmt.Sprint(fields[i+1]))
			}
		}
	})
	conn, _ := serve(t, grpc.ChainUnaryInterceptor(
		logging.UnaryServerInterceptor(logger, logging.WithLogOnEvents(logging.FinishCall)),
		recovery.UnaryServerInterceptor(recovery.WithRecoveryHandler(func(any) error {
			return status.Error(codes.Internal, "internal error") // no panic text for the client
		})),
		grpclimit.UnaryServerInterceptor(memory(t, core.Policy{Name: "api", Limit: 2, Window: 20 * time.Second}, clock)),
	))
	if _, _, err := say(t, conn, "panic"); status.Code(err) != codes.Internal {
		t.Fatalf("panicking handler: %v, want Internal", err)
	}
	if _, md, err := say(t, conn, "x"); err != nil {
		t.Fatal(err)
	} else {
		checkMD(t, "second call", md, map[string]string{"ratelimit": `"api";r=0;t=20`})
	}
	_, _, err := say(t, conn, "x")
	checkRefusal(t, "third call", err, refusal{codes.ResourceExhausted, 10, "policy:api"})
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"Internal", "OK", "ResourceExhausted"}; !slices.Equal(logged, want) {
		t.Errorf("logged codes %q, want %q", logged, want)
	}
}

// A leaky bucket's call whose context ends before its slot is refused
// with Canceled or DeadlineExceeded, with the rate metadata of its
// decision; a call without a peer address has no key and is
// InvalidArgument, without metadata. The interceptor is called directly
// here, as a gRPC server calls it, with a server stream that records the
// header metadata.
func TestDirectCalls(t *testing.T) {
	clock := core.NewManualClock(start)
	l := memory(t, core.Policy{Name: "queue", Algorithm: core.LeakyBucket, Limit: 10, Window: 10 * time.Second}, clock)
	intercept := grpclimit.UnaryServerInterceptor(l)
	info := &grpc.UnaryServerInfo{FullMethod: methodSay}
	withPeer := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}})
	canceled, cancel := context.WithCancel(withPeer)
	cancel()
	expired, cancel := context.WithDeadline(withPeer, time.Now().Add(-time.Second))
	defer cancel()
	for _, tt := range []struct {
		name   string
		ctx    context.Context
		want   codes.Code
		policy string // the ratelimit-policy metadata
	}{
		{"first, no delay", withPeer, codes.OK, `"queue";q=10;w=10`},
		{"canceled while queued", canceled, codes.Canceled, `"queue";q=10;w=10`},
		{"deadline passed while queued", expired, codes.DeadlineExceeded, `"queue";q=10;w=10`},
		{"no peer", context.Background(), codes.InvalidArgument, ""},
	} {
		stream := &recordStream{}
		called := false
		_, err := intercept(grpc.NewContextWithServerTransportStream(tt.ctx, stream), "req", info, func(context.Context, any) (any, error) {
			called = true
			return "resp", nil
		})
		if status.Code(err) != tt.want || called != (tt.want == codes.OK) {
			t.Errorf("%s: %v, handler called %v; want %v", tt.name, err, called, tt.want)
		}
		checkMD(t, tt.name, stream.header, map[string]string{"ratelimit-policy": tt.policy, "retry-after": ""})
	}
}

// recordStream is a grpc.ServerTransportStream that keeps the header
// metadata set on it.
type recordStream struct{ header metadata.MD }

func (s *recordStream) Method() string { return methodSay }
func (s *recordStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *recordStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *recordStream) SetTrailer(metadata.MD) error    { return nil }

// Parallel calls on one key: exactly the limit is served, and methods
// first met at once share one limiter from WithMethodFunc.
func TestConcurrentCalls(t *testing.T) {
	clock := core.NewManualClock(start)
	perMethod := memory(t, core.Policy{Limit: 10, Window: time.Minute}, clock)
	conn, svc := unaryServer(t, memory(t, core.Policy{Limit: 1, Window: time.Minute}, clock),
		grpclimit.WithMethodFunc(func(string) core.Limiter { return perMethod }))
	const goroutines, calls = 8, 4
	var (
		wg    sync.WaitGroup
		ready = make(chan struct{})
		mu    sync.Mutex
		codeN = map[codes.Code]int{}
	)
	for range goroutines {
		wg.Go(func() {
			<-ready
			for range calls {
				_, _, err := say(t, conn, "x")
				mu.Lock()
				codeN[status.Code(err)]++
				mu.Unlock()
			}
		})
	}
	close(ready)
	wg.Wait()
	if codeN[codes.OK] != 10 || codeN[codes.ResourceExhausted] != goroutines*calls-10 || svc.calls.Load() != 10 {
		t.Errorf("codes %v, handler calls %d; want 10 OK and %d ResourceExhausted", codeN, svc.calls.Load(), goroutines*calls-10)
	}
}

// A configuration mistake panics when the interceptor is built, naming
// the constructor.
func TestConstructorPanics(t *testing.T) {
	clock := core.NewManualClock(start)
	l := memory(t, core.Policy{Limit: 1, Window: time.Minute}, clock)
	for _, tt := range []struct {
		name string
		l    core.Limiter
		opts []grpclimit.Option
	}{
		{"nil limiter", nil, nil},
		{"nil option", l, []grpclimit.Option{nil}},
		{"method name", l, []grpclimit.Option{grpclimit.WithMethods(map[string]core.Limiter{"Say": l})}},
		{"nil method limiter", l, []grpclimit.Option{grpclimit.WithMethods(map[string]core.Limiter{methodSay: nil})}},
		{"count-if without refunds", down{}, []grpclimit.Option{grpclimit.WithCountIf(grpclimit.Failures)}},
		{"fallback nil", l, []grpclimit.Option{grpclimit.WithErrorPolicy(core.Fallback(nil))}},
		{"nil clock", l, []grpclimit.Option{grpclimit.WithClock(nil)}},
	} {
		for who, build := range map[string]func(){
			"grpclimit: UnaryServerInterceptor":  func() { grpclimit.UnaryServerInterceptor(tt.l, tt.opts...) },
			"grpclimit: StreamServerInterceptor": func() { grpclimit.StreamServerInterceptor(tt.l, tt.opts...) },
		} {
			got := func() (p any) {
				defer func() { p = recover() }()
				build()
				return nil
			}()
			err, ok := got.(error)
			if !ok || !strings.HasPrefix(err.Error(), who+": ") {
				t.Errorf("%s: %s panicked with %v, want an error starting %q", tt.name, who, got, who)
			}
		}
	}
}
