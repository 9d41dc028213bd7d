// Package rlservice decides Envoy's rate limit requests
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) by a
// [rlconfig.Config], on ratekit's memory store.
//
// A request's descriptors are decided all or nothing: each descriptor that
// matches a limit is one layer of one core.Layered decision, with its own
// key (its entries) and its own cost (its hits_addend, else the request's,
// else 1). When one layer denies, nothing is counted in any, and a denied
// request counts nothing: a client that keeps knocking does not push its
// own window further away. A limit in shadow mode is decided after the
// others, counted only when they allowed the request, and always reported
// OK. A descriptor whose hits_addend is 0 is a check: it counts nothing,
// and is over the limit when one more unit would be.
//
// [Limiter.SetConfig] replaces the configuration atomically, keeping every
// limit's usage: a limit of the same identity ([rlconfig.Limit.ID]) and
// algorithm keeps its store, converted by core.Memory.SetPolicy when its
// numbers changed; one whose algorithm changed starts afresh.
package rlservice

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlconfig"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observe"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/redis/go-redis/v9"
)

// Bounds on a request and on the state its fields can create.
const (
	// MaxDescriptors is the most descriptors of one request.
	MaxDescriptors = 64
	// MaxOverrides is the most distinct limits that requests' own
	// overrides (a descriptor's limit field, set in Envoy's configuration)
	// keep a store for.
	MaxOverrides = 256
	// maxLayered is the most combinations of limits that keep a
	// core.Layered built; past it a request builds its own.
	maxLayered = 4096
)

// Options configure a [Limiter]. The zero value is the default.
type Options struct {
	// Clock is the time limits are decided by. Default: core.SystemClock.
	Clock core.Clock
	// MaxKeys is the most keys each limit's store holds
	// (core.WithMaxKeys). Default: core.DefaultMaxKeys.
	MaxKeys int
	// NoHeaders leaves RateLimit, RateLimit-Policy and Retry-After out of
	// the responses' response_headers_to_add.
	NoHeaders bool
	// Redis, when set, holds the limits' counts, through redisstore, instead
	// of this process's memory. A request's descriptors are one atomic
	// script on a single node or Sentinel; on Redis Cluster, one script per
	// hash slot, decided slot by slot all or nothing
	// (redisstore.Layered.AllowCostsBySlot): a slot that refuses has the
	// slots before it give their units back, so that nothing stays counted
	// and no more is admitted than one script would admit.
	// Redis's TIME is the clock unless Clock is set.
	Redis redis.UniversalClient
	// RedisPrefix begins every Redis key. Default: [DefaultRedisPrefix].
	RedisPrefix string
	// RedisTimeout bounds each Redis call (redisstore.WithTimeout).
	// Default: redisstore's.
	RedisTimeout time.Duration
	// BreakerFailures and BreakerCoolDown set the circuit breaker in front
	// of Redis (core.WithBreaker): after BreakerFailures outages in a row
	// (default [DefaultBreakerFailures]), requests are decided by their
	// domains' failure policies at once, without calling Redis, until a
	// request probes it after BreakerCoolDown (default
	// [DefaultBreakerCoolDown]) and finds it.
	BreakerFailures int
	BreakerCoolDown time.Duration
	// OnBreaker, when set, is called with true when the breaker opens and
	// false when it closes (core.WithBreakerHook).
	OnBreaker func(open bool)
	// Registerer, when set, registers the per descriptor statistics
	// envoyproxy/ratelimit keeps (total_hits, over_limit, near_limit,
	// within_limit, shadow_mode; see [StatTotalHits]), counted in units,
	// as Prometheus counters.
	Registerer prometheus.Registerer
	// MeterProvider, when set, counts the same statistics as OTel
	// counters of its meter.
	MeterProvider metric.MeterProvider
	// NearLimitRatio is the part of a limit past which admitted units
	// count in near_limit. Default: [DefaultNearLimitRatio].
	NearLimitRatio float64
	// Observer, when set, is told of each limit's decision in each request
	// (see [Limiter.ShouldRateLimit]), for metrics such as ratekitprom's:
	// the event's Rule is the domain, its Policy the limit's policy name.
	Observer observe.Observer
}

// DefaultRedisPrefix is the Redis key prefix unless Options.RedisPrefix
// says otherwise.
const DefaultRedisPrefix = "ratekit-server"

// A Limiter decides rate limit requests by the configuration in force. It
// implements Envoy's RateLimitServiceServer and is safe for concurrent use.
type Limiter struct {
	pb.UnimplementedRateLimitServiceServer

	o   Options
	cur atomic.Pointer[state]
	mu  sync.Mutex // serializes SetConfig

	clockSet bool // Options.Clock was given

	ovMu      sync.Mutex
	overrides map[core.Policy]*limitState

	stats   *stats         // nil: no per descriptor statistics
	breaker *core.Failover // in front of Redis; nil on memory
}

// state is what one configuration decides by; it never changes.
type state struct {
	cfg    *rlconfig.Config
	limits map[*rlconfig.Limit]*limitState
	byID   map[string]*limitState

	layeredMu sync.Mutex
	layered   map[string]layer

	// local decides, on Redis, the requests of the domains whose failure
	// policy is fallback when Redis fails: their limits in memory, each a
	// share of itself. Nil when no domain falls back.
	local *state
}

type limitState struct {
	id    uint64 // unique in the process, for layeredFor's cache
	limit *rlconfig.Limit
	one   core.Limiter // the limit alone: mem, or the Redis store's; nil for an unlimited limit or one of 0 requests
	mem   *core.Memory // on memory
	stats atomic.Pointer[statSet]
}

// New returns a Limiter deciding by cfg.
func New(cfg *rlconfig.Config, o Options) (*Limiter, error) {
	clockSet := o.Clock != nil
	if o.Clock == nil {
		o.Clock = core.SystemClock{}
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = core.DefaultMaxKeys
	}
	if o.RedisPrefix == "" {
		o.RedisPrefix = DefaultRedisPrefix
	}
	l := &Limiter{o: o, clockSet: clockSet, overrides: make(map[core.Policy]*limitState)}
	st, err := newStats(o)
	if err != nil {
		return nil, err
	}
	l.stats = st
	if o.Redis != nil {
		if l.breaker, err = newBreaker(o); err != nil {
			return nil, err
		}
	}
	if err := l.SetConfig(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// Config returns the configuration in force.
func (l *Limiter) Config() *rlconfig.Config { return l.cur.Load().cfg }

func (l *Limiter) newMemory(p core.Policy) (*core.Memory, error) {
	return core.New(p, core.WithClock(l.o.Clock), core.WithMaxKeys(l.o.MaxKeys))
}

// SetConfig makes cfg the configuration in force, keeping the usage of
// every limit that stays (see the package doc). On error nothing changes.
func (l *Limiter) SetConfig(cfg *rlconfig.Config) error {
	if cfg == nil {
		return errors.New("rlservice: SetConfig: nil config")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cur.Load()
	st := &state{cfg: cfg, limits: make(map[*rlconfig.Limit]*limitState), byID: make(map[string]*limitState), layered: make(map[string]layer)}
	type retune struct {
		m *core.Memory
		p core.Policy
	}
	var retunes []retune
	for _, lim := range cfg.Limits() {
		ls := &limitState{id: nextID.Add(1), limit: lim}
		if !lim.Unlimited && lim.Policy.Limit > 0 {
			var prev *core.Memory
			if old != nil {
				if o := old.byID[lim.ID]; o != nil {
					prev = o.mem
				}
			}
			switch {
			case l.o.Redis != nil:
				rl, err := l.newRedis(lim.Policy)
				if err != nil {
					return fmt.Errorf("rlservice: %s: %w", lim.ID, err)
				}
				ls.one = rl
			case prev != nil && prev.Policy().Algorithm == lim.Policy.Algorithm:
				ls.mem = prev
				if prev.Policy() != lim.Policy {
					retunes = append(retunes, retune{prev, lim.Policy})
				}
			default:
				m, err := l.newMemory(lim.Policy)
				if err != nil {
					return fmt.Errorf("rlservice: %s: %w", lim.ID, err)
				}
				ls.mem = m
			}
			if ls.mem != nil {
				ls.one = ls.mem
			}
		}
		st.limits[lim] = ls
		st.byID[lim.ID] = ls
	}
	// SetPolicy fails only for an invalid policy or another algorithm:
	// both are checked before any store changes.
	for _, r := range retunes {
		if err := r.p.Validate(); err != nil {
			return fmt.Errorf("rlservice: %w", err)
		}
	}
	for _, r := range retunes {
		if err := r.m.SetPolicy(r.p); err != nil {
			return fmt.Errorf("rlservice: %w", err)
		}
	}
	if l.o.Redis != nil {
		var oldLocal *state
		if old != nil {
			oldLocal = old.local
		}
		local, err := l.localState(cfg, oldLocal)
		if err != nil {
			return err
		}
		st.local = local
	}
	l.cur.Store(st)
	return nil
}

// localState builds the memory limiters that the domains failing back
// decide by when Redis fails, keeping those of old whose policy stays.
func (l *Limiter) localState(cfg *rlconfig.Config, old *state) (*state, error) {
	var local *state
	for _, lim := range cfg.Limits() {
		f := cfg.Failure(lim.Domain)
		if f.Mode != rlconfig.FailFallback || lim.Unlimited || lim.Policy.Limit == 0 {
			continue
		}
		if local == nil {
			local = &state{cfg: cfg, byID: make(map[string]*limitState), layered: make(map[string]layer)}
		}
		p := lim.Policy
		n := int64(max(f.Instances, 1))
		p.Limit = max((p.Limit+n-1)/n, 1)
		if p.Burst > 0 {
			p.Burst = max((p.Burst+n-1)/n, 1)
		}
		share := *lim
		share.Policy = p
		ls := &limitState{id: nextID.Add(1), limit: &share}
		if old != nil {
			if o := old.byID[lim.ID]; o != nil && o.mem.Policy() == p {
				ls.mem = o.mem
			}
		}
		if ls.mem == nil {
			m, err := l.newMemory(p)
			if err != nil {
				return nil, fmt.Errorf("rlservice: %s: fallback: %w", lim.ID, err)
			}
			ls.mem = m
		}
		ls.one = ls.mem
		local.byID[lim.ID] = ls
	}
	return local, nil
}

// item is one descriptor of a request that a limit applies to.
type item struct {
	i     int // the descriptor's index
	limit *rlconfig.Limit
	ls    *limitState
	key   string
	cost  int64
	kind  kind
	d     core.Decision
	over  bool // decided over the limit
}

type kind uint8

const (
	enforced kind = iota
	check         // hits_addend 0: counts nothing
	shadow
	denyAll // requests_per_unit 0
	unlimited
	refund // is_negative_hits: counts nothing
)

// ShouldRateLimit decides a request; see the package doc. A request without
// a domain or descriptors, or with more than [MaxDescriptors], is
// InvalidArgument.
func (l *Limiter) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rlservice: the rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return nil, status.Error(codes.InvalidArgument, "rlservice: the descriptor list must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "rlservice: %d descriptors, at most %d", len(req.GetDescriptors()), MaxDescriptors)
	}
	st := l.cur.Load()
	resp := &pb.RateLimitResponse{Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	items := make([]item, 0, len(req.Descriptors))
	var keys, values []string
	var keyBuf []byte
	replaced := map[string]bool(nil)
	for i, desc := range req.Descriptors {
		keys, values = keys[:0], values[:0]
		for _, e := range desc.GetEntries() {
			keys, values = append(keys, e.GetKey()), append(values, e.GetValue())
		}
		it := item{i: i, cost: cost(req, desc)}
		if ov := desc.GetLimit(); ov != nil {
			ls, err := l.override(ov)
			if err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			it.limit, it.ls = ls.limit, ls
			keyBuf = append(keyBuf[:0], "\x00override\x00"...)
			keyBuf = append(keyBuf, req.Domain...)
			for j := range keys {
				keyBuf = append(append(append(append(append(keyBuf, 0), keys[j]...), 0), values[j]...), 0)
			}
		} else {
			var lim *rlconfig.Limit
			lim, keyBuf = st.cfg.Match(req.Domain, keys, values, keyBuf[:0])
			if lim == nil {
				resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
				continue
			}
			it.limit, it.ls = lim, st.limits[lim]
		}
		if l.o.Redis != nil {
			// Each limit's keys apart, whatever the policies' names.
			it.key = it.limit.ID + "\x00" + string(keyBuf)
		} else {
			it.key = string(keyBuf)
		}
		for _, r := range it.limit.Replaces {
			if replaced == nil {
				replaced = make(map[string]bool)
			}
			replaced[r] = true
		}
		switch {
		case it.limit.Unlimited:
			it.kind = unlimited
		case it.limit.Policy.Limit == 0:
			it.kind = denyAll
		case desc.GetIsNegativeHits():
			it.kind = refund
		case it.cost == 0:
			it.kind, it.cost = check, 1
		case it.limit.Shadow:
			it.kind = shadow
		}
		items = append(items, it)
	}
	// A limit named in another's replaces is not applied.
	if replaced != nil {
		items = slices.DeleteFunc(items, func(it item) bool {
			if it.limit.Name != "" && replaced[it.limit.Name] {
				resp.Statuses[it.i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
				return true
			}
			return false
		})
	}
	var began time.Time
	if l.o.Observer != nil {
		began = l.o.Clock.Now()
	}
	var denied bool
	var err error
	if l.breaker != nil {
		denied, err = l.decideRedis(ctx, st, items)
	} else {
		denied, err = l.decide(st, items)
	}
	if l.o.Observer != nil {
		l.observe(ctx, req.Domain, items, denied, err, l.o.Clock.Now().Sub(began))
	}
	if err != nil {
		// The store failed (Redis unreachable, a timeout), or the breaker
		// is open after its outages: the domain's failure policy decides.
		switch st.cfg.Failure(req.Domain).Mode {
		case rlconfig.FailOpen:
			denied = false
			for k := range items {
				items[k].over = false
				items[k].d = core.Decision{Allowed: true, Limit: items[k].limit.Policy.Limit}
			}
		case rlconfig.FailFallback:
			if denied, err = l.fallback(st, items); err != nil {
				return nil, status.Error(codes.Unavailable, err.Error())
			}
		default:
			// Envoy's failure_mode_deny decides what the request gets.
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	if l.stats != nil {
		l.stats.record(req.Domain, items, denied)
	}
	resp.OverallCode = pb.RateLimitResponse_OK
	if denied {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	for k := range items {
		it := &items[k]
		resp.Statuses[it.i] = descriptorStatus(it)
	}
	if !l.o.NoHeaders {
		resp.ResponseHeadersToAdd = headers(items, denied)
	}
	return resp, nil
}

// fallback decides items by the state's local limiters. A limit without
// one (a descriptor's own override) is left out, as if unlimited.
func (l *Limiter) fallback(st *state, items []item) (bool, error) {
	if st.local == nil {
		return false, errors.New("rlservice: no fallback limiters")
	}
	for k := range items {
		it := &items[k]
		it.d, it.over = core.Decision{}, false
		if it.kind == unlimited || it.kind == denyAll {
			continue
		}
		ls := st.local.byID[it.limit.ID]
		if ls == nil {
			it.kind = unlimited
			continue
		}
		it.ls, it.limit = ls, ls.limit
	}
	return l.decide(st.local, items)
}

// observe tells the Observer of each limit's decision: an enforced limit's
// as it decided (one that would have allowed a request another refused
// counts it allowed, nothing counted), a check's as a Peek, a shadow
// limit's as a shadow AllowN, or a shadow Peek when the request was
// refused. Unlimited limits and the ones replaced are not reported.
func (l *Limiter) observe(ctx context.Context, domain string, items []item, denied bool, err error, latency time.Duration) {
	for k := range items {
		it := &items[k]
		e := observe.Event{Op: observe.OpAllow, Policy: it.limit.Policy.Name, Rule: domain, Cost: it.cost, Decision: it.d, Latency: latency, Err: err}
		e.Decision.Allowed = !it.over
		switch it.kind {
		case unlimited, refund:
			continue
		case check:
			e.Op, e.Cost = observe.OpPeek, 1
		case shadow:
			e.Shadow, e.Latency = true, 0
			if denied {
				e.Op = observe.OpPeek
			}
		case denyAll:
			e.Decision = core.Decision{Policy: it.limit.Policy, Allowed: it.limit.Shadow}
			e.Shadow = it.limit.Shadow
		}
		if e.Decision.Policy.Name == "" {
			e.Decision.Policy = it.limit.Policy
		}
		l.o.Observer.Observe(ctx, e)
	}
}

// cost is a descriptor's hits: its own hits_addend when set (0 included),
// else the request's, else 1, as envoyproxy/ratelimit counts them.
func cost(req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), math.MaxInt64))
	}
	return int64(max(1, req.GetHitsAddend()))
}

// decide decides the items, all or nothing, and reports whether the
// request is denied.
func (l *Limiter) decide(st *state, items []item) (denied bool, err error) {
	ctx := context.Background()
	var enf []*item
	for k := range items {
		it := &items[k]
		switch it.kind {
		case enforced:
			if it.cost > it.limit.Policy.Capacity() {
				// It can never fit: over the limit, whatever the others say.
				it.over, denied = true, true
				d, err := it.ls.one.Peek(ctx, it.key, 1)
				if err != nil {
					return false, err
				}
				it.d = d
				continue
			}
			enf = append(enf, it)
		case denyAll:
			it.over = true
			denied = denied || !it.limit.Shadow
		case check:
			d, err := it.ls.one.Peek(ctx, it.key, it.cost)
			if err != nil {
				return false, err
			}
			it.d, it.over = d, !d.Allowed
			denied = denied || (!d.Allowed && !it.limit.Shadow)
		case refund:
			d, err := it.ls.one.Peek(ctx, it.key, 1)
			if err != nil {
				return false, err
			}
			it.d = d
			it.d.Allowed = true
		}
	}
	if !denied && len(enf) > 0 {
		ok, err := l.charge(st, enf)
		if err != nil {
			return false, err
		}
		denied = !ok
	} else {
		for _, it := range enf {
			d, err := it.ls.one.Peek(ctx, it.key, it.cost)
			if err != nil && !errors.Is(err, core.ErrCostTooHigh) {
				return false, err
			}
			it.d = d
		}
	}
	for k := range items {
		it := &items[k]
		if it.kind != shadow {
			continue
		}
		var d core.Decision
		var err error
		switch {
		case it.cost > it.limit.Policy.Capacity():
			d, err = it.ls.one.Peek(ctx, it.key, 1)
			d.Allowed = false
		case denied:
			d, err = it.ls.one.Peek(ctx, it.key, it.cost)
		default:
			d, err = it.ls.one.AllowN(ctx, it.key, it.cost)
		}
		if err != nil {
			return false, err
		}
		it.d, it.over = d, !d.Allowed
	}
	return denied, nil
}

// charge counts the enforced items all or nothing and reports whether they
// were allowed, recording each one's Decision. Items of distinct limits
// are one core.Layered decision. Two items of one limit and key are one
// layer of their summed cost; of one limit and two keys, they are decided
// in rounds of distinct limits, and a round that denies gives back what
// the rounds before it counted (core.Layered.RefundCosts), so nothing
// stays counted — but a request decided meanwhile may see those units
// taken.
func (l *Limiter) charge(st *state, enf []*item) (bool, error) {
	ctx := context.Background()
	if len(enf) == 1 {
		it := enf[0]
		d, err := it.ls.one.AllowN(ctx, it.key, it.cost)
		if err != nil {
			return false, err
		}
		it.d, it.over = d, !d.Allowed
		return d.Allowed, nil
	}
	// Merge the items of one limit and key.
	var rounds [][]*item
	var merged []*item
	var dups map[*item]*item // an item merged into another
	defer func() {
		for it, into := range dups {
			it.d, it.over = into.d, into.over
		}
	}()
	for _, it := range enf {
		if j := slices.IndexFunc(merged, func(o *item) bool { return o.ls == it.ls && o.key == it.key }); j >= 0 {
			if dups == nil {
				dups = make(map[*item]*item)
			}
			merged[j].cost += it.cost
			dups[it] = merged[j]
			continue
		}
		merged = append(merged, it)
	}
	for _, it := range merged {
		if it.cost > it.limit.Policy.Capacity() {
			// The summed cost can never fit: denied, nothing counted.
			for _, o := range merged {
				d, err := o.ls.one.Peek(ctx, o.key, min(o.cost, o.limit.Policy.Capacity()))
				if err != nil {
					return false, err
				}
				o.d, o.over = d, o == it || !d.Allowed
			}
			return false, nil
		}
	}
	for _, it := range merged {
		placed := false
		for r := range rounds {
			if !slices.ContainsFunc(rounds[r], func(o *item) bool { return o.ls == it.ls }) {
				rounds[r] = append(rounds[r], it)
				placed = true
				break
			}
		}
		if !placed {
			rounds = append(rounds, []*item{it})
		}
	}
	type done struct {
		lay   layer
		keys  []string
		costs []int64
		at    time.Time
	}
	var counted []done
	for _, round := range rounds {
		lay, err := l.layeredFor(st, round)
		if err != nil {
			return false, err
		}
		keys := make([]string, len(round))
		costs := make([]int64, len(round))
		for j, it := range round {
			keys[j], costs[j] = it.key, it.cost
		}
		ld, err := lay.AllowCosts(ctx, keys, costs, make([]core.Decision, 0, len(round)))
		if err != nil {
			return false, err
		}
		for j, it := range round {
			it.d = ld.Layers[j]
			it.over = !it.d.Allowed
		}
		if !ld.Allowed {
			for _, c := range counted {
				if err := c.lay.RefundCosts(ctx, c.keys, c.costs, l.o.Clock.Now().Sub(c.at)); err != nil {
					return false, err
				}
			}
			// The items of the rounds not decided are reported as they are.
			for _, later := range rounds[len(counted)+1:] {
				for _, it := range later {
					if it.d, err = it.ls.one.Peek(ctx, it.key, it.cost); err != nil {
						return false, err
					}
				}
			}
			return false, nil
		}
		counted = append(counted, done{lay, keys, costs, l.o.Clock.Now()})
	}
	return true, nil
}

// layer is a layered decision over several limits: a core.Layered on
// memory, the Redis store's layered limiter on Redis, slot by slot on a
// Cluster.
type layer interface {
	AllowCosts(ctx context.Context, keys []string, costs []int64, dst []core.Decision) (core.LayeredDecision, error)
	RefundCosts(ctx context.Context, keys []string, costs []int64, elapsed time.Duration) error
}

// nextID numbers limitStates.
var nextID atomic.Uint64

// layeredFor returns a layer over the items' limits, in order.
func (l *Limiter) layeredFor(st *state, items []*item) (layer, error) {
	var buf [8 * 10]byte
	sig := buf[:0]
	for _, it := range items {
		sig = binary.LittleEndian.AppendUint64(sig, it.ls.id)
	}
	st.layeredMu.Lock()
	lay := st.layered[string(sig)]
	st.layeredMu.Unlock()
	if lay != nil {
		return lay, nil
	}
	if items[0].ls.mem == nil {
		ps := make([]core.Policy, len(items))
		for j, it := range items {
			ps[j] = it.limit.Policy
		}
		rl, err := redisstore.NewLayered(l.o.Redis, ps, l.redisOptions()...)
		if err != nil {
			return nil, fmt.Errorf("rlservice: %w", err)
		}
		lay = redisLayer{rl}
	} else {
		mems := make([]*core.Memory, len(items))
		for j, it := range items {
			mems[j] = it.ls.mem
		}
		ml, err := core.NewLayered(mems...)
		if err != nil {
			return nil, fmt.Errorf("rlservice: %w", err)
		}
		lay = ml
	}
	st.layeredMu.Lock()
	if len(st.layered) < maxLayered {
		st.layered[string(sig)] = lay
	}
	st.layeredMu.Unlock()
	return lay, nil
}

// redisLayer is a redisstore.Layered as a layer: one script on a single
// node or Sentinel, one per slot on a Cluster.
type redisLayer struct{ l *redisstore.Layered }

func (r redisLayer) AllowCosts(ctx context.Context, keys []string, costs []int64, dst []core.Decision) (core.LayeredDecision, error) {
	return r.l.AllowCostsBySlot(ctx, keys, costs, dst)
}

func (r redisLayer) RefundCosts(ctx context.Context, keys []string, costs []int64, elapsed time.Duration) error {
	return r.l.RefundCostsBySlot(ctx, keys, costs, elapsed)
}

func (l *Limiter) redisOptions() []redisstore.Option {
	opts := []redisstore.Option{redisstore.WithPrefix(l.o.RedisPrefix)}
	if l.o.RedisTimeout > 0 {
		opts = append(opts, redisstore.WithTimeout(l.o.RedisTimeout))
	}
	if l.clockSet {
		opts = append(opts, redisstore.WithClock(l.o.Clock))
	}
	return opts
}

func (l *Limiter) newRedis(p core.Policy) (*redisstore.Limiter, error) {
	return redisstore.New(l.o.Redis, p, l.redisOptions()...)
}

// override returns the limit and store of a descriptor's own limit (its
// requests per unit, times its unit_multiplier), a fixed window, one store
// per distinct limit, at most MaxOverrides.
func (l *Limiter) override(ov *rlv3.RateLimitDescriptor_RateLimitOverride) (*limitState, error) {
	unit := pb.RateLimitResponse_RateLimit_Unit(ov.GetUnit())
	w, ok := rlconfig.UnitWindow(unit)
	if !ok {
		return nil, fmt.Errorf("rlservice: descriptor limit override: unit %v", ov.GetUnit())
	}
	mult := int64(1)
	if m := ov.GetUnitMultiplier(); m != nil {
		mult = int64(max(m.GetValue(), 1))
	}
	if time.Duration(mult) > core.MaxWindow/w {
		return nil, fmt.Errorf("rlservice: descriptor limit override: %d %v is longer than %v", mult, unit, core.MaxWindow)
	}
	w *= time.Duration(mult)
	lim := &rlconfig.Limit{
		ID:              fmt.Sprintf("override.%d_per_%d_%s", ov.GetRequestsPerUnit(), mult, strings.ToLower(unit.String())),
		Unit:            unit,
		RequestsPerUnit: ov.GetRequestsPerUnit(),
		Policy:          core.Policy{Algorithm: core.FixedWindow, Limit: int64(ov.GetRequestsPerUnit()), Window: w},
	}
	lim.Policy.Name = lim.ID
	if lim.Policy.Limit == 0 {
		return &limitState{id: nextID.Add(1), limit: lim}, nil
	}
	if lim.Policy.Limit > core.MaxLimit {
		return nil, fmt.Errorf("rlservice: descriptor limit override: %d requests per unit, at most %d", lim.Policy.Limit, core.MaxLimit)
	}
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	if ls := l.overrides[lim.Policy]; ls != nil {
		return ls, nil
	}
	if len(l.overrides) >= MaxOverrides {
		return nil, fmt.Errorf("rlservice: more than %d distinct descriptor limit overrides", MaxOverrides)
	}
	ls := &limitState{id: nextID.Add(1), limit: lim}
	if l.o.Redis != nil {
		rl, err := l.newRedis(lim.Policy)
		if err != nil {
			return nil, fmt.Errorf("rlservice: descriptor limit override: %w", err)
		}
		ls.one = rl
	} else {
		m, err := l.newMemory(lim.Policy)
		if err != nil {
			return nil, fmt.Errorf("rlservice: descriptor limit override: %w", err)
		}
		ls.one, ls.mem = m, m
	}
	l.overrides[lim.Policy] = ls
	return ls, nil
}

// descriptorStatus is an item's status in the response.
func descriptorStatus(it *item) *pb.RateLimitResponse_DescriptorStatus {
	if it.kind == unlimited {
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	s := &pb.RateLimitResponse_DescriptorStatus{
		Code:         pb.RateLimitResponse_OK,
		CurrentLimit: &pb.RateLimitResponse_RateLimit{Name: it.limit.Name, RequestsPerUnit: it.limit.RequestsPerUnit, Unit: it.limit.Unit},
	}
	d := it.d
	if it.kind == denyAll {
		if !it.limit.Shadow {
			s.Code = pb.RateLimitResponse_OVER_LIMIT
		}
		s.DurationUntilReset = durationpb.New(it.limit.Policy.Window)
		return s
	}
	remaining := max(min(d.Remaining, d.Limit), 0)
	reset := d.ResetAfter
	if it.over {
		remaining, reset = 0, d.RetryAfter
		if !it.limit.Shadow {
			s.Code = pb.RateLimitResponse_OVER_LIMIT
		}
	}
	s.LimitRemaining = uint32(min(remaining, math.MaxUint32))
	s.DurationUntilReset = durationpb.New(reset)
	return s
}
