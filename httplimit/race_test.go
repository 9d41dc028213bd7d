//go:build race

package httplimit_test

// raceEnabled: the race detector drops sync.Pool items at random, so
// allocation counts over pooled memory do not hold.
const raceEnabled = true

// maxAllocs is the allocations an allowed request may cost the engine
// under the race detector, which empties the pools at random.
func maxAllocs() float64 { return 1 }
