package core_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/flakystore"
	"github.com/ratekit/ratekit/internal/observetest"
	"github.com/ratekit/ratekit/observe"
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

func mustObserved(t testing.TB, l core.Limiter, obs observe.Observer, opts ...observe.Option) *observe.Limiter {
	t.Helper()
	o, err := observe.New(l, obs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
func mustMemory(t testing.TB, p core.Policy, clock core.Clock) *core.Memory {
	t.Helper()
	m, err := core.New(p, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
func mustShadow(t testing.TB, enforced, candidate core.Limiter, obs observe.Observer, opts ...observe.Option) *observe.Shadow {
	t.Helper()
	s, err := observe.NewShadow(enforced, candidate, obs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
