// Package benchmarks compares ratekit with the libraries users would pick
// instead. It is its own module, so that users of ratekit never download
// the peers. run.sh runs everything (speed, memory per key, correctness
// probes, middleware cost, an HTTP load test, Redis) and writes RESULTS.md:
//
//	benchmarks/run.sh
//
// The Redis cases start their own redis-server on a free loopback port, and
// skip without one (CI fails instead). One family on its own:
//
//	cd benchmarks && go test -run=^$ -bench=Redis -benchmem -count=5 .
package benchmarks
