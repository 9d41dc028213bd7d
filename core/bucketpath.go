package core

import (
	"hash/maphash"
	"math"
	"sync/atomic"
	"time"
)

// The token and leaky buckets' decisions have a path of their own: a
// decision on a held key, the common case, is one non-generic function
// (decideInto) that reads the clock, hashes the key, probes the shard's
// published slots, decides by the GCRA and fills the caller's Decision,
// taking no lock (store.go, "Lock-free decisions"). The generic store's
// calls through interfaces and dictionaries, and the copies of results
// between them, cost a decision on a hot key more than its GCRA
// (BenchmarkHotKey in benchmarks/: about 640 instructions a decision
// before, 490 after, the clock's and the two hashes' included).
// Everything else (a new key, a collision, a state a writer has taken)
// goes to the locked path, store.decideHeld, with the hashes already
// taken.

// readClock, as the time of a decision, says to read the clock: micros
// never returns it (its least result is math.MinInt64/1000 - 1).
const readClock = math.MinInt64

// bucketStore is the memory store of the token and leaky buckets.
type bucketStore = store[uint64, *gcra]

// decideInto fills d with the decision for n units of key at now (Unix
// µs), or at the time the clock tells if now is readClock, counting them
// if commit is set and they are allowed. It fills the caller's result in
// place: returning a Decision through a function that returns another
// one's costs a copy of all its words. (Reading the clock here rather than
// in a caller spares a decision one call and its copies of the
// arguments.)
//
// The token and leaky buckets decide here; every other algorithm, and bad
// arguments, in decideEngine.
//
// Why deciding without the lock is safe is store.go's "Lock-free
// decisions"; what this function adds is the order of its loads. It finds
// the key's slot by its tag, then its check, then loads the state, then
// the shard's settings (sh.set), and stores the new state with one
// compare-and-swap from the value it loaded, deciding again if another
// request changed it first. A denial and a Peek write nothing: they decide
// on a value the state held when it was loaded.
//
// The state is loaded before the settings, and SetPolicy (retune) takes a
// shard's states, publishes its new settings, then puts the converted
// states back. So a state loaded after it was put back comes with the new
// settings. A state loaded before it was taken is decided by either: its
// CAS succeeds before the take, and SetPolicy converts the result, or
// fails, or finds the converted state equal to it bit for bit (an ABA).
// With the new settings that is exact: the decision is the new policy's on
// the same bits. With the old, it is a decision in flight under the old
// policy: counted at the old T, checked against the old capacity, in the
// same scale (carry never leaves a state unchanged when the scale
// changes). (A state that later changes back to the very bits the reader
// loaded is the same ABA; across a change of scale it needs the clock to
// move by 1/64 of its Unix time, 320 days today, while the reader stands
// still.) Loading the settings first would instead let a reader decide a
// converted state by the old settings, with no ABA needed.
func (m *Memory) decideInto(d *Decision, key string, n int64, commit bool, now int64) error {
	if m.buckets == nil || key == "" || n <= 0 {
		return m.decideEngine(d, key, n, commit, now)
	}
	if now == readClock {
		// m.now(), with nowNs's test for the system clock inlined.
		if m.system {
			now = micros(m.baseNs + int64(time.Since(m.base)))
		} else {
			now = micros(m.clockNs())
		}
	}
	s := m.buckets
	h := maphash.Comparable(s.seed1, key)
	check := maphash.Comparable(s.seed2, key)
	sh := &s.shards[h>>tagShard&s.mask]
	tag := h&tagHash | tagUsed
	slots := *sh.tab.Load()
	mask := uint64(len(slots) - 1)
	var (
		v   verdict
		set *settings
	)
probe:
	for i := tag & mask; ; i = (i + 1) & mask {
		e := &slots[i]
		t := atomic.LoadUint64(&e.tag)
		if t&^tagBits == tag {
			if atomic.LoadUint64(&e.check) != check {
				break // another key's: the locked path replaces it
			}
			for {
				tat := atomic.LoadUint64(&e.state)
				if tat == gcraTaken {
					break probe // the locked path waits for the writer
				}
				set = sh.set.Load()
				if n > set.cost {
					return set.costError(d, n)
				}
				var next uint64
				v, next = set.bucket.decide(tat, now, n, commit)
				if !commit || !v.allowed() || atomic.CompareAndSwapUint64(&e.state, tat, next) {
					if commit {
						setRef(e, t)
					}
					goto fill
				}
			}
		}
		// At least a quarter of a published table's slots are empty,
		// never dead, and stay so or are given to a key: the probe ends.
		if t == 0 && atomic.LoadUint64(&e.check) == 0 {
			break // not in the published table: new, or moved by a rehash
		}
	}
	v, set = s.decideHeld(sh, h, check, now, n, commit)
	if v.retryAfter < 0 {
		return set.costError(d, n)
	}
fill:
	set.fillPolicy(d)
	setVerdict(d, v)
	return nil
}

// fillPolicy sets d's Limit and Policy. Field by field: assigning the
// Policy whole copies it to the stack and back, for its write barriers
// (about ten instructions a decision). TestFillPolicyCopiesEveryField fails
// when Policy gains a field this does not copy.
func (set *settings) fillPolicy(d *Decision) {
	p := &set.policy
	d.Limit = p.Limit
	d.Policy.Name = p.Name
	d.Policy.Algorithm = p.Algorithm
	d.Policy.Limit = p.Limit
	d.Policy.Window = p.Window
	d.Policy.Burst = p.Burst
	d.Policy.Calendar = p.Calendar
	d.Policy.Zone = p.Zone
}

// costError sets d's policy fields and returns the error of a cost n
// above the capacity.
func (set *settings) costError(d *Decision, n int64) error {
	set.fillPolicy(d)
	return costTooHigh(n, set.cost)
}
