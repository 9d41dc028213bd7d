// Package benchmarks compares ratekit with the libraries users would pick
// instead. It is its own module, so that users of ratekit never download
// the peers. Run the Redis comparison with
//
//	cd benchmarks && go test -run=^$ -bench=Redis -benchmem -count=5 .
//
// It starts its own redis-server on a free loopback port.
package benchmarks
