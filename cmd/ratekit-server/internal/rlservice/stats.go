package rlservice

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The per descriptor statistics, with envoyproxy/ratelimit's names and
// meanings, counted in units (hits_addend), not calls. Each is a counter
// with the labels (OTel: attributes) domain and key, the limit's
// descriptor path after the domain ("path_/login.user"); the Prometheus
// name is the OTel name with '_' for '.', as envoyproxy/ratelimit's
// statsd names map to Prometheus.
const (
	// StatTotalHits counts every unit asked of a limit.
	StatTotalHits = "ratelimit.service.rate_limit.total_hits"
	// StatOverLimit counts the units of the requests a limit found over
	// it (shadow ones included).
	StatOverLimit = "ratelimit.service.rate_limit.over_limit"
	// StatNearLimit counts the units admitted past the near-limit
	// threshold, NearLimitRatio of the limit.
	StatNearLimit = "ratelimit.service.rate_limit.near_limit"
	// StatWithinLimit counts the units a limit found within it.
	StatWithinLimit = "ratelimit.service.rate_limit.within_limit"
	// StatShadowMode counts the units a shadow limit found over it.
	StatShadowMode = "ratelimit.service.rate_limit.shadow_mode"
)

var statNames = [...]string{StatTotalHits, StatOverLimit, StatNearLimit, StatWithinLimit, StatShadowMode}

var statHelp = [...]string{
	"Units (hits_addend) asked of the limit.",
	"Units of the requests the limit found over it, shadow ones included.",
	"Units admitted past the near-limit threshold of the limit.",
	"Units the limit found within it.",
	"Units a shadow limit found over it.",
}

const (
	totalHits = iota
	overLimit
	nearLimit
	withinLimit
	shadowMode
	numStats
)

// stats counts the per descriptor statistics in Prometheus, OTel or both.
// On OTel each is an observable counter, reported from one atomic count
// per series, so that counting costs a request one atomic addition per
// statistic, as ratekitotel's counters do.
type stats struct {
	near float64 // NearLimitRatio
	prom [numStats]*prometheus.CounterVec
	otel [numStats]metric.Int64ObservableCounter
	hasP bool
	hasO bool

	mu    sync.Mutex
	sets  map[[2]string]*statSet // by domain and key
	order []*statSet             // for the OTel callback
	count atomic.Int64           // the series built, for tests
}

// maxStatSets bounds the series of each statistic: past it, the units of
// the limits not yet counted count in the domain and key "_other".
const maxStatSets = 1 << 17

// statSet is one limit's counters in one domain.
type statSet struct {
	prom [numStats]prometheus.Counter
	n    [numStats]atomic.Int64 // for OTel
	attr metric.ObserveOption
}

func newStats(o Options) (*stats, error) {
	if o.Registerer == nil && o.MeterProvider == nil {
		return nil, nil
	}
	s := &stats{near: o.NearLimitRatio, sets: make(map[[2]string]*statSet)}
	if s.near == 0 {
		s.near = DefaultNearLimitRatio
	}
	if s.near <= 0 || s.near >= 1 {
		return nil, fmt.Errorf("rlservice: NearLimitRatio %v: want a number between 0 and 1", s.near)
	}
	if o.Registerer != nil {
		for i, name := range statNames {
			v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: strings.ReplaceAll(name, ".", "_"), Help: statHelp[i]}, []string{"domain", "key"})
			if err := o.Registerer.Register(v); err != nil {
				return nil, fmt.Errorf("rlservice: register %s: %w", name, err)
			}
			s.prom[i] = v
		}
		s.hasP = true
	}
	if o.MeterProvider != nil {
		meter := o.MeterProvider.Meter("github.com/ratekit/ratekit/cmd/ratekit-server")
		obs := make([]metric.Observable, numStats)
		for i, name := range statNames {
			c, err := meter.Int64ObservableCounter(name, metric.WithDescription(statHelp[i]), metric.WithUnit("{hit}"))
			if err != nil {
				return nil, fmt.Errorf("rlservice: %s: %w", name, err)
			}
			s.otel[i], obs[i] = c, c
		}
		if _, err := meter.RegisterCallback(s.observe, obs...); err != nil {
			return nil, fmt.Errorf("rlservice: OTel callback: %w", err)
		}
		s.hasO = true
	}
	return s, nil
}

// observe reports every series to OTel.
func (s *stats) observe(_ context.Context, o metric.Observer) error {
	s.mu.Lock()
	sets := s.order
	s.mu.Unlock()
	for _, set := range sets {
		for i := range numStats {
			o.ObserveInt64(s.otel[i], set.n[i].Load(), set.attr)
		}
	}
	return nil
}

// DefaultNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO: units
// past 0.8 of a limit are near it.
const DefaultNearLimitRatio = 0.8

// set returns the counters of the limit id in domain, one set per domain
// and key, whatever the reloads.
func (s *stats) set(domain, id string) *statSet {
	k := [2]string{domain, strings.TrimPrefix(id, domain+".")}
	s.mu.Lock()
	defer s.mu.Unlock()
	if set := s.sets[k]; set != nil {
		return set
	}
	if len(s.sets) >= maxStatSets {
		k = [2]string{"_other", "_other"}
		if set := s.sets[k]; set != nil {
			return set
		}
	}
	set := &statSet{}
	if s.hasP {
		for i, v := range s.prom {
			set.prom[i] = v.WithLabelValues(k[0], k[1])
		}
	}
	if s.hasO {
		set.attr = metric.WithAttributeSet(attribute.NewSet(attribute.String("domain", k[0]), attribute.String("key", k[1])))
	}
	s.sets[k] = set
	s.order = append(s.order[:len(s.order):len(s.order)], set)
	s.count.Add(1)
	return set
}

// setFor returns the counters of it's limit in domain, kept in its
// limitState when the limit is the domain's own.
func (s *stats) setFor(domain string, it *item) *statSet {
	ls := it.ls
	if ls == nil || it.limit.Domain != domain {
		return s.set(domain, it.limit.ID) // a descriptor's own override
	}
	if set := ls.stats.Load(); set != nil {
		return set
	}
	set := s.set(domain, it.limit.ID)
	ls.stats.Store(set)
	return set
}

// record counts a request's items: denied says the request was refused.
// A limit counts its units (hits_addend; a check's 0) in total_hits, and
// in over_limit when it found them over it (and in shadow_mode when it is
// a shadow limit), else in within_limit — a limit that would have allowed
// a request another refused counts it within, nothing counted in it. The
// units a request admitted past NearLimitRatio of a limit count in
// near_limit too. Unlimited limits, refunds and the ones replaced count
// nothing.
func (s *stats) record(domain string, items []item, denied bool) {
	for k := range items {
		it := &items[k]
		if it.kind == unlimited || it.kind == refund {
			continue
		}
		units := it.cost
		if it.kind == check {
			units = 0
		}
		var v [numStats]int64
		v[totalHits] = units
		if it.over {
			v[overLimit] = units
			if it.limit.Shadow {
				v[shadowMode] = units
			}
		} else {
			v[withinLimit] = units
			if !denied && it.kind != check && it.kind != denyAll {
				v[nearLimit] = nearUnits(it, units, s.near)
			}
		}
		set := s.setFor(domain, it)
		for i, n := range v {
			if n == 0 && i != totalHits {
				continue
			}
			if s.hasP {
				set.prom[i].Add(float64(n))
			}
			set.n[i].Add(n)
		}
	}
}

// nearUnits returns how many of the units an item counted lie past ratio
// of its limit: used after the request, less the larger of the threshold
// and what was used before it.
func nearUnits(it *item, units int64, ratio float64) int64 {
	limit := it.limit.Policy.Limit
	if limit <= 0 {
		return 0
	}
	threshold := int64(math.Floor(float64(limit) * ratio))
	after := limit - max(min(it.d.Remaining, limit), 0)
	before := after - units
	if after <= threshold {
		return 0
	}
	return after - max(threshold, before)
}
