package limitertest

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratekit/ratekit/core"
)

// Race runs f on n goroutines, passing each its index (0 to n-1), released
// together once all have started, and waits for them all: the barrier the
// suite's concurrency tests use, for stores' own races.
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
