package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

//go:embed layered.lua
var layeredLua string

// ErrCrossSlot reports the keys of one layered decision ([Layered.AllowKeys]
// with a different key per layer) that a Redis Cluster keeps in different
// hash slots, or that a [redis.Ring] may keep on different shards: one
// script cannot reach them all. The limiter finds this out before sending
// anything; it also wraps Redis's own CROSSSLOT error with it.
var ErrCrossSlot = errors.New("the layers' keys lie in different Cluster slots")

// Layered is a [core.MultiKeyLimiter] whose state lives in Redis: several
// policies on one request, such as 10 per second and 1,000 per day on the
// same key, or one limit per client IP and another per account. A request
// passes only if every layer passes, and a request denied by any layer
// counts nothing in any layer. A refund gives back in every layer.
//
// Each decision, and each refund, is one atomic round trip. Its decisions
// are those of a [core.Layered] over the same policies, field for field, and
// each layer shares its counts with a [Limiter] of its policy and prefix.
//
// [Layered.AllowCosts] takes a key and a cost per layer, as
// [core.Layered.AllowCosts] does. On Redis Cluster, use one key for every
// layer ([Layered.AllowN], [Layered.AllowLayers]); per-layer keys
// ([Layered.AllowKeys], AllowCosts) are for a single node or Sentinel, or
// keys of one slot; [Layered.AllowCostsBySlot] decides keys of several
// slots slot by slot, all or nothing, as [RuleStore] decides a rule's
// limits.
//
// A Layered is safe for concurrent use. The zero value is not usable;
// create one with [NewLayered].
type Layered struct {
	// One Lua script, made of the layers' algorithm scripts, checks every layer
	// and writes only if all pass. Its decisions match a core.Layered over
	// core.Memory layers of the same policies on the same clock: the same most
	// restrictive layer (core.MostRestrictive picks it), the same Layers. Each
	// layer keeps its state where a Limiter of its policy with the same prefix
	// keeps it.
	//
	// Keys and Cluster. With one key for every layer (AllowN, AllowLayers), every
	// layer's Redis key carries that key as its hash tag: they lie in one Cluster
	// slot, and the script runs on Cluster as on a single node. With a key per
	// layer (AllowKeys), each layer's Redis key is tagged by its own key, and a
	// script can only run on Cluster if they all hash to one slot, which
	// different keys seldom do.

	run    *Limiter                    // runs the script: client, clock, timeout, batching
	layers []*Limiter                  // each layer's key prefix
	cur    atomic.Pointer[layeredConf] // the policies in force: see SetPolicies
	setMu  sync.Mutex                  // serializes SetPolicies
	margin int64                       // the expiry margin in ms
	slots  bool                        // a Cluster client: the keys must share a slot
	same   bool                        // a Ring: every layer must use the same key
}

// layeredConf is what a [Layered] makes of its policies, published whole
// and never changed: [Layered.SetPolicies] publishes another.
type layeredConf struct {
	policies []core.Policy
	costs    []int64 // each layer's capacity
	script   *redis.Script
	sha      any
	fn       any  // the script's function (functions.go)
	since    any  // as conf's
	subs     subs // the Layereds over its subsets of layers, built as AllowCostsBySlot needs them
}

var _ core.MultiKeyLimiter = (*Layered)(nil)

// NewLayered returns a limiter that lets a request through only when every
// policy does, enforced on Redis through client with one script. The
// options are those of [New], and apply to every layer. It fails when given
// no policy, an invalid one (see [core.Policy.Validate]), or two policies
// that would share state (the same Name and algorithm, or unnamed with the
// same algorithm, limit, window and burst: give them different Names), or
// when an option is invalid.
//
// Like New, it loads the script into Redis, waiting at most the
// [WithTimeout] timeout, or one second, and does not fail if Redis cannot
// be reached.
func NewLayered(client redis.UniversalClient, policies []core.Policy, opts ...Option) (*Layered, error) {
	l, err := buildLayered("NewLayered", client, policies, opts)
	if err != nil {
		return nil, err
	}
	l.run.load(&conf{script: l.cur.Load().script})
	return l, nil
}

// buildLayered is NewLayered, for the constructor named fn, but for
// loading the script: its first call does (EVAL once on NOSCRIPT).
func buildLayered(fn string, client redis.UniversalClient, policies []core.Policy, opts []Option) (*Layered, error) {
	if client == nil {
		return nil, fmt.Errorf("redisstore: %s: a client is required", fn)
	}
	if len(policies) == 0 {
		return nil, fmt.Errorf("redisstore: %s: at least one policy is required", fn)
	}
	o, err := applyOptions(fn, opts)
	if err != nil {
		return nil, err
	}
	l := &Layered{layers: make([]*Limiter, len(policies))}
	segments := make(map[string]int, len(policies))
	for i, p := range policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("redisstore: %s: layer %d: %w", fn, i, err)
		}
		if err := checkCalendar(p); err != nil {
			return nil, fmt.Errorf("redisstore: %s: layer %d: %w", fn, i, err)
		}
		seg := policySegment(p)
		if j, ok := segments[seg]; ok {
			return nil, fmt.Errorf("redisstore: %s: layers %d and %d would share state (%v: a named policy's keys carry its Name and algorithm, an unnamed one's its numbers); give them different Names", fn, j, i, p)
		}
		segments[seg] = i
		l.layers[i] = &Limiter{prefix: o.prefix + ":" + seg + ":{"}
	}
	l.margin = int64((o.margin + time.Millisecond - 1) / time.Millisecond)
	l.run = &Limiter{
		client:  client,
		clock:   o.clock,
		timeout: o.timeout,
	}
	if o.batching {
		l.run.batch = &batcher{l: l.run, max: o.maxBatch}
		if l.run.batch.max == 0 {
			l.run.batch.max = DefaultMaxBatch
		}
	}
	switch client.(type) {
	case *redis.ClusterClient:
		l.slots = true
	case *redis.Ring:
		l.same = true
	}
	c := l.confOf(policies)
	l.cur.Store(c)
	return l, nil
}

// confOf returns the layeredConf of valid policies, taken now.
func (l *Layered) confOf(policies []core.Policy) *layeredConf {
	c := &layeredConf{
		policies: append([]core.Policy(nil), policies...),
		costs:    make([]int64, len(policies)),
		script:   scriptFor(layeredSource(policies, l.margin)),
		since:    l.run.sinceNow(),
	}
	c.sha = c.script.Hash()
	c.fn = functionName(c.script)
	for i, p := range policies {
		c.costs[i] = p.Capacity()
	}
	return c
}

// SetPolicies makes the limiter enforce policies from now on, layer i
// policies[i], keeping every key's usage in every layer as
// [Limiter.SetPolicy] does: the same number of layers, each valid and
// with its layer's algorithm and Name, which must not be empty where the
// policy changes, and none a calendar policy (as [NewLayered]). On error
// nothing changes. All layers change at once: every decision that starts
// after it returns is made by the new policies. It is safe for concurrent
// use.
func (l *Layered) SetPolicies(policies []core.Policy) error {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	old := l.cur.Load().policies
	if len(policies) != len(old) {
		return fmt.Errorf("redisstore: SetPolicies: %d policies for %d layers", len(policies), len(old))
	}
	same := true
	for i, p := range policies {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("redisstore: SetPolicies: layer %d: %w", i, err)
		}
		if err := checkCalendar(p); err != nil {
			return fmt.Errorf("redisstore: SetPolicies: layer %d: %w", i, err)
		}
		if err := checkChange(old[i], p); err != nil {
			return fmt.Errorf("redisstore: SetPolicies: layer %d: %w", i, err)
		}
		same = same && p == old[i]
	}
	if same {
		return nil
	}
	c := l.confOf(policies)
	l.run.load(&conf{script: c.script})
	l.cur.Store(c)
	return nil
}

// layeredSource returns the script of a layered limiter: the prelude once
// (its short set false: a layer's answer is always packed in full),
// then each layer's own script wrapped as a Lua function of (KEYS, n,
// commit, since), then layered.lua, which calls them. A layer's function holds
// the parts of its policy's script that are its own (see policyParts): its
// constants and its algorithm, exactly as a Limiter of that policy runs
// them, so a layer decides exactly as such a Limiter.
func layeredSource(policies []core.Policy, marginMs int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- ratekit layered, %d layers\n", len(policies))
	b.WriteString(preludeLua)
	b.WriteString("short = false -- a layer answers in full\n")
	var list, keys strings.Builder
	for i, p := range policies {
		head, body := policyParts(p, marginMs)
		fmt.Fprintf(&b, "local function layer%d(KEYS, n, commit, since)\n%s%s\nend\n", i+1, head, body)
		fmt.Fprintf(&list, "layer%d, ", i+1)
		fmt.Fprintf(&keys, "{KEYS[%d]}, ", i+1)
	}
	fmt.Fprintf(&b, "local layers = {%s}\nlocal keys = {%s}\n", list.String(), keys.String())
	b.WriteString(layeredLua)
	return b.String()
}

// Policies returns the layers' policies, in layer order.
func (l *Layered) Policies() []core.Policy {
	return append([]core.Policy(nil), l.cur.Load().policies...)
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Layered) Allow(ctx context.Context, key string) (core.Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN reports whether n units may be spent for key now in every layer
// and, if so, counts them in every layer, in one round trip; a denied
// request counts nothing anywhere. The Decision is the most restrictive
// layer's (see [core.Layered]). A cost above any layer's capacity is
// [core.ErrCostTooHigh], with that layer's Limit and Policy in the
// Decision. Errors from Redis are wrapped; when one is returned, the units
// may have been counted in every layer (the script may have run before a
// timeout), never twice and never in some layers only.
func (l *Layered) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	d, err := l.decide(ctx, []string{key}, n, true)
	return d.Decision, err
}

// Peek reports what AllowN would decide now, counting nothing: the most
// restrictive layer's state as it is, as [core.Layered.Peek]. It writes
// nothing to Redis.
func (l *Layered) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	d, err := l.decide(ctx, []string{key}, n, false)
	return d.Decision, err
}

// AllowLayers is AllowN that also returns every layer's Decision; see
// [core.LayeredLimiter].
func (l *Layered) AllowLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	return l.decide(ctx, []string{key}, n, true)
}

// PeekLayers reports what AllowLayers would decide now, counting nothing.
func (l *Layered) PeekLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	return l.decide(ctx, []string{key}, n, false)
}

// AllowKeys is AllowN with a key per layer: keys[i] is layer i's key (such
// as the client IP for one layer and the account for another), or keys
// holds one key for every layer. It also returns every layer's Decision.
// With a [redis.ClusterClient] the keys must hash to one slot (the limiter
// computes the slots, CRC16 as Redis does, and otherwise returns an error
// wrapping [ErrCrossSlot] before sending anything); with a [redis.Ring] the
// keys must all be the same. On Cluster, use one key for every layer, or one
// limiter per key.
func (l *Layered) AllowKeys(ctx context.Context, keys []string, n int64) (core.LayeredDecision, error) {
	return l.decide(ctx, keys, n, true)
}

// PeekKeys reports what AllowKeys would decide now, counting nothing.
func (l *Layered) PeekKeys(ctx context.Context, keys []string, n int64) (core.LayeredDecision, error) {
	return l.decide(ctx, keys, n, false)
}

// Reset forgets key in every layer: it deletes the layers' state for key
// with one DEL, atomically.
func (l *Layered) Reset(ctx context.Context, key string) error {
	return l.ResetKeys(ctx, []string{key})
}

// ResetKeys is Reset with a key per layer, as for [Layered.AllowKeys].
func (l *Layered) ResetKeys(ctx context.Context, keys []string) error {
	if err := l.checkKeys(keys); err != nil {
		return err
	}
	for i := range l.layers {
		if layerKey(keys, i) == "" {
			return fmt.Errorf("redisstore: %w", core.ErrEmptyKey)
		}
	}
	rkeys, err := l.redisKeys(keys)
	if err != nil {
		return err
	}
	ctx, cancel := l.run.withTimeout(ctx)
	defer cancel()
	if err := l.run.client.Del(ctx, rkeys...).Err(); err != nil {
		return l.wrap("del", err)
	}
	return nil
}

// Refund gives back n units that AllowN(ctx, key, n) counted for key at
// most elapsed ago, in every layer, in one round trip and atomically, each
// layer exactly as a [Limiter] of its policy (and [core.Layered.Refund])
// does; see [core.Refunder], and [Limiter.Refund] for elapsed with the
// server's TIME. It fails, giving back nothing, for the arguments AllowN
// rejects (a cost above any layer's capacity included) and for a negative
// elapsed ([core.ErrInvalidElapsed]). Errors from Redis are wrapped; when
// one is returned, the units may have been given back in every layer,
// never twice and never in some layers only.
func (l *Layered) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	return l.RefundKeys(ctx, []string{key}, n, elapsed)
}

// RefundKeys is Refund with a key per layer, as for [Layered.AllowKeys].
func (l *Layered) RefundKeys(ctx context.Context, keys []string, n int64, elapsed time.Duration) error {
	return l.refundAt(ctx, keys, []int64{n}, nil, elapsed)
}

// refundAt is RefundCosts with costs one per layer or one for every
// layer, and sinces as for decideAt.
func (l *Layered) refundAt(ctx context.Context, keys []string, costs []int64, sinces []any, elapsed time.Duration) error {
	if err := l.checkKeys(keys); err != nil {
		return err
	}
	c := l.cur.Load()
	for i := range l.layers {
		if err := checkCost(layerKey(keys, i), layerCost(costs, i), c.costs[i], i); err != nil {
			return err
		}
		if err := checkElapsed(elapsed); err != nil {
			return err // checked in core.Layered's order
		}
	}
	rkeys, err := l.redisKeys(keys)
	if err != nil {
		return err
	}
	now, err := l.run.now()
	if err != nil {
		return err
	}
	cmd, err := l.eval(ctx, c, rkeys, now, costs, sinces, true, elapsedMicros(l.run.padded(elapsed)))
	if err != nil {
		return l.wrap("eval", err)
	}
	return refunded(cmd)
}

func (l *Layered) checkKeys(keys []string) error {
	if len(keys) != 1 && len(keys) != len(l.layers) {
		return fmt.Errorf("redisstore: layered: %d keys for %d layers; want one, or one per layer", len(keys), len(l.layers))
	}
	return nil
}

// layerKey returns layer i's key among keys, checked by checkKeys.
func layerKey(keys []string, i int) string { return keys[min(i, len(keys)-1)] }

// redisKeys returns the Redis keys of the layers, in script order, after
// checking that one script may use them all.
func (l *Layered) redisKeys(keys []string) ([]string, error) {
	if (l.slots || l.same) && len(keys) > 1 {
		first := l.layers[0].key(keys[0])
		tag := first[len(l.layers[0].prefix) : len(first)-1]
		for i := 1; i < len(keys); i++ {
			if keys[i] == keys[0] {
				continue
			}
			if l.same {
				return nil, fmt.Errorf("redisstore: layers 0 and %d have different keys, which a Ring may keep on different shards: %w", i, ErrCrossSlot)
			}
			k := l.layers[i].key(keys[i])
			if a, b := keySlot(tag), keySlot(k[len(l.layers[i].prefix):len(k)-1]); a != b {
				return nil, fmt.Errorf("redisstore: the keys of layers 0 and %d hash to Cluster slots %d and %d; on Cluster, use one key for every layer: %w", i, a, b, ErrCrossSlot)
			}
		}
	}
	rkeys := make([]string, len(l.layers))
	for i, m := range l.layers {
		rkeys[i] = m.key(layerKey(keys, i))
	}
	return rkeys, nil
}

// wrap wraps an error from Redis, naming CROSSSLOT as [ErrCrossSlot].
func (l *Layered) wrap(op string, err error) error {
	if redis.HasErrorPrefix(err, "CROSSSLOT") {
		return fmt.Errorf("redisstore: %s: %w (on Cluster, use one key for every layer): %w", op, ErrCrossSlot, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

func (l *Layered) decide(ctx context.Context, keys []string, n int64, commit bool) (core.LayeredDecision, error) {
	return l.decideAt(ctx, keys, []int64{n}, nil, commit, nil)
}

// decideAt decides keys (one per layer, or one for all), costs (one per
// layer, or one for all), each layer's state converted as of sinces[i]
// when sinces is not nil (a time in Unix µs, or "" for the call's time;
// nil: as of the policies' taking), counting when commit is set. The
// layers' Decisions are appended to dst[:0].
func (l *Layered) decideAt(ctx context.Context, keys []string, costs []int64, sinces []any, commit bool, dst []core.Decision) (core.LayeredDecision, error) {
	c := l.cur.Load()
	first := c.policies[0]
	ld := core.LayeredDecision{Decision: core.Decision{Limit: first.Limit, Policy: first}}
	if err := l.checkKeys(keys); err != nil {
		return ld, err
	}
	for i, p := range c.policies {
		if err := checkCost(layerKey(keys, i), layerCost(costs, i), c.costs[i], i); err != nil {
			d := core.Decision{Limit: p.Limit, Policy: p}
			return core.LayeredDecision{Decision: d, Layer: i}, err
		}
	}
	rkeys, err := l.redisKeys(keys)
	if err != nil {
		return ld, err
	}
	now, err := l.run.now()
	if err != nil {
		return ld, err
	}
	cmd, err := l.eval(ctx, c, rkeys, now, costs, sinces, commit, "")
	if err != nil {
		return ld, l.wrap("eval", err)
	}
	v, ok := cmd.Val().([]any)
	if !ok || len(v) != 5*len(l.layers) {
		return ld, fmt.Errorf("redisstore: eval: script returned %v, want %d integers", cmd.Val(), 5*len(l.layers))
	}
	ds, err := layerDecisions(c.policies, v, dst[:0])
	if err != nil {
		return ld, err
	}
	return core.MostRestrictive(ds), nil
}

// layerDecisions appends to ds the layers' Decisions that v, a layered
// script's answer, holds: five integers per layer, in layer order.
func layerDecisions(policies []core.Policy, v []any, ds []core.Decision) ([]core.Decision, error) {
	for i, p := range policies {
		var r [5]int64
		for j := range r {
			var ok bool
			if r[j], ok = v[5*i+j].(int64); !ok {
				return ds, fmt.Errorf("redisstore: eval: script returned %v, want %d integers", v, 5*len(policies))
			}
		}
		ds = append(ds, core.Decision{
			Allowed:    r[0] == 1,
			Limit:      p.Limit,
			Remaining:  r[1],
			RetryAfter: time.Duration(r[2]) * time.Microsecond,
			ResetAfter: time.Duration(r[3]) * time.Microsecond,
			Delay:      time.Duration(r[4]) * time.Microsecond,
			Policy:     p,
		})
	}
	return ds, nil
}

// layerCost returns layer i's cost among costs, one per layer or one for
// every layer.
func layerCost(costs []int64, i int) int64 { return costs[min(i, len(costs)-1)] }

// eval runs c's script on rkeys: a decision (elapsed "") or a refund of
// elapsed µs, with one cost for every layer (costs of one, and no sinces)
// or a cost and, when sinces is not nil, a since per layer (see
// layered.lua).
func (l *Layered) eval(ctx context.Context, c *layeredConf, rkeys []string, now any, costs []int64, sinces []any, commit bool, elapsed any) (*redis.Cmd, error) {
	// EVALSHA sha numkeys keys... now n elapsed since [costs...] [sinces...]
	args := make([]any, 0, 7+len(rkeys)+len(costs)+len(sinces))
	verb, id := l.run.verb(c.sha, c.fn)
	args = append(args, verb, id, strconv.Itoa(len(rkeys)))
	for _, k := range rkeys {
		args = append(args, k)
	}
	sign := int64(1)
	if !commit {
		sign = -1 // a Peek
	}
	if len(costs) == 1 && sinces == nil {
		args = append(args, now, sign*costs[0], elapsed, c.since)
	} else {
		args = append(args, now, sign, elapsed, c.since)
		for i := range rkeys {
			args = append(args, layerCost(costs, i))
		}
		args = append(args, sinces...)
	}
	ctx, cancel := l.run.withTimeout(ctx)
	defer cancel()
	return l.run.process(ctx, redis.NewCmd(ctx, args...))
}

// AllowCosts is AllowKeys with a cost per layer: costs[i] units are
// counted in layer i for keys[i] (keys holds one key per layer, or one for
// every layer), all or nothing, in one round trip, as [Layered.AllowN]
// decides, and as [core.Layered.AllowCosts] does, field for field. costs
// must hold exactly one cost per layer, each positive and at most its
// layer's capacity: otherwise it fails, sending nothing, with
// [core.ErrInvalidCost] or [core.ErrCostTooHigh] (that layer's Limit and
// Policy in the Decision, Layer its index). The keys must lie in one
// Cluster slot, as for AllowKeys.
//
// The layers' Decisions are appended to dst[:0], which the result's
// Layers then is.
func (l *Layered) AllowCosts(ctx context.Context, keys []string, costs []int64, dst []core.Decision) (core.LayeredDecision, error) {
	if err := l.checkCosts(costs); err != nil {
		return core.LayeredDecision{Layer: -1}, err
	}
	return l.decideAt(ctx, keys, costs, nil, true, dst)
}

// PeekCosts reports what AllowCosts would decide now, counting nothing.
func (l *Layered) PeekCosts(ctx context.Context, keys []string, costs []int64, dst []core.Decision) (core.LayeredDecision, error) {
	if err := l.checkCosts(costs); err != nil {
		return core.LayeredDecision{Layer: -1}, err
	}
	return l.decideAt(ctx, keys, costs, nil, false, dst)
}

// RefundCosts is RefundKeys with a cost per layer, as for
// [Layered.AllowCosts]: it gives back costs[i] units in layer i, in one
// round trip and atomically. It fails, giving back nothing, for the
// arguments AllowCosts rejects and for a negative elapsed.
func (l *Layered) RefundCosts(ctx context.Context, keys []string, costs []int64, elapsed time.Duration) error {
	if err := l.checkCosts(costs); err != nil {
		return err
	}
	return l.refundAt(ctx, keys, costs, nil, elapsed)
}

func (l *Layered) checkCosts(costs []int64) error {
	if len(costs) != len(l.layers) {
		return fmt.Errorf("redisstore: layered: %d costs for %d layers; want one per layer", len(costs), len(l.layers))
	}
	return nil
}

// keySlot returns the Cluster hash slot of a key whose hash tag is tag:
// CRC16 (XMODEM) of the tag, modulo 16384, as Redis computes it.
func keySlot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) & 16383
}
