// A chi router limited by chilimit, built outside the repository.
//
// go get github.com/ratekit/ratekit/chilimit@latest
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/chilimit"
	"github.com/ratekit/ratekit/core"
)

func main() {
	limiter, err := core.New(core.Policy{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(chilimit.New(limiter))
	r.Get("/hello", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) })
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: r, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
