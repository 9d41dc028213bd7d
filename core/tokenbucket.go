package core

import (
	"sync/atomic"
	"time"
)

// The token bucket and the leaky bucket are both the generic cell rate
// algorithm (GCRA): one number per key, the theoretical arrival time (TAT),
// the time at which the bucket is full again (token bucket) or the queue is
// empty (leaky bucket). A request for n units at now is allowed when
//
//	max(TAT, now) + n·T - now <= C
//
// where T = Window/Limit is the time one unit takes to refill (or to be
// served) and C = Burst·T is the capacity in time. Allowing it moves TAT to
// max(TAT, now) + n·T. The leaky bucket admits by the same rule and also
// reports the Delay until the request's last unit is served,
// max(TAT, now) + (n-1)·T - now: the k-th of simultaneous requests waits
// (k-1)·T, and Burst of them fit in the queue.
//
// # Exact time
//
// T is rarely a whole number of microseconds (1 s / 3 is not), and rounding
// it would drift: three requests a second spaced a third of a second apart
// would slowly fall behind. So time is counted in units of 1/q microsecond,
// with q = Limit / gcd(Limit, Window in µs): T = Window·q/Limit is then a
// whole number and every sum is exact. For most policies q is 1 (100/1m,
// 10/s, 1000/1h); 3/s has q = 3.
//
// TAT is kept modulo 2^64 in those units, so one int64 per key suffices, and
// differences are taken with wrapping arithmetic. The backlog a decision
// reads is
//
//	d = TAT - now·q, taken modulo 2^64 as a signed 64-bit integer;
//	d <= 0: 0 (a full bucket: the key has been idle since TAT);
//	d > 0:  min(d, 2^52) (gcraMaxBacklog).
//
// A live state lies within C of now, so d > C means the clock stepped back
// since the key last spent: the key then waits until the clock has caught
// up, with the exact RetryAfter d + n·T - C, instead of reading the
// unexplained future TAT as a full bucket (which handed a clock set back by
// a few capacities a whole burst). golang.org/x/time/rate allows nothing in
// that case either; for a partly spent bucket it keeps its tokens, and this
// rule is stricter. The cap bounds what a clock stepped back by years can
// cost (2^52 µs is 142 years at q = 1, 2.2 years at q = 64) and keeps every
// sum exact: d + n·T <= 2^52 + C < 2^53, so a Lua script on Redis, whose
// numbers are float64, does the same arithmetic exactly and must apply the
// same rule, cap included. A RetryAfter of up to 2^52 µs fits a
// time.Duration.
//
// A key idle longer than 2^63/q µs (4,500 years at q = 64, beyond the 584
// years of a clock read as int64 Unix nanoseconds) would wrap into a
// positive d; q is capped at 64 to keep that out of reach, and C at 2^51
// units. A policy
// beyond either cap (rare: 97/1m has q = 97) uses the largest q within them
// and rounds T up to its next 1/q µs: never more than the policy allows, at
// most 1/q µs per unit stricter.
//
// A bucket is that arithmetic for one policy, immutable; gcra, below, is the
// memory store's algorithm, which reads the bucket of the policy in force
// (see [Memory.SetPolicy]).
type bucket struct {
	q     uint64 // time units per microsecond
	unit  int64  // T: time one unit takes to refill, in 1/q µs
	cap   int64  // C: capacity in 1/q µs
	leaky bool   // report Delay

	// Dividing by T and q without a hardware division; every dividend is
	// below 2^53 (C is capped at 2^51, the backlog at 2^52).
	perUnit  divisor
	perMicro divisor
}

const (
	gcraMaxScale   = 64
	gcraMaxCap     = 1 << 51
	gcraMaxBacklog = 1 << 52 // the largest backlog a decision reads
)

// Emission is how the token and leaky buckets of a [Policy] count time: in
// units of 1/Scale microsecond, one unit of cost taking Interval of them to
// refill (or to be served), and a full bucket holding Capacity of them
// (Burst·Interval). Every store implements the buckets with these integers,
// so that all stores decide alike; see [Policy.Emission]. It is public so
// that a store of your own can make the memory and Redis stores' decisions
// exactly (docs/extending.md).
type Emission struct {
	// Scale is q, the time units per microsecond: Limit/gcd(Limit, Window in
	// µs), capped at 64.
	Scale int64
	// Interval is T, Window/Limit in units of 1/Scale µs: exact when Scale
	// is uncapped, rounded up otherwise.
	Interval int64
	// Capacity is C = Burst·T, at most 2^51, so that every sum a store forms
	// (a backlog of at most 2^52 plus C) is exact in a float64 too.
	Capacity int64
}

// Emission returns how the token and leaky buckets count time for p, which
// must be valid. Stores other than the memory one use it to run the same
// arithmetic; see the token bucket's documentation in the source.
func (p Policy) Emission() Emission {
	limit, window, cost := uint64(p.Limit), uint64(p.Window/time.Microsecond), uint64(p.Capacity())
	g := gcd(limit, window)
	q, unit := limit/g, window/g
	if q > gcraMaxScale || mulSat(cost, unit) > gcraMaxCap {
		q = gcraMaxScale
		for q > 1 && mulSat(cost, mulDivCeil(window, q, limit)) > gcraMaxCap {
			q /= 2
		}
		unit = mulDivCeil(window, q, limit)
	}
	// Validate bounds cost·Window/Limit by 50 years, under 2^51 µs, so C
	// fits the cap at q = 1.
	return Emission{Scale: int64(q), Interval: int64(unit), Capacity: int64(cost * unit)}
}

// newBucket sets up the bucket for a valid policy.
func newBucket(p Policy) bucket {
	e := p.Emission()
	return bucket{
		q: uint64(e.Scale), unit: e.Interval, cap: e.Capacity, leaky: p.Algorithm == LeakyBucket,
		perUnit: newDivisor(uint64(e.Interval)), perMicro: newDivisor(uint64(e.Scale)),
	}
}

// scaled returns now in 1/q µs, modulo 2^64.
func (g *bucket) scaled(now int64) uint64 { return uint64(now) * g.q }

// backlog returns TAT - now in 1/q µs as decisions read it: 0 for a full
// bucket, up to C for an empty one, more (up to gcraMaxBacklog) after the
// clock stepped back. See the rule above.
func (g *bucket) backlog(tat uint64, now int64) int64 {
	return min(max(int64(tat-g.scaled(now)), 0), gcraMaxBacklog)
}

// toMicros converts a non-negative span in 1/q µs to microseconds, rounding
// up.
func (g *bucket) toMicros(d int64) int64 {
	if g.q == 1 {
		return d
	}
	return int64(g.perMicro.ceil(uint64(d)))
}

func (g *bucket) empty(now int64) uint64 { return g.scaled(now) }

func (g *bucket) fresh(tat uint64, now int64) bool { return g.backlog(tat, now) == 0 }

// holds returns the backlog in units of cost, rounded up, and in µs.
func (g *bucket) holds(tat uint64, now int64) (units, until int64) {
	d := g.backlog(tat, now)
	return int64(g.perUnit.div(uint64(d + g.unit - 1))), g.toMicros(d)
}

func (g *bucket) decide(tat uint64, now, n int64, commit bool) (verdict, uint64) {
	d := g.backlog(tat, now)
	need := d + n*g.unit
	if need > g.cap {
		return deny(int64(g.perUnit.div(uint64(max(g.cap-d, 0)))), g.toMicros(need-g.cap), g.toMicros(d)), tat
	}
	if !commit {
		// A Peek: the bucket as it is, and the Delay n would get.
		v := verdict{remaining: int64(g.perUnit.div(uint64(g.cap - d))), resetAfter: g.toMicros(d)}
		if g.leaky {
			v.delay = g.toMicros(d + (n-1)*g.unit)
		}
		return v, tat
	}
	v := verdict{
		remaining:  int64(g.perUnit.div(uint64(g.cap - need))),
		resetAfter: g.toMicros(need),
	}
	if g.leaky {
		v.delay = g.toMicros(d + (n-1)*g.unit)
	}
	return v, g.scaled(now) + uint64(need)
}

// carry returns tat, a state of g at now, converted to the bucket to, for
// [Memory.SetPolicy]: the units its backlog d holds carry over, as
// d' = ceil(d·T'/T) in to's units of time (d as decisions read it, capped
// at 2^52, and d' capped likewise), exact when T'/T is; a full bucket stays
// full, and has been for as long (to the µs, rounded down, up to 2^52 µs),
// so that it is swept no later than it would have been.
//
// When the scale changes (q' != q), the result is never tat itself: a
// lock-free reader that loaded tat and the old bucket before the change
// could otherwise store a state in the old scale over an identical-looking
// one in the new (see [Memory.SetPolicy]). Should the conversion land on
// tat, a full bucket's time goes back by 1/q' µs (still full), a backlog
// grows by 1/q' µs (stricter).
func (g *bucket) carry(tat uint64, now int64, to *bucket) uint64 {
	raw := int64(tat - g.scaled(now))
	var next uint64
	if raw <= 0 {
		full := min((0-uint64(raw))/g.q, gcraMaxBacklog) // µs the bucket has been full
		next = to.scaled(now - int64(full))
	} else {
		d := mulDivCeil(uint64(min(raw, gcraMaxBacklog)), uint64(to.unit), uint64(g.unit))
		if d == 0 || d > gcraMaxBacklog {
			d = gcraMaxBacklog // saturated, or wrapped at the very top
		}
		next = to.scaled(now) + d
	}
	if next == tat && to.q != g.q {
		if raw <= 0 {
			next--
		} else {
			next++
		}
	}
	return next
}

// gcraTaken is the state of a slot whose bucket a locked writer of the
// memory store has taken (see store.go, "Lock-free decisions"). No live
// state holds it: a live TAT is now·q plus at most 2^52, with now a Unix
// time in µs that fits int64 nanoseconds (|now| < 2^53) and q <= 64, so
// |TAT| < 2^60 as a signed number, never -2^63.
const gcraTaken = 1 << 63

// gcra is the token and leaky buckets' algorithm in the memory store: the
// arithmetic of the bucket in force, read from the settings a Memory
// publishes. Under a shard's lock every method reads the Memory's
// settings, which change only under every shard's lock (SetPolicy);
// lock-free readers read their shard's, after the state (Memory.decideInto).
type gcra struct {
	set *atomic.Pointer[settings]
}

// in returns the bucket in force, for a caller holding a shard's lock.
func (g *gcra) in() *bucket { return &g.set.Load().bucket }

func (g *gcra) empty(now int64) uint64 { return g.in().empty(now) }

func (*gcra) release(uint64) {}

func (g *gcra) fresh(tat uint64, now int64) bool { return g.in().fresh(tat, now) }

func (g *gcra) holds(tat uint64, now int64) (units, until int64) { return g.in().holds(tat, now) }

func (g *gcra) decide(tat uint64, now, n int64, commit bool) (verdict, uint64) {
	return g.in().decide(tat, now, n, commit)
}

func (g *gcra) refund(tat uint64, now, since, n int64) uint64 {
	return g.in().refund(tat, now, since, n)
}

func (g *gcra) charge(tat uint64, now, n int64) uint64 { return g.in().charge(tat, now, n) }

func (g *gcra) carry(tat uint64, now int64, to *settings) uint64 {
	return g.in().carry(tat, now, &to.bucket)
}

// adopt does nothing: the store publishes the settings gcra reads.
func (*gcra) adopt(*settings) {}

// The token and leaky buckets are the memory store's atomic algorithm (see
// atomicState): a slot's state is one word, read and updated with
// sync/atomic.

func (*gcra) load(p *uint64) uint64               { return atomic.LoadUint64(p) }
func (*gcra) cas(p *uint64, old, new uint64) bool { return atomic.CompareAndSwapUint64(p, old, new) }
func (*gcra) take(p *uint64) uint64               { return atomic.SwapUint64(p, gcraTaken) }
func (*gcra) kill(p *uint64, old uint64) bool {
	return atomic.CompareAndSwapUint64(p, old, gcraTaken)
}
func (*gcra) put(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
