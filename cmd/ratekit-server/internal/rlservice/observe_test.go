package rlservice

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
)

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Observe(_ context.Context, e observe.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%v %s/%s cost=%d %v shadow=%v", e.Op, e.Rule, e.Policy, e.Cost, e.Outcome(), e.Shadow))
}

func TestObserver(t *testing.T) {
	rec := &recorder{}
	l, err := New(mustConfig(t, testConfig), Options{Clock: core.NewManualClock(start), Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := l.ShouldRateLimit(context.Background(), req("d", "a=1;b=1;shadow=1;unl=1", 2)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		// b's limit is 1: a cost of 2 never fits. The request is refused.
		"allow d/a cost=2 allowed shadow=false",
		"allow d/b cost=2 denied shadow=false",
		"peek d/shadow cost=2 denied shadow=true",
		"allow d/a cost=2 allowed shadow=false",
		"allow d/b cost=2 denied shadow=false",
		"peek d/shadow cost=2 denied shadow=true",
	}
	if fmt.Sprint(rec.events) != fmt.Sprint(want) {
		t.Errorf("events:\n%v\nwant\n%v", rec.events, want)
	}
}
