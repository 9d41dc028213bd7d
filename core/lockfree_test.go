package core

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Hot keys decided without the lock while another goroutine makes the
// locked writers run in the same shard: new keys that evict others (dead
// slots), Resets, rebuilds of the table (every few dozen new keys), refunds
// and a Layered limiter that holds the keys' states. On a clock that stands
// still nothing refills, so every unit a hot key was allowed must be in its
// state at the end: a lost update (a CAS landing on a state a writer had
// already copied or dropped) shows as more Remaining than the units counted
// say, or as more units allowed than the bucket held.
func TestLockFreeLosesNoUpdate(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, LeakyBucket} {
		t.Run(a.String(), func(t *testing.T) {
			for run := range 3 {
				lockFreeRun(t, a, run)
			}
		})
	}
}

func lockFreeRun(t *testing.T, a Algorithm, run int) {
	ctx := context.Background()
	const (
		limit    = 1_000_000
		prespent = limit / 2
		workers  = 4
		each     = 5000
	)
	clock := NewManualClock(time.Unix(1_800_000_000, 0))
	p := Policy{Algorithm: a, Limit: limit, Window: time.Hour}
	// 64 keys at most: one shard, which every key below shares.
	m, err := New(p, WithClock(clock), WithMaxKeys(64))
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(Policy{Limit: MaxLimit, Window: time.Hour}, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	layered, err := NewLayered(m, other)
	if err != nil {
		t.Fatal(err)
	}
	// Three hot keys, each holding half its bucket, so that a minted key
	// (one unit) is always the one evicted: the hand weighs at least one
	// entry that is not a hot key before it stops.
	hot := []string{"hot-a-" + strconv.Itoa(run), "hot-b-" + strconv.Itoa(run), "hot-c-" + strconv.Itoa(run)}
	for _, k := range hot {
		if d, _ := m.AllowN(ctx, k, prespent); !d.Allowed {
			t.Fatalf("%s: the first %d denied: %+v", k, prespent, d)
		}
	}
	var allowed, refunded [3]atomic.Int64
	var churned atomic.Int64 // new keys made by the churn
	var start, done sync.WaitGroup
	start.Add(1)
	for w := range workers + 1 {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			// Until the churn has made enough new keys to evict and
			// rebuild many times while the workers run.
			for i := 0; i < each || churned.Load() < 3000; i++ {
				j := (i + w) % len(hot)
				var d Decision
				if w == workers {
					d, _ = layered.Allow(ctx, hot[j])
				} else {
					d, _ = m.Allow(ctx, hot[j])
				}
				if d.Allowed {
					allowed[j].Add(1)
				}
			}
		}()
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		start.Wait()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := "minted-" + strconv.Itoa(run) + "-" + strconv.Itoa(i)
			m.Allow(ctx, k)
			churned.Add(1)
			switch i % 7 {
			case 2:
				m.Reset(ctx, k)
			case 4:
				j := i % len(hot)
				if err := m.Refund(ctx, hot[j], 1, 0); err != nil {
					t.Error(err)
					return
				}
				refunded[j].Add(1)
			}
		}
	}()
	start.Done()
	done.Wait()
	close(stop)
	churn.Wait()

	st := m.Stats()
	if st.LossyEvictions == 0 || st.Keys > 64 {
		t.Fatalf("Stats %+v: want evictions, and at most 64 keys", st)
	}
	for j, k := range hot {
		d, _ := m.Peek(ctx, k, 1)
		// Nothing refills on a clock that stands still, and a refund of
		// one unit counted just now gives back exactly one unit while the
		// bucket is not full.
		counted := prespent + allowed[j].Load() - refunded[j].Load()
		if got, want := d.Remaining, limit-counted; got != want {
			t.Errorf("%s: %d allowed, %d refunded: Remaining %d, want %d (%d units lost)", k, allowed[j].Load(), refunded[j].Load(), got, want, got-want)
		}
	}
}
