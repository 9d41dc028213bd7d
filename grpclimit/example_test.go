package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
)

// A server whose every call is limited to 2 per 20 seconds per client
// address, here the health service; the client is told when to retry.
func ExampleUnaryServerInterceptor() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)) // a real server omits the clock
	limiter, err := core.New(core.Policy{Name: "api", Limit: 2, Window: 20 * time.Second}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for i := range 3 {
		var header metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		fmt.Printf("call %d: %v, ratelimit: %s\n", i+1, status.Code(err), strings.Join(header.Get("ratelimit"), ", "))
		if err == nil {
			continue
		}
		st := status.Convert(err)
		fmt.Printf("  message: %s\n", st.Message())
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Printf("  retry in %v\n", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				fmt.Printf("  quota: %s\n", d.GetViolations()[0].GetSubject())
			}
		}
	}
	// Output:
	// call 1: OK, ratelimit: "api";r=1;t=10
	// call 2: OK, ratelimit: "api";r=0;t=20
	// call 3: ResourceExhausted, ratelimit: "api";r=0;t=10
	//   message: Try again in 10 seconds.
	//   retry in 10s
	//   quota: policy:api
}
