package clientlimit_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/clientlimit"
)

// A server that refuses the first call with "Retry-After: 0": the GET is
// sent again and succeeds. Then the server asks for an hour: its 429 is
// returned as it is, and the next call to it fails at once, unsent,
// instead of blocking for an hour.
func ExampleNew() {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			io.WriteString(w, "hello")
		default:
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()

	tr, err := clientlimit.New(nil, clientlimit.WithMaxWait(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	for range 3 {
		res, err := client.Get(srv.URL)
		if errors.Is(err, clientlimit.ErrWaitTooLong) {
			fmt.Println("not sent: the server asked to wait an hour")
			continue
		}
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(res.Status)
	}
	st := tr.Stats()
	fmt.Printf("server saw %d calls; retries %d, refused %d\n", calls.Load(), st.Retries, st.Refused)
	// Output:
	// 200 OK
	// 429 Too Many Requests
	// not sent: the server asked to wait an hour
	// server saw 3 calls; retries 1, refused 1
}
