package ratekitprom

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// latencyVec is ratekit_store_latency_seconds: one histogram per policy
// label. It counts in whole nanoseconds, with two atomic additions per
// observation (its bucket and the sum), and becomes Prometheus histograms
// only when scraped: a prometheus.Histogram takes twice the atomic
// operations to keep its count, buckets and float sum consistent, and this
// is on the path of every request. A scrape that runs while requests are
// observed may see a sum that is a few observations ahead of or behind the
// buckets; the count is always the sum of the buckets.
type latencyVec struct {
	desc   *prometheus.Desc
	bounds []float64 // upper bounds, seconds, as exposed
	ns     []int64   // the same bounds in nanoseconds

	mu    sync.Mutex
	hists map[[2]string]*latencyHist // by policy and rule label
}

// latencyHist is the histogram of one policy.
type latencyHist struct {
	ns     []int64         // the vector's bounds, nanoseconds
	counts []atomic.Uint64 // one per bound, then +Inf
	sum    atomic.Int64    // nanoseconds
}

func newLatencyVec(name, help string, labels []string, bounds []float64) *latencyVec {
	v := &latencyVec{
		desc:   prometheus.NewDesc(name, help, labels, nil),
		bounds: bounds,
		ns:     make([]int64, len(bounds)),
		hists:  map[[2]string]*latencyHist{},
	}
	for i, b := range bounds {
		// A duration of d ns is at most b seconds when d <= b·1e9; round
		// away the float error of bounds such as 2.5e-6.
		x := b * 1e9
		if r := math.Round(x); math.Abs(x-r) < 1e-3 {
			x = r
		}
		v.ns[i] = int64(math.Floor(x))
	}
	return v
}

// child returns the histogram of a policy label and a rule label,
// creating it at its first use.
func (v *latencyVec) child(policy, rule string) *latencyHist {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := [2]string{policy, rule}
	h, ok := v.hists[k]
	if !ok {
		h = &latencyHist{ns: v.ns, counts: make([]atomic.Uint64, len(v.ns)+1)}
		v.hists[k] = h
	}
	return h
}

// Record counts one duration.
func (h *latencyHist) Record(_ context.Context, d time.Duration) {
	i := 0
	for i < len(h.ns) && int64(d) > h.ns[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// Describe sends the vector's one descriptor.
func (v *latencyVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect sends one histogram per policy.
func (v *latencyVec) Collect(ch chan<- prometheus.Metric) {
	v.mu.Lock()
	hists := make(map[[2]string]*latencyHist, len(v.hists))
	for k, h := range v.hists {
		hists[k] = h
	}
	v.mu.Unlock()
	for k, h := range hists {
		buckets := make(map[float64]uint64, len(v.bounds))
		var n uint64
		for i, b := range v.bounds {
			n += h.counts[i].Load()
			buckets[b] = n
		}
		n += h.counts[len(v.bounds)].Load()
		ch <- prometheus.MustNewConstHistogram(v.desc, n, float64(h.sum.Load())/1e9, buckets, k[0], k[1])
	}
}
