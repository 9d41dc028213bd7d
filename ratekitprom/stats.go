package ratekitprom

import (
	"fmt"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
)

// WatchMemory has every scrape report mem's Stats as
// ratekit_memory_keys, ratekit_memory_fresh_drops_total and
// ratekit_memory_lossy_evictions_total with the label policy. Stats locks
// each shard in turn: cheap at scrape intervals. It fails if mem is nil or
// another Memory is watched under the same policy name.
func (m *Metrics) WatchMemory(policy string, mem *core.Memory) error {
	return wrap(m.watches.Memory(policy, mem))
}

// WatchLeased has every scrape report l's Stats as ratekit_lease_keys,
// ratekit_lease_refills_total (its Takes: remote calls that topped up a
// lease) and ratekit_lease_dropped_units_total with the label policy. It
// fails if l is nil or another Leased is watched under the same policy name.
func (m *Metrics) WatchLeased(policy string, l *hotkey.Leased) error {
	return wrap(m.watches.Leased(policy, l))
}

// WatchFailover has every scrape report whether f's circuit breaker is open
// as ratekit_breaker_open (1 or 0) with the label policy. Its store errors
// and breaker openings are counted as events: give the Failover the options
// observe.FailoverHooks(m, policy). It fails if f is nil or another Failover
// is watched under the same policy name.
func (m *Metrics) WatchFailover(policy string, f *core.Failover) error {
	return wrap(m.watches.Failover(policy, f))
}

// wrap prefixes an error of metricsview with the package name.
func wrap(err error) error {
	if err != nil {
		return fmt.Errorf("ratekitprom: %w", err)
	}
	return nil
}
