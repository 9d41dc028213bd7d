// Package limitercheck holds the helpers the conformance suite in
// core/limitertest and the tests of our own limiters share: the suite's
// start time, a subtest per algorithm, a goroutine barrier, and measures of
// decisions. Only tests import it.
package limitercheck

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// StartTime returns the time every subtest's clock starts at, 2026-01-01
// 00:00 UTC: a whole day, so fixed windows of a second, a minute, an hour
// or a day all begin there.
func StartTime() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// ForEachAlgorithm runs f as a subtest for each algorithm, named after it,
// with p's Algorithm set (and Burst cleared for the algorithms without
// one).
func ForEachAlgorithm(t *testing.T, p core.Policy, f func(t *testing.T, p core.Policy)) {
	for _, a := range core.Algorithms() {
		p := p
		p.Algorithm = a
		if !a.Burstable() {
			p.Burst = 0
		}
		t.Run(a.String(), func(t *testing.T) { f(t, p) })
	}
}

// SameLayered reports whether two LayeredDecisions are equal, field for
// field and layer for layer.
func SameLayered(a, b core.LayeredDecision) bool {
	return a.Decision == b.Decision && a.Layer == b.Layer && slices.Equal(a.Layers, b.Layers)
}

// Race runs f on n goroutines, passing each its index (0 to n-1), released
// together once all have started, and waits for them all: the barrier the
// conformance suite's concurrency tests use.
func Race(n int, f func(g int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for g := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			f(g)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// CountAllowed races n goroutines (see [Race]), each calling decide each
// times with its index, and returns how many decisions were allowed. An
// error fails t and ends that goroutine.
func CountAllowed(t testing.TB, n, each int, decide func(g int) (core.Decision, error)) int64 {
	var allowed atomic.Int64
	Race(n, func(g int) {
		for range each {
			d, err := decide(g)
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				allowed.Add(1)
			}
		}
	})
	return allowed.Load()
}

// OverAdmission returns the most units admitted in any span of steps beyond
// what a token bucket of policy p allows in that span (its Capacity plus the
// refill over the span's length), or a negative number if no span went over.
// admitted[i] is what was admitted in step i, each step lasting step. Tests of
// wrappers that trade exactness for fewer store calls (leases, regional
// shares) use it to measure their over-admission.
func OverAdmission(p core.Policy, step time.Duration, admitted []int64) int64 {
	// The worst span begins and ends with a step that admitted something.
	var at, sum []int64
	sum = append(sum, 0)
	for i, a := range admitted {
		if a > 0 {
			at = append(at, int64(i))
			sum = append(sum, sum[len(sum)-1]+a)
		}
	}
	worst := int64(-1 << 62)
	for i := range at {
		for j := i; j < len(at); j++ {
			span := time.Duration(at[j]-at[i]) * step
			worst = max(worst, sum[j+1]-sum[i]-p.Capacity()-int64(span)*p.Limit/int64(p.Window))
		}
	}
	return worst
}
