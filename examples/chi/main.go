// Command chi is a small items API on chi with a limit per route, each set
// with r.With and its own limiter:
//
//	go run ./examples/chi            # serve on 127.0.0.1:8080 (-addr to change)
//
// Routes, limited per client IP (the socket peer; behind a proxy use
// keyfunc.ClientIP with keyfunc.TrustProxies):
//
//   - GET /healthz: not limited.
//   - GET /v1/items and GET /v1/items/{id}: 100 per minute together, as a
//     token bucket ("reads").
//   - POST /v1/items: 10 per minute, as a sliding window ("writes"), counted
//     apart from the reads.
//
// Try it:
//
//	curl -i http://127.0.0.1:8080/v1/items
//	for i in $(seq 11); do curl -s -o /dev/null -w '%{http_code} ' -d '{"name":"x"}' http://127.0.0.1:8080/v1/items; done
//
// The eleventh write gets 429 with Retry-After and a problem+json body;
// reads go on being served.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/chilimit"
	"github.com/ratekit/ratekit/core"
)

// The routes' policies.
var (
	reads  = core.Policy{Name: "reads", Limit: 100, Window: time.Minute}
	writes = core.Policy{Name: "writes", Algorithm: core.SlidingWindow, Limit: 10, Window: time.Minute}
)

func main() {
	fs := flag.NewFlagSet("chi", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	fs.Parse(os.Args[1:])
	h, err := newServer(core.SystemClock{})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("chi: listening on http://%s (per client IP: reads 100/1m, writes 10/1m)", *addr)
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// newServer returns the API, its limiters reading clock.
func newServer(clock core.Clock) (http.Handler, error) {
	readLimiter, err := core.New(reads, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	writeLimiter, err := core.New(writes, core.WithClock(clock))
	if err != nil {
		return nil, err
	}
	s := &store{items: []item{{1, "first"}}}
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	readLimit := chilimit.New(readLimiter)
	r.With(readLimit).Get("/v1/items", s.list)
	r.With(readLimit).Get("/v1/items/{id}", s.get)
	r.With(chilimit.New(writeLimiter)).Post("/v1/items", s.create)
	return r, nil
}

// item is what the API serves.
type item struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// store holds the items in memory.
type store struct {
	mu    sync.Mutex
	items []item
}

func (s *store) list(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.items)
}

func (s *store) get(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(chi.URLParam(r, "id"))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		if err == nil && it.ID == id {
			writeJSON(w, http.StatusOK, it)
			return
		}
	}
	http.NotFound(w, r)
}

func (s *store) create(w http.ResponseWriter, r *http.Request) {
	var in item
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&in); err != nil || in.Name == "" {
		http.Error(w, `want {"name": "..."}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in.ID = len(s.items) + 1
	s.items = append(s.items, in)
	writeJSON(w, http.StatusCreated, in)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "chi: write:", err)
	}
}
