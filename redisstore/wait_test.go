package redisstore

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/clientlimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// core.Wait and clientlimit on Redis, in real time (about 2s each): the
// limiters decide by Redis's TIME, the waits sleep on the system's timers.

// Several waiters in a loop on one Redis key, each with its own client (as
// processes of a fleet have): together they get what the policy allows
// over the span, and none starves.
func TestWaitOnRedis(t *testing.T) {
	addr := singleNode(t)
	const (
		waiters = 6
		span    = 2 * time.Second
	)
	p := core.Policy{Name: "wait", Limit: 20, Window: time.Second, Burst: 5}
	prefix := uniquePrefix(t.Name())
	start := time.Now()
	var mu sync.Mutex
	per := make([]int, waiters)
	var maxWait time.Duration
	var wg sync.WaitGroup
	for w := range waiters {
		l := mustNew(t, newClient(t, addr), p, WithPrefix(prefix))
		wg.Go(func() {
			for {
				t0 := time.Now()
				if _, err := core.Wait(context.Background(), l, "fleet", 1); err != nil {
					t.Error(err)
					return
				}
				if time.Since(start) >= span {
					return
				}
				mu.Lock()
				per[w]++
				maxWait = max(maxWait, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range per {
		total += n
	}
	// The burst, then 20 a second for 2s: 45, give or take the one or
	// two due at the span's edges.
	t.Logf("%d units in %v, per waiter %v, longest wait %v", total, span, per, maxWait)
	if total < 40 || total > 45 {
		t.Errorf("%d units taken in %v, want 45 (5 + 20/s)", total, span)
	}
	for w, n := range per {
		if n < 2 {
			t.Errorf("waiter %d took %d units of %d", w, n, total)
		}
	}
	// 6 waiters, a unit every 50ms: a fair turn is 300ms.
	if maxWait > 3*time.Second {
		t.Errorf("longest wait %v", maxWait)
	}
}

// Waiters that each wait once: all return, at most the policy's rate, the
// last within a window of the time the policy allows the last unit.
func TestWaitOnRedisOnce(t *testing.T) {
	addr := singleNode(t)
	p := core.Policy{Name: "once", Algorithm: core.SlidingLog, Limit: 10, Window: time.Second}
	prefix := uniquePrefix(t.Name())
	l := mustNew(t, newClient(t, addr), p, WithPrefix(prefix))
	start := time.Now()
	var mu sync.Mutex
	var got []time.Duration
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := core.Wait(context.Background(), l, "k", 1); err != nil {
				t.Error(err)
			}
			mu.Lock()
			got = append(got, time.Since(start))
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(got)
	// 10 at once, 10 when those leave the log a second later.
	if got[9] > 500*time.Millisecond || got[10] < time.Second-5*time.Millisecond || got[19] > 2*time.Second {
		t.Errorf("returned at %v", got)
	}
}

// A fleet: four clients, each with its own Redis connection and
// clientlimit.Transport, share a limit in Redis equal to the server's
// (ratekit's middleware, one key for them all): in steady state the
// server answers no 429.
func TestFleetSharesServerLimit(t *testing.T) {
	addr := singleNode(t)
	p := core.Policy{Name: "api", Limit: 20, Window: time.Second}
	server, err := core.New(p)
	if err != nil {
		t.Fatal(err)
	}
	var ok200, denied atomic.Int64
	var steady atomic.Bool
	var steady429 atomic.Int64
	limited := httplimit.Middleware(server)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok200.Add(1)
	}))
	srv := httptest.NewServer(countDenied(limited, &denied, &steady, &steady429))
	defer srv.Close()
	prefix := uniquePrefix(t.Name())
	const (
		clients = 4
		workers = 2
		warmup  = 500 * time.Millisecond
		span    = 3 * time.Second
	)
	start := time.Now()
	var wg sync.WaitGroup
	var trs []*clientlimit.Transport
	for range clients {
		l := mustNew(t, newClient(t, addr), p, WithPrefix(prefix))
		tr := clientlimit.MustNew(nil, clientlimit.WithLimiter(l))
		trs = append(trs, tr)
		c := &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
		for range workers {
			wg.Go(func() {
				for time.Since(start) < span {
					res, err := c.Get(srv.URL)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			})
		}
	}
	time.AfterFunc(warmup, func() { steady.Store(true) })
	wg.Wait()
	elapsed := time.Since(start)
	var retries uint64
	for _, tr := range trs {
		retries += tr.Stats().Retries
	}
	t.Logf("fleet: %d served, %d 429s (%d after the first %v), %d retries", ok200.Load(), denied.Load(), steady429.Load(), warmup, retries)
	if steady429.Load() != 0 {
		t.Errorf("%d 429s in steady state, want none", steady429.Load())
	}
	// 20 at once, then 20 a second: about 80 in 3s, and never more than
	// the policy allows in the time the last request took to end.
	if n, most := ok200.Load(), 20+int64(20*elapsed/time.Second)+1; n < 60 || n > most {
		t.Errorf("%d served in %v, want 60 to %d", n, elapsed, most)
	}
}

func countDenied(next http.Handler, denied *atomic.Int64, steady *atomic.Bool, steady429 *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == http.StatusTooManyRequests {
			denied.Add(1)
			if steady.Load() {
				steady429.Add(1)
			}
		}
	})
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }
