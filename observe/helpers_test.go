package observe_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/flakystore"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/internal/observetest"
)

// The shared test helpers, under the names these tests use.
type (
	recorder     = observetest.Recorder
	eventSummary = observetest.EventSummary
	flakyStore   = flakystore.Store
)

var (
	checkEvents = observetest.CheckEvents
	newFlaky    = flakystore.New
	errDown     = flakystore.ErrDown
)

var ctx = context.Background()

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
