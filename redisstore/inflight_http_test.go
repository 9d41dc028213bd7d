package redisstore

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// Over a real socket, N+1 requests of one client at once with the handler
// held at a barrier: N reach it, one gets 429 with Retry-After 1, and the
// Redis rate limit counted the N only; once they end, the key holds no
// lease.
func TestInFlightHTTPNPlusOne(t *testing.T) {
	const n = 4
	c := newClient(t, singleNode(t))
	prefix := uniquePrefix(t.Name())
	limit := newInFlight(t, c, n, WithPrefix(prefix))
	rate, err := New(c, core.Policy{Limit: 100, Window: time.Minute}, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	entered, gate := make(chan struct{}, n+1), make(chan struct{})
	srv := httptest.NewServer(httplimit.Middleware(rate, httplimit.WithInFlight(limit))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-gate
	})))
	defer srv.Close()

	type answer struct {
		status int
		retry  string
	}
	answers := make(chan answer, n+1)
	var wg sync.WaitGroup
	for range n + 1 {
		wg.Go(func() {
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Error(err)
				answers <- answer{}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After")}
		})
	}
	in, early := 0, []answer{}
	for in+len(early) < n+1 {
		select {
		case <-entered:
			in++
		case a := <-answers:
			early = append(early, a)
		}
	}
	close(gate)
	wg.Wait()
	close(answers)
	if in != n || len(early) != 1 || early[0] != (answer{429, "1"}) {
		t.Fatalf("%d of %d requests reached the handler, answered while they ran: %v; want %d and one 429 with Retry-After 1", in, n+1, early, n)
	}
	for a := range answers {
		if a.status != 200 {
			t.Errorf("held request answered %d, want 200", a.status)
		}
	}
	if d, err := rate.Peek(t.Context(), "127.0.0.1", 1); err != nil || d.Remaining != 100-n {
		t.Errorf("rate limit: %d remaining (%v), want %d", d.Remaining, err, 100-n)
	}
	if k, err := c.Exists(t.Context(), limit.l.key("127.0.0.1")).Result(); err != nil || k != 0 {
		t.Errorf("in-flight key exists = %d (%v) after every request ended, want 0", k, err)
	}
}
