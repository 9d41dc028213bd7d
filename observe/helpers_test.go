package observe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/httpview"
)

var ctx = context.Background()

var errDown = errors.New("store: connection refused")

// flakyStore is a remote limiter that fails with errDown while down is set
// and otherwise decides by a memory limiter. It counts its calls.
type flakyStore struct {
	*core.Memory
	down    atomic.Bool
	calls   atomic.Int64
	gate    chan struct{} // when set, calls signal entered and wait on it
	entered chan struct{}
}

func newFlaky(t testing.TB, p core.Policy, clock core.Clock) *flakyStore {
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return &flakyStore{Memory: m}
}

func (s *flakyStore) call() error {
	s.calls.Add(1)
	if s.gate != nil {
		s.entered <- struct{}{}
		<-s.gate
	}
	if s.down.Load() {
		return errDown
	}
	return nil
}

func (s *flakyStore) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	if err := s.call(); err != nil {
		return core.Decision{}, fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.AllowN(ctx, key, n)
}

func (s *flakyStore) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	if err := s.call(); err != nil {
		return core.Decision{}, fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.Peek(ctx, key, n)
}

func (s *flakyStore) Reset(ctx context.Context, key string) error {
	if err := s.call(); err != nil {
		return fmt.Errorf("flaky: %w", err)
	}
	return s.Memory.Reset(ctx, key)
}

func mustFailover(t testing.TB, remote core.Limiter, opts ...core.FailoverOption) *core.Failover {
	t.Helper()
	f, err := core.NewFailover(remote, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// layeredOf returns a Layered limiter of the policies on clock.
func layeredOf(t testing.TB, clock core.Clock, ps ...core.Policy) *core.Layered {
	t.Helper()
	ms := make([]*core.Memory, len(ps))
	for i, p := range ps {
		ms[i] = mustMemory(t, p, clock)
	}
	return mustLayered(t, ms...)
}

// httpStep is one request through the HTTP middleware and the rate headers
// it is answered with.
type httpStep struct {
	served    bool
	policy    string // RateLimit-Policy
	rateLimit string // RateLimit
}

// checkHTTP sends one request to e and compares its answer with want.
func checkHTTP(t *testing.T, e *httplimit.Engine, i int, want httpStep) {
	t.Helper()
	w := httptest.NewRecorder()
	res := e.Check(httpview.New(httptest.NewRequest("GET", "/", nil), "/"))
	served := res.WriteHTTP(w)
	got := httpStep{served, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit")}
	if got != want {
		t.Errorf("request %d:\n got %+v\nwant %+v", i, got, want)
	}
}

// A Failover over a layered limiter keeps its layers: the HTTP middleware

func mustLayered(t testing.TB, layers ...*core.Memory) *core.Layered {
	t.Helper()
	l, err := core.NewLayered(layers...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
