package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/connectlimit"
	"github.com/ratekit/ratekit/core"
)

// Two calls per minute per client address, on a manual clock: the third is
// refused with ResourceExhausted and a RetryInfo saying when to retry.
func Example() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	limiter, err := core.New(core.Policy{Name: "api", Limit: 2, Window: time.Minute}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}

	const procedure = "/greet.v1.GreetService/Greet"
	greet := func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		return connect.NewResponse(wrapperspb.String("Hello, " + req.Msg.Value)), nil
	}
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, greet,
		connect.WithInterceptors(connectlimit.NewInterceptor(limiter))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+procedure)
	for range 3 {
		res, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("Ana")))
		var ce *connect.Error
		if errors.As(err, &ce) {
			fmt.Print(ce.Code(), " ", ce.Meta().Get("Ratelimit"))
			for _, d := range ce.Details() {
				if v, err := d.Value(); err == nil {
					if ri, ok := v.(*errdetails.RetryInfo); ok {
						fmt.Print(" retry in ", ri.RetryDelay.AsDuration())
					}
				}
			}
			fmt.Println()
			continue
		}
		fmt.Println(res.Msg.Value, res.Header().Get("Ratelimit"))
	}
	// Output:
	// Hello, Ana "api";r=1;t=30
	// Hello, Ana "api";r=0;t=60
	// resource_exhausted "api";r=0;t=30 retry in 30s
}
