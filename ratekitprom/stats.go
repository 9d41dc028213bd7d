package ratekitprom

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
)

// MemoryStats is what [Metrics.WatchMemory] reads: a [core.Memory].
type MemoryStats interface {
	Stats() core.Stats
}

// LeaseStats is what [Metrics.WatchLeased] reads: a [hotkey.Leased].
type LeaseStats interface {
	Stats() hotkey.LeaseStats
}

// BreakerState is what [Metrics.WatchFailover] reads: a [core.Failover].
type BreakerState interface {
	BreakerOpen() bool
}

// WatchMemory has every scrape report mem's Stats as
// ratekit_memory_keys, ratekit_memory_fresh_drops_total and
// ratekit_memory_lossy_evictions_total with the label policy. Stats locks
// each shard in turn: cheap at scrape intervals. It fails if mem is nil or
// another Memory is watched under the same policy name.
func (m *Metrics) WatchMemory(policy string, mem MemoryStats) error {
	if mem == nil {
		return errors.New("ratekitprom: WatchMemory: nil limiter")
	}
	return m.stats.add("WatchMemory", policy, &m.stats.memory, func(ch chan<- prometheus.Metric, label string) {
		s := mem.Stats()
		ch <- prometheus.MustNewConstMetric(m.stats.memKeys, prometheus.GaugeValue, float64(s.Keys), label)
		ch <- prometheus.MustNewConstMetric(m.stats.memFresh, prometheus.CounterValue, float64(s.FreshDrops), label)
		ch <- prometheus.MustNewConstMetric(m.stats.memLossy, prometheus.CounterValue, float64(s.LossyEvictions), label)
	})
}

// WatchLeased has every scrape report l's Stats as ratekit_lease_keys,
// ratekit_lease_refills_total (its Takes: remote calls that topped up a
// lease) and ratekit_lease_dropped_units_total with the label policy. It
// fails if l is nil or another Leased is watched under the same policy name.
func (m *Metrics) WatchLeased(policy string, l LeaseStats) error {
	if l == nil {
		return errors.New("ratekitprom: WatchLeased: nil limiter")
	}
	return m.stats.add("WatchLeased", policy, &m.stats.lease, func(ch chan<- prometheus.Metric, label string) {
		s := l.Stats()
		ch <- prometheus.MustNewConstMetric(m.stats.leaseKeys, prometheus.GaugeValue, float64(s.Keys), label)
		ch <- prometheus.MustNewConstMetric(m.stats.leaseRefills, prometheus.CounterValue, float64(s.Takes), label)
		ch <- prometheus.MustNewConstMetric(m.stats.leaseDropped, prometheus.CounterValue, float64(s.Dropped), label)
	})
}

// WatchFailover has every scrape report whether f's circuit breaker is open
// as ratekit_breaker_open (1 or 0) with the label policy. Its store errors
// and breaker openings are counted as events: give the Failover the options
// observe.FailoverHooks(m, policy). It fails if f is nil or another Failover
// is watched under the same policy name.
func (m *Metrics) WatchFailover(policy string, f BreakerState) error {
	if f == nil {
		return errors.New("ratekitprom: WatchFailover: nil limiter")
	}
	return m.stats.add("WatchFailover", policy, &m.stats.breaker, func(ch chan<- prometheus.Metric, label string) {
		v := 0.0
		if f.BreakerOpen() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.stats.breakerOpen, prometheus.GaugeValue, v, label)
	})
}

// statsCollector reads the watched limiters at each scrape.
type statsCollector struct {
	mu                          sync.Mutex
	memory, lease, breaker      []watch
	memKeys, memFresh, memLossy *prometheus.Desc
	leaseKeys, leaseRefills     *prometheus.Desc
	leaseDropped, breakerOpen   *prometheus.Desc
}

type watch struct {
	label   string
	collect func(ch chan<- prometheus.Metric, label string)
}

func (s *statsCollector) init() {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"policy"}, nil)
	}
	s.memKeys = desc("ratekit_memory_keys", "Keys a Memory limiter holds, fresh ones not yet dropped included.")
	s.memFresh = desc("ratekit_memory_fresh_drops_total", "Keys a Memory limiter dropped because they had become fresh: no information lost.")
	s.memLossy = desc("ratekit_memory_lossy_evictions_total", "Keys a Memory limiter evicted while they still held usage, because it was full.")
	s.leaseKeys = desc("ratekit_lease_keys", "Keys a Leased limiter holds a lease for.")
	s.leaseRefills = desc("ratekit_lease_refills_total", "Remote calls a Leased limiter made to top up a lease.")
	s.leaseDropped = desc("ratekit_lease_dropped_units_total", "Leased units that expired (or were evicted or reset) before they were spent.")
	s.breakerOpen = desc("ratekit_breaker_open", "1 while a Failover's circuit breaker is open, else 0.")
}

func (s *statsCollector) add(fn, policy string, list *[]watch, collect func(chan<- prometheus.Metric, string)) error {
	label := policy
	if label == "" {
		label = UnnamedPolicy
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range *list {
		if w.label == label {
			return fmt.Errorf("ratekitprom: %s: policy %q is watched already", fn, label)
		}
	}
	*list = append(*list, watch{label: label, collect: collect})
	return nil
}

func (s *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.memKeys, s.memFresh, s.memLossy, s.leaseKeys, s.leaseRefills, s.leaseDropped, s.breakerOpen} {
		ch <- d
	}
}

func (s *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	watches := make([]watch, 0, len(s.memory)+len(s.lease)+len(s.breaker))
	watches = append(append(append(watches, s.memory...), s.lease...), s.breaker...)
	s.mu.Unlock()
	for _, w := range watches {
		w.collect(ch, w.label)
	}
}
