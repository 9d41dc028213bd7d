// A plain net/http server limited by httplimit, with the root module alone;
// built outside the repository.
//
// go get github.com/ratekit/ratekit@latest
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

func main() {
	limiter, err := core.New(core.Policy{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	key, err := keyfunc.ClientIP() // RemoteAddr: no proxy is trusted
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) })
	h := httplimit.Middleware(limiter, httplimit.WithKey(key))(mux)
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
