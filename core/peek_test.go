package core

import (
	"context"
	"errors"
	"testing"
	"time"
)

// peekPredicts reports whether pd, what Peek(key, n) reported, agrees with
// d, what AllowN(key, n) then decided on the same state at the same time:
// equal for a denial, which counts nothing; for an allowed request, the
// same decision with n units more Remaining and a ResetAfter no later,
// since a Peek describes the state before counting and AllowN after.
func peekPredicts(pd, d Decision, n int64) bool {
	if !d.Allowed {
		return pd == d
	}
	want := d
	want.Remaining += n
	want.ResetAfter = pd.ResetAfter
	return pd == want && pd.ResetAfter <= d.ResetAfter
}

// peekPredictsLayered is peekPredicts for layered decisions: the same
// layer decides, and every layer's Decision agrees (a denied request
// counted nothing in any layer, so each is as Peek reports it).
func peekPredictsLayered(pd, d LayeredDecision, n int64) bool {
	if pd.Layer != d.Layer || len(pd.Layers) != len(d.Layers) || !peekPredicts(pd.Decision, d.Decision, n) {
		return false
	}
	for i := range d.Layers {
		if d.Allowed && !peekPredicts(pd.Layers[i], d.Layers[i], n) || !d.Allowed && pd.Layers[i] != d.Layers[i] {
			return false
		}
	}
	return true
}

// For the external tests of this package.
var (
	PeekPredicts        = peekPredicts
	PeekPredictsLayered = peekPredictsLayered
)

// downStore is a limiter of m's policy whose store is down.
type downStore struct{ *Memory }

func (downStore) AllowN(context.Context, string, int64) (Decision, error) {
	return Decision{}, errors.New("store down")
}

func (downStore) Peek(context.Context, string, int64) (Decision, error) {
	return Decision{}, errors.New("store down")
}

// Failing open, a Failover decides as for a new key: AllowN leaves all but
// n units, and Peek, counting nothing, reports every unit left.
func TestFailoverFailOpenPeek(t *testing.T) {
	clock := NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := New(Policy{Limit: 5, Window: time.Minute}, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFailover(downStore{m}, WithErrorPolicy(FailOpen()), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, err := f.AllowN(ctx, "k", 2); err != nil || !d.Allowed || d.Remaining != 3 {
		t.Errorf("AllowN(2) failing open: %+v, %v; want allowed, 3 left", d, err)
	}
	if d, err := f.Peek(ctx, "k", 2); err != nil || !d.Allowed || d.Remaining != 5 {
		t.Errorf("Peek(2) failing open: %+v, %v; want allowed, 5 left", d, err)
	}
	ld, err := f.PeekLayers(ctx, "k", 2)
	if err != nil || !ld.Allowed || ld.Remaining != 5 || len(ld.Layers) != 1 || ld.Layers[0].Remaining != 5 {
		t.Errorf("PeekLayers(2) failing open: %+v, %v; want allowed, 5 left in its one layer", ld, err)
	}
}
