package metricsview

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
)

// Watches are the limiters an exporter reads at each collection: their
// stats become the [Info].Watched metrics. The zero value holds none. It
// is safe for concurrent use.
type Watches struct {
	mu   sync.Mutex
	list []watch
}

type watch struct {
	fn, label string
	read      func(emit func(Metric, int64))
}

// Memory watches mem, a [core.Memory], as [MemoryKeys],
// [MemoryFreshDrops] and [MemoryLossyEvictions] of policy. It fails, with
// an error to wrap with the exporter's package name, if mem is nil (a nil
// interface or a nil *core.Memory, as the exporters pass it) or another
// Memory is watched under the same policy label.
func (w *Watches) Memory(policy string, mem interface{ Stats() core.Stats }) error {
	if mem == nil || mem == (*core.Memory)(nil) {
		return errors.New("WatchMemory: nil limiter")
	}
	return w.add("WatchMemory", policy, func(emit func(Metric, int64)) {
		s := mem.Stats()
		emit(MemoryKeys, int64(s.Keys))
		emit(MemoryFreshDrops, int64(s.FreshDrops))
		emit(MemoryLossyEvictions, int64(s.LossyEvictions))
	})
}

// Leased watches l, a [hotkey.Leased], as [LeaseKeys], [LeaseRefills]
// (its Takes: remote calls that topped up a lease) and [LeaseDroppedUnits]
// of policy. It fails like [Watches.Memory].
func (w *Watches) Leased(policy string, l interface{ Stats() hotkey.LeaseStats }) error {
	if l == nil || l == (*hotkey.Leased)(nil) {
		return errors.New("WatchLeased: nil limiter")
	}
	return w.add("WatchLeased", policy, func(emit func(Metric, int64)) {
		s := l.Stats()
		emit(LeaseKeys, int64(s.Keys))
		emit(LeaseRefills, int64(s.Takes))
		emit(LeaseDroppedUnits, int64(s.Dropped))
	})
}

// Failover watches f, a [core.Failover], as [BreakerOpen] of policy: 1
// while its circuit breaker is open, else 0. It fails like
// [Watches.Memory].
func (w *Watches) Failover(policy string, f interface{ BreakerOpen() bool }) error {
	if f == nil || f == (*core.Failover)(nil) {
		return errors.New("WatchFailover: nil limiter")
	}
	return w.add("WatchFailover", policy, func(emit func(Metric, int64)) {
		v := int64(0)
		if f.BreakerOpen() {
			v = 1
		}
		emit(BreakerOpen, v)
	})
}

func (w *Watches) add(fn, policy string, read func(emit func(Metric, int64))) error {
	label := Label(policy)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.list {
		if x.fn == fn && x.label == label {
			return fmt.Errorf("%s: policy %q is watched already", fn, label)
		}
	}
	w.list = append(w.list, watch{fn: fn, label: label, read: read})
	return nil
}

// Read reads every watched limiter, in the order they were watched,
// calling emit with the policy label, the metric and its value.
func (w *Watches) Read(emit func(label string, m Metric, v int64)) {
	w.mu.Lock()
	list := w.list[:len(w.list):len(w.list)]
	w.mu.Unlock()
	for _, x := range list {
		x.read(func(m Metric, v int64) { emit(x.label, m, v) })
	}
}
