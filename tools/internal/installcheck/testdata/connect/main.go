// A Connect handler limited by connectlimit's interceptor, built outside the
// repository.
//
// go get github.com/ratekit/ratekit/connectlimit@latest
package main

import (
	"context"
	"log"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/connectlimit"
	"github.com/ratekit/ratekit/core"
)

func main() {
	limiter, err := core.New(core.Policy{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	const procedure = "/greet.v1.GreetService/Greet"
	greet := func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		return connect.NewResponse(wrapperspb.String("Hello, " + req.Msg.Value)), nil
	}
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, greet,
		connect.WithInterceptors(connectlimit.NewInterceptor(limiter))))
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
