// The README's quick start, as a user builds it outside the repository
// after the README's install line. The install check runs it and expects a
// 429 once the limit is spent. It listens on the address of its argument
// (default 127.0.0.1:8080) and prints the one it got.
//
// go get github.com/ratekit/ratekit/ginlimit@latest
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
)

func main() {
	limiter, err := core.New(core.Policy{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err) // the error names the field at fault
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.New(limiter)) // 100 requests a minute per client IP, token bucket
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	addr := "127.0.0.1:8080"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening on", ln.Addr())
	log.Fatal(r.RunListener(ln))
}
