// Package observetest records the events of observed limiters and compares
// them with step tables, for core's and observe's tests. It is for tests
// only.
package observetest

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/observe"
)

// Recorder is an Observer that keeps every event.
type Recorder struct {
	mu     sync.Mutex
	events []observe.Event
}

// Observe records e.
func (r *Recorder) Observe(_ context.Context, e observe.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Take returns the events recorded since the last Take, and forgets them.
func (r *Recorder) Take() []observe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

// EventSummary is the part of an Event a step table checks.
type EventSummary struct {
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

// Summarize returns the summary of each event.
func Summarize(ev []observe.Event) []EventSummary {
	out := make([]EventSummary, len(ev))
	for i, e := range ev {
		out[i] = EventSummary{e.Op, e.Policy, e.KeyClass, e.Key, e.Cost, e.Outcome(), e.Decision.Remaining, e.Latency, "", e.Shadow}
		if e.Err != nil {
			out[i].Err = e.Err.Error()
		}
	}
	return out
}

// CheckEvents fails t unless got summarizes to want.
func CheckEvents(t *testing.T, got []observe.Event, want []EventSummary) {
	t.Helper()
	if g := Summarize(got); !reflect.DeepEqual(g, want) {
		t.Errorf("events:\n got %+v\nwant %+v", g, want)
	}
}
