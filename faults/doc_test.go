// Package faults is ratekit's fault harness: it starts real redis-server
// processes on free loopback ports, drives bounded traffic through a
// redisstore limiter wrapped in a core.Failover (failing closed, and falling
// back to a local memory limiter), injects one fault at a time, and reports
// what the limiter did: decisions made by Redis and by the failure mode,
// errors returned to the caller, the slowest decision, the time until Redis
// decides again after the fault ends, and over-admission against the policy.
//
// [Proxy] is the TCP proxy between the clients and redis-server that adds
// latency, stalls and resets connections; [Run] drives one fault on a
// single node and returns a [Report] per failure mode; [RunClients] does on
// any client a [NewClient] makes: [Node], [Cluster] (the tests kill a
// master of a Cluster with replicas) or [Sentinel] (the tests fail a master
// over to its replica).
//
// The figures and the commands that reproduce them are in
// docs/reliability.md. The module is its own workspace, like benchmarks/,
// so users of ratekit never download it, and the harness lives in test
// files only, so that nothing can import it.
package faults
