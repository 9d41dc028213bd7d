package ratekitotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
	"github.com/ratekit/ratekit/internal/metricsview"
)

// WatchMemory has every collection report mem's Stats as
// ratekit.memory.keys, ratekit.memory.fresh_drops and
// ratekit.memory.lossy_evictions with the attribute policy. Stats locks
// each shard in turn: cheap at collection intervals. It fails if mem is
// nil or another Memory is watched under the same policy name.
func (m *Metrics) WatchMemory(policy string, mem *core.Memory) error {
	return wrap(m.watches.Memory(policy, mem))
}

// WatchLeased has every collection report l's Stats as
// ratekit.lease.keys, ratekit.lease.refills (its Takes: remote calls that
// topped up a lease) and ratekit.lease.dropped_units with the attribute
// policy. It fails if l is nil or another Leased is watched under the same
// policy name.
func (m *Metrics) WatchLeased(policy string, l *hotkey.Leased) error {
	return wrap(m.watches.Leased(policy, l))
}

// WatchFailover has every collection report whether f's circuit breaker
// is open as ratekit.breaker.open (1 or 0) with the attribute policy. Its
// store errors and breaker openings are counted as events: give the
// Failover the options observe.FailoverHooks(m, policy). It fails if f is
// nil or another Failover is watched under the same policy name.
func (m *Metrics) WatchFailover(policy string, f *core.Failover) error {
	return wrap(m.watches.Failover(policy, f))
}

// wrap prefixes an error of metricsview with the package name.
func wrap(err error) error {
	if err != nil {
		return fmt.Errorf("ratekitotel: %w", err)
	}
	return nil
}

// watch registers the callback that reports, at each collection, the
// counter series and the limiters of w.
func (inst *instruments) watch(w *metricsview.Watches) error {
	var observables []metric.Observable
	for _, o := range inst.observable {
		if o != nil {
			observables = append(observables, o)
		}
	}
	_, err := inst.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		inst.mu.Lock()
		counters := inst.counters[:len(inst.counters):len(inst.counters)]
		inst.mu.Unlock()
		for _, c := range counters {
			o.ObserveInt64(c.observable, c.n.Load(), c.attrs)
		}
		w.Read(func(label string, m metricsview.Metric, v int64) {
			o.ObserveInt64(inst.observable[m], v, attrs(label, "", ""))
		})
		return nil
	}, observables...)
	if err != nil {
		return fmt.Errorf("ratekitotel: register callback: %w", err)
	}
	return nil
}
