//go:build !race

package httplimit_test

// maxAllocs is the allocations an allowed request may cost the engine:
// none (the header values are carved from pooled slabs, one allocation per
// about 40 responses).
func maxAllocs() float64 { return 0 }
