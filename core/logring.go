package core

import (
	"math/bits"
	"slices"
)

// A logState is one key's sliding log: its entries, a request's time and
// units each, in time order, in a ring of slots, with a Fenwick tree (a
// binary indexed tree) of their units laid over the ring. The units before
// any entry, and the entry where a running count of units reaches a given
// amount, are then found in O(log c) steps for a ring of c slots, and an
// entry's units change in as many: no decision walks the log.
//
//   - A decision finds the first entry still in the window by a search on
//     the times that gallops from the oldest entry, and a denied one the
//     entry whose leaving makes room by searching the tree; neither
//     changes anything.
//   - An allowed request drops the entries that have left (each entry is
//     dropped once) and adds one entry, or adds its units to the last one
//     when they share a time.
//   - A refund takes units from the entries at its time or later, oldest
//     first; an entry it empties in the middle of the log stays, with no
//     units, until it leaves or the ring is compacted (a hole).
//
// Memory: 12 bytes a slot. The ring grows by doubling (to at most Limit
// slots while it holds no hole), shrinks to twice its entries when they
// fill less than a quarter of it, and is compacted in place, holes
// removed, when it is full and a quarter of it is holes. It never holds
// more than ⌈4·Limit/3⌉ slots, that is 16·Limit bytes: a log holds at most
// Limit entries with units (each holds one at least), and a full ring of
// that size is a quarter holes. A settled charge (settle.go) may take the
// log past Limit, to at most 2·Limit units: it pushes with 2·Limit as the
// bound, so a log in debt holds at most ⌈8·Limit/3⌉ slots, and the sum,
// at most 2e9, still fits 32 bits. Compacting, growing and shrinking copy the
// ring, as often as the entries added, emptied or dropped since the last
// copy pay for it.
//
// A logState is 32 bytes: the slice's length counts the entries (holes
// included) and its capacity is the ring's size, and the other fields are
// 32-bit (a log holds at most 2·Limit units, at most 2e9). A nil *logState
// is an empty log.
type logState struct {
	slots []logSlot // the ring: cap(slots) slots, len(slots) entries from head on
	head  int32     // the slot of the oldest entry
	sum   int32     // units held by all entries
}

// A logSlot is one slot of the ring: an entry's time in µs, in two halves
// so that the slot is 12 bytes and not 16, and node i+1 of the tree for
// slot i. Slots outside the entries hold no units in the tree.
type logSlot struct {
	hi, lo uint32
	tree   uint32
}

// minRing is the ring's size below which it does not shrink.
const minRing = 8

// logWork, when set, counts the steps of the log's loops (tree nodes,
// binary search halvings, slots copied and entries walked). Tests set it
// to check that a decision's work does not grow with the log; it is nil
// otherwise.
var logWork *int64

func work(n int) {
	if logWork != nil {
		*logWork += int64(n)
	}
}

// ring returns every slot of the ring.
func (s *logState) ring() []logSlot { return s.slots[:cap(s.slots)] }

// n returns the number of entries, holes included.
func (s *logState) n() int { return len(s.slots) }

// slot returns the slot of the k-th entry (0 the oldest).
func (s *logState) slot(k int) int {
	i := int(s.head) + k
	if i >= cap(s.slots) {
		i -= cap(s.slots)
	}
	return i
}

func (s *logState) time(i int) int64 {
	e := &s.ring()[i]
	return int64(uint64(e.hi)<<32 | uint64(e.lo))
}

// last returns the time of the newest entry; the log must not be empty.
func (s *logState) last() int64 { return s.time(s.slot(s.n() - 1)) }

// prefix returns the units of slots [0, p). Sums are exact in uint32:
// every true sum is at most the log's units.
func (s *logState) prefix(p int) int64 {
	r := s.ring()
	work(bits.OnesCount(uint(p)))
	var x uint32
	for ; p > 0; p &= p - 1 {
		x += r[p-1].tree
	}
	return int64(x)
}

// add adds d units to slot i.
func (s *logState) add(i int, d int64) {
	r := s.ring()
	steps := 0
	for j := i + 1; j <= len(r); j += j & -j {
		r[j-1].tree += uint32(d)
		steps++
	}
	work(steps)
}

// value returns the units of slot i.
func (s *logState) value(i int) int64 {
	r := s.ring()
	j := i + 1
	v := r[j-1].tree
	steps := 1
	for p, stop := j-1, j&(j-1); p > stop; p &= p - 1 {
		v -= r[p-1].tree
		steps++
	}
	work(steps)
	return int64(v)
}

// find returns the slot i where the running count of units from slot 0
// reaches x: prefix(i) < x <= prefix(i+1). x must be at most the sum.
func (s *logState) find(x int64) int {
	r := s.ring()
	pos, c := 0, len(r)
	work(bits.Len(uint(c)))
	for step := 1 << (bits.Len(uint(c)) - 1); step > 0; step >>= 1 {
		if q := pos + step; q <= c && int64(r[q-1].tree) < x {
			pos = q
			x -= int64(r[q-1].tree)
		}
	}
	return pos
}

// wrapped returns the units of the entries in the slots before head (the
// ring's entries wrap past its end), 0 when none are.
func (s *logState) wrapped() int64 {
	if int(s.head)+s.n() <= cap(s.slots) {
		return 0
	}
	return s.prefix(int(s.head))
}

// before returns the units of the entries older than the k-th: read from
// a few entries' slots when k is near either end, from the tree otherwise.
func (s *logState) before(k int) int64 {
	n := s.n()
	switch {
	case k <= 0:
		return 0
	case k >= n:
		return int64(s.sum)
	case k <= near:
		var u int64
		for j := range k {
			u += s.value(s.slot(j))
		}
		return u
	case n-k <= near:
		u := int64(s.sum)
		for j := k; j < n; j++ {
			u -= s.value(s.slot(j))
		}
		return u
	}
	w, p := s.wrapped(), int(s.head)+k
	if p <= cap(s.slots) {
		return s.prefix(p) - w
	}
	return int64(s.sum) - w + s.prefix(p-cap(s.slots))
}

// near is how many entries from either end of the log before reads one by
// one: a slot's units take one step on average (see value), the tree's
// sums log c.
const near = 4

// reach returns the slot of the entry where the running count of units
// from the oldest entry reaches x, 1 <= x <= sum.
func (s *logState) reach(x int64) int {
	w := s.wrapped()
	if x <= int64(s.sum)-w {
		return s.find(w + x)
	}
	return s.find(x - (int64(s.sum) - w))
}

// after returns how many entries are at t or earlier: the index of the
// first entry after t. It gallops from the oldest entry (fromNewest
// unset) or from the newest, so its work is O(log d) for an answer d
// entries from where it starts: the cutoff of the window is usually near
// the oldest entry, a refund's time near the newest.
func (s *logState) after(t int64, fromNewest bool) int {
	n := s.n()
	if n == 0 || s.time(s.slot(0)) > t {
		return 0
	}
	if s.last() <= t {
		return n
	}
	// Entry lo-1 is at t or earlier, entry hi after it.
	lo, hi, steps := 1, n-1, 0
	if fromNewest {
		for step := 1; hi-step >= lo; step *= 2 {
			steps++
			if s.time(s.slot(hi-step)) <= t {
				lo = hi - step + 1
				break
			}
			hi -= step
		}
	} else {
		for step := 1; lo-1+step < hi; step *= 2 {
			steps++
			if s.time(s.slot(lo-1+step)) > t {
				hi = lo - 1 + step
				break
			}
			lo += step
		}
	}
	for lo < hi {
		steps++
		mid := int(uint(lo+hi) >> 1)
		if s.time(s.slot(mid)) <= t {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	work(steps)
	return lo
}

// expire drops the f oldest entries, which have left the window, and
// shrinks the ring when its entries fill less than a quarter of it.
func (s *logState) expire(f int) {
	r, n := s.ring(), s.n()
	switch {
	case f <= 0:
		return
	case f >= n:
		clear(r)
		work(len(r))
		s.slots, s.head, s.sum = r[:0], 0, 0
	case f*bits.Len(uint(len(r))) > len(r):
		// Many entries at once: read the units of every slot, empty
		// the f oldest, and build the tree again, in O(c).
		unbuild(r)
		for k := range f {
			i := s.slot(k)
			s.sum -= int32(r[i].tree)
			r[i].tree = 0
		}
		build(r)
		work(2*len(r) + f)
		s.slots, s.head = r[:n-f], int32(s.slot(f))
	default:
		for k := range f {
			i := s.slot(k)
			if v := s.value(i); v != 0 {
				s.add(i, -v)
				s.sum -= int32(v)
			}
		}
		s.slots, s.head = r[:n-f], int32(s.slot(f))
	}
	if c := len(r); c > minRing && 4*s.n() < c {
		unbuild(r)
		s.move(max(2*s.n(), minRing))
	}
}

// push adds n units at time at, the latest time the log has seen, to a log
// of at most limit units that has room for them. A full ring is compacted
// in place when a quarter of it is holes, and grows otherwise.
func (s *logState) push(at, n, limit int64) {
	if k := s.n(); k > 0 && s.last() == at {
		s.add(s.slot(k-1), n)
		s.sum += int32(n)
		return
	}
	if r := s.ring(); s.n() == len(r) {
		unbuild(r)
		holes := 0
		for _, e := range r {
			if e.tree == 0 {
				holes++
			}
		}
		// The entries with units number at most limit - n: a ring
		// without holes is below limit, and a full one a quarter holes
		// is compacted, so one of ⌈4·limit/3⌉ slots never grows.
		c, most := len(r), limit
		if holes > 0 {
			most = ceilDiv(4*limit, 3)
		}
		if 4*holes < c {
			c = max(min(2*c, int(most)), c+1)
		}
		s.move(c)
	}
	k := s.n()
	s.slots = s.slots[:k+1]
	i := s.slot(k)
	e := &s.ring()[i]
	e.hi, e.lo = uint32(uint64(at)>>32), uint32(at)
	s.add(i, n)
	s.sum += int32(n)
}

// take takes up to n units from the k-th entry and the newer ones, oldest
// first. An entry emptied at the end of the log goes, with the holes
// before it; one in the middle becomes a hole. Past the first few holes,
// the next entry with units is found in the tree, not by walking.
func (s *logState) take(k int, n int64) {
	u := s.before(k) // the units before the k-th entry, which stay
	for j := k; n > 0 && j < s.n(); j++ {
		work(1)
		i := s.slot(j)
		v := s.value(i)
		if v == 0 {
			if j-k < near {
				continue
			}
			if u >= int64(s.sum) {
				break
			}
			if i = s.reach(u + 1); i < int(s.head) {
				j = i + cap(s.slots) - int(s.head)
			} else {
				j = i - int(s.head)
			}
			v = s.value(i)
		}
		t := min(v, n)
		s.add(i, -t)
		s.sum -= int32(t)
		n -= t
		if t < v || j < s.n()-1 {
			continue
		}
		m := j
		for m > 0 && s.value(s.slot(m-1)) == 0 {
			work(1)
			m--
		}
		s.slots = s.slots[:m]
	}
	if s.n() == 0 {
		s.head = 0
	}
}

// move moves the entries that hold units, in order, to the start of a
// ring of c slots: the same ring when c is its size (compacting it in
// place), or a new one. The ring must hold each slot's units (unbuild),
// and c must hold the entries.
func (s *logState) move(c int) {
	old := s.ring()
	dst := old
	if c != len(old) {
		dst = make([]logSlot, c)
	} else {
		// Rotate the oldest entry to slot 0, so that the entries can
		// move down in place.
		h := int(s.head)
		slices.Reverse(old[:h])
		slices.Reverse(old[h:])
		slices.Reverse(old)
		s.head = 0
	}
	m := 0
	for k := range s.n() {
		if e := old[s.slot(k)]; e.tree != 0 {
			dst[m] = e
			m++
		}
	}
	clear(dst[m:])
	build(dst)
	work(3 * (len(old) + c))
	s.slots, s.head = dst[:m], 0
}

// build turns the units of each slot, in the tree fields of a, into the
// tree, in O(len(a)).
func build(a []logSlot) {
	for i := 1; i <= len(a); i++ {
		if j := i + i&-i; j <= len(a) {
			a[j-1].tree += a[i-1].tree
		}
	}
}

// unbuild undoes build: the tree fields of a then hold each slot's units.
func unbuild(a []logSlot) {
	for i := len(a); i >= 1; i-- {
		if j := i + i&-i; j <= len(a) {
			a[j-1].tree -= a[i-1].tree
		}
	}
}
