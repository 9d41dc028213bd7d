//go:build race

package httplimit_test

// maxAllocs is the allocations an allowed request may cost the engine
// under the race detector, which drops sync.Pool items at random and so
// empties the pools of header slabs.
func maxAllocs() float64 { return 1 }
