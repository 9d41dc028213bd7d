package observe_test

import (
	"context"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/adaptertest"
	"github.com/ratekit/ratekit/internal/flakystore"
	"github.com/ratekit/ratekit/internal/observetest"
)

// The shared test helpers, under the names these tests use.
type (
	recorder     = observetest.Recorder
	eventSummary = observetest.EventSummary
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

// The HTTP middleware's answers, checked step by step.
type httpStep = adaptertest.EngineStep

var checkHTTP = adaptertest.CheckEngine

// A Failover over a layered limiter keeps its layers: the HTTP middleware

func mustLayered(t testing.TB, layers ...*core.Memory) *core.Layered {
	t.Helper()
	l, err := core.NewLayered(layers...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
