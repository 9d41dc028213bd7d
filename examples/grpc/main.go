// Command grpc runs a small gRPC service limited by grpclimit and a client
// that is told to wait, on 127.0.0.1, and prints what the client saw:
//
//	go run ./examples/grpc
//
// The service, greeter.Greeter, has two methods, limited per client
// address:
//
//   - Hello: 100 per minute ("api", the interceptor's default limiter).
//   - Report: expensive, so 2 per 4 seconds ("reports", a limit of its own
//     set with grpclimit.WithMethods), counted apart from Hello.
//
// The client calls Hello once and Report three times. The third Report is
// refused with ResourceExhausted; the client reads the google.rpc.RetryInfo
// detail, waits the delay it gives (2 seconds), and calls again, which
// succeeds. Each line shows the "ratelimit" header metadata of the answer.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
)

func main() {
	if err := run(os.Stdout, core.SystemClock{}, time.Sleep); err != nil {
		fmt.Fprintln(os.Stderr, "grpc:", err)
		os.Exit(1)
	}
}

// The policies: the default one, and Report's own.
var (
	api     = core.Policy{Name: "api", Limit: 100, Window: time.Minute}
	reports = core.Policy{Name: "reports", Limit: 2, Window: 4 * time.Second}
)

const (
	methodHello  = "/greeter.Greeter/Hello"
	methodReport = "/greeter.Greeter/Report"
)

// run starts the service with limiters reading clock, runs the client, whose
// waits are wait, and writes the transcript to out.
func run(out io.Writer, clock core.Clock, wait func(time.Duration)) error {
	srv, err := newServer(clock)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(lis)
	defer srv.Stop()
	fmt.Fprintf(out, "server: greeter.Greeter on 127.0.0.1, per client: Hello %v, Report %v\n", api, reports)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := &client{conn: conn, out: out, wait: wait}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.call(ctx, methodHello, "ana"); err != nil {
		return err
	}
	for range 3 {
		if err := c.call(ctx, methodReport, "ana"); err != nil {
			return err
		}
	}
	return nil
}

// newServer returns the service behind the rate-limiting interceptor.
func newServer(clock core.Clock) (*grpc.Server, error) {
	apiLimiter, err := core.New(api, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	reportLimiter, err := core.New(reports, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(apiLimiter,
		grpclimit.WithMethods(map[string]core.Limiter{methodReport: reportLimiter}),
	)))
	srv.RegisterService(&greeterDesc, &greeter{})
	return srv, nil
}

// greeter implements the service.
type greeter struct{ reports atomic.Int64 }

func (g *greeter) hello(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("hello, " + in.GetValue()), nil
}

func (g *greeter) report(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(fmt.Sprintf("report #%d for %s", g.reports.Add(1), in.GetValue())), nil
}

// greeterDesc is what protoc-gen-go-grpc would generate for
//
//	service Greeter {
//	  rpc Hello(google.protobuf.StringValue) returns (google.protobuf.StringValue);
//	  rpc Report(google.protobuf.StringValue) returns (google.protobuf.StringValue);
//	}
var greeterDesc = grpc.ServiceDesc{
	ServiceName: "greeter.Greeter",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Hello", Handler: unary(methodHello, (*greeter).hello)},
		{MethodName: "Report", Handler: unary(methodReport, (*greeter).report)},
	},
}

// unary returns the gRPC handler of a method of greeter.
func unary(fullMethod string, f func(*greeter, context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		g := srv.(*greeter)
		if interceptor == nil {
			return f(g, ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return f(g, ctx, req.(*wrapperspb.StringValue))
		})
	}
}

// client calls the service and, when told to, waits and calls again.
type client struct {
	conn *grpc.ClientConn
	out  io.Writer
	wait func(time.Duration)
}

// maxAttempts bounds the attempts of one call.
const maxAttempts = 3

// call calls method with name until it succeeds, waiting what each
// refusal's RetryInfo says; it fails on any other error.
func (c *client) call(ctx context.Context, method, name string) error {
	short := method[strings.LastIndex(method, "/")+1:]
	for attempt := 1; ; attempt++ {
		var header metadata.MD
		answer := new(wrapperspb.StringValue)
		err := c.conn.Invoke(ctx, method, wrapperspb.String(name), answer, grpc.Header(&header))
		rate := strings.Join(header.Get("ratelimit"), ", ")
		if err == nil {
			fmt.Fprintf(c.out, "client: %s(%q) = %q  [ratelimit: %s]\n", short, name, answer.GetValue(), rate)
			return nil
		}
		delay, ok := retryDelay(err)
		if !ok || attempt == maxAttempts {
			return fmt.Errorf("%s: %w", short, err)
		}
		st := status.Convert(err)
		fmt.Fprintf(c.out, "client: %s(%q) refused: %v %q, %s  [ratelimit: %s]\n",
			short, name, st.Code(), st.Message(), quota(st), rate)
		fmt.Fprintf(c.out, "client: waiting %v, as the RetryInfo says\n", delay)
		c.wait(delay)
	}
}

// retryDelay returns how long a refused call should wait before it is
// tried again: the RetryInfo detail of a ResourceExhausted or Unavailable
// status. ok is false for any other error.
func retryDelay(err error) (delay time.Duration, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || (st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable) {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, isRetry := d.(*errdetails.RetryInfo); isRetry && ri.GetRetryDelay().IsValid() {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// quota describes the QuotaFailure detail of st.
func quota(st *status.Status) string {
	var subjects []string
	for _, d := range st.Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok {
			for _, v := range qf.GetViolations() {
				subjects = append(subjects, v.GetSubject())
			}
		}
	}
	if len(subjects) == 0 {
		return "no QuotaFailure"
	}
	return "QuotaFailure " + strings.Join(subjects, ", ")
}
