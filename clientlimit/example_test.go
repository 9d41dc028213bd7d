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
	"github.com/ratekit/ratekit/rules"
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

// A rule set paces each outgoing request by the rule it matches: POST
// /v1/chat at one an hour per host, everything else at 100 a minute. The
// second chat would wait an hour, longer than WithMaxWait's minute: it
// fails at once, unsent, while the other rule's GET goes.
func ExampleWithLimiter_ruleSet() {
	const file = `
rules:
  - name: chat
    match: {routes: [/v1/chat], methods: [POST]}
    limits:
      - {name: per-host, rate: 1/1h, key: host}
  - name: everything-else
    limits:
      - {name: per-host, rate: 100/1m, key: host}
`
	set, err := rules.Parse("rules.yaml", []byte(file), rules.WithKeyFunc("host", clientlimit.HostKey))
	if err != nil {
		panic(err)
	}
	lim, err := rules.NewLimiter(set) // rules.Open for a file that reloads
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()

	tr, err := clientlimit.New(nil, clientlimit.WithLimiter(lim), clientlimit.WithObserver(func(e clientlimit.Event) {
		if e.Kind == clientlimit.EventRefused {
			fmt.Println("refused by rule", e.Rule)
		}
	}))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	for _, r := range []struct{ method, path string }{
		{"POST", "/v1/chat"}, {"POST", "/v1/chat"}, {"GET", "/v1/models"},
	} {
		req, err := http.NewRequest(r.method, srv.URL+r.path, nil)
		if err != nil {
			panic(err)
		}
		res, err := client.Do(req)
		if errors.Is(err, clientlimit.ErrWaitTooLong) {
			fmt.Println(r.method, r.path, "not sent")
			continue
		}
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(r.method, r.path, res.Status)
	}
	// Output:
	// POST /v1/chat 200 OK
	// refused by rule chat
	// POST /v1/chat not sent
	// GET /v1/models 200 OK
}
