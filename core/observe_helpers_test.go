package core_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
)

type recorder struct {
	mu     sync.Mutex
	events []observe.Event
}

func (r *recorder) Observe(_ context.Context, e observe.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}
func (r *recorder) take() []observe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}
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

type eventSummary struct {
	Op        observe.Op
	Policy    string
	KeyClass  string
	Key       string
	Cost      int64
	Outcome   observe.Outcome
	Remaining int64
	Latency   time.Duration
	Err       string
	Shadow    bool
}

func summarize(ev []observe.Event) []eventSummary {
	out := make([]eventSummary, len(ev))
	for i, e := range ev {
		out[i] = eventSummary{e.Op, e.Policy, e.KeyClass, e.Key, e.Cost, e.Outcome(), e.Decision.Remaining, e.Latency, "", e.Shadow}
		if e.Err != nil {
			out[i].Err = e.Err.Error()
		}
	}
	return out
}
func checkEvents(t *testing.T, got []observe.Event, want []eventSummary) {
	t.Helper()
	g := summarize(got)
	if !reflect.DeepEqual(g, want) {
		t.Errorf("events:\n got %+v\nwant %+v", g, want)
	}
}
