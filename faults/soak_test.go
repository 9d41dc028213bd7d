//go:build linux || darwin

package faults_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// The soak of the memory store: one core.Memory per algorithm, each held at
// its MaxKeys by a churn of keys on the system clock for as long as -soak
// says, while a checker decides a sample of keys in the same stores and
// compares every decision with a model of the algorithm's definition.
//
//	go test -run TestSoak -soak 20s -v                 # a quick check
//	go test -run TestSoak -soak 30m -v -timeout 40m -soak.svg ../docs/soak-heap.svg
//
// Without -soak it is skipped, so go test ./... and go test -short ./...
// never run it.
var (
	soakFor   = flag.Duration("soak", 0, "run TestSoak for this long (0: skip it)")
	soakKeys  = flag.Int("soak.keys", 100_000, "MaxKeys of each store in TestSoak")
	soakEvery = flag.Duration("soak.every", 0, "TestSoak's sampling period (0: the duration / 120, at least 1s)")
	soakCPU   = flag.Float64("soak.cpu", 1, "CPUs TestSoak's process may use, GC included")
	soakCSV   = flag.String("soak.csv", "", "`file` for TestSoak's samples (default: soak.csv in the test's temporary directory)")
	soakSVG   = flag.String("soak.svg", "", "`file` to write TestSoak's heap chart to (none by default)")
)

// The soak's bounds, checked at the end.
const (
	// heapGrowth is how far the live heap's largest sample in the last
	// third of the run may exceed the largest in the first third. The
	// stores are filled before the run, so their tables have reached their
	// largest size; what still grows is the sliding log's entries, out of
	// line, as its keys' logs lengthen (up to Limit entries a key), and the
	// live heap counts what the churn allocates while a collection marks.
	heapGrowth = 0.10
	// bytesPerKey bounds the live heap the stores may hold, per key of
	// MaxKeys, on top of what the process held before they were made. At
	// 100,000 keys a shard's table is 4,096 slots at most: 63 bytes a key
	// for the buckets' 24-byte slots, 84 for the windows' 32-byte ones,
	// about 115 for the sliding log (its logState and entries out of line).
	bytesPerKey = 128
	// The soak is of stores at their maximum: in at least fullSamples of
	// the samples, every store must hold at least fullShare of MaxKeys.
	// (Not all: new keys sweep keys fresh for a window, so a store shrinks
	// while the churn is starved of CPU by other work on the machine.)
	fullShare   = 0.99
	fullSamples = 0.90
)

// soakPolicies are the stores' policies: windows of 10 to 15 s, so that a
// key the churn requests once holds usage for seconds, the stores stay full
// with the CPU the soak allows itself, and keys go fresh and are swept many
// times in a run. The token bucket (30/10s: a unit takes 333,333⅓ µs,
// counted in thirds of a microsecond) and the leaky bucket (7/10s, in
// sevenths) exercise the buckets' fractional time.
func soakPolicies() []core.Policy {
	return []core.Policy{
		{Name: "tb", Algorithm: core.TokenBucket, Limit: 30, Window: 10 * time.Second, Burst: 20},
		{Name: "fw", Algorithm: core.FixedWindow, Limit: 40, Window: 10 * time.Second},
		{Name: "sl", Algorithm: core.SlidingLog, Limit: 20, Window: 10 * time.Second},
		{Name: "sw", Algorithm: core.SlidingWindow, Limit: 40, Window: 15 * time.Second},
		{Name: "lb", Algorithm: core.LeakyBucket, Limit: 7, Window: 10 * time.Second, Burst: 3},
	}
}

// TestSoak runs the soak and checks, at the end: every sampled decision
// equal to the model's (or, for a key the store evicted while it held usage,
// to the model's of a key forgotten at that point, with the eviction
// counted in Stats); no error from the churn; at most MaxKeys keys in every
// store at every sample, and the stores full (fullShare) in most samples
// (fullSamples); the live heap flat (heapGrowth) and under bytesPerKey a
// key; the goroutines back to their number before, none created but the
// soak's own.
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("the soak runs only with -soak DURATION, such as -soak 30m")
	}
	every := *soakEvery
	if every <= 0 {
		every = max(time.Second, (*soakFor / 120).Round(time.Second))
	}
	csvPath := *soakCSV
	if csvPath == "" {
		csvPath = filepath.Join(t.TempDir(), "soak.csv")
	}
	csv, err := os.Create(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer csv.Close()
	fmt.Fprintln(csv, soakCSVHeader)

	maxKeys := *soakKeys
	policies := soakPolicies()
	ck := newSoakChecker(len(policies), 256)

	// What the process holds before the stores exist.
	runtime.GC()
	base := readSoakMetrics()
	stores := make([]*soakStore, len(policies))
	for i, p := range policies {
		if stores[i], err = newSoakStore(p, maxKeys); err != nil {
			t.Fatal(err)
		}
	}
	ck.stores = stores
	// Full from the start: one request for each of twice MaxKeys keys, so
	// that every shard reaches its bound (and its table its largest size).
	for _, s := range stores {
		for i := range 2 * maxKeys {
			if _, err := s.m.AllowN(context.Background(), "f"+strconv.Itoa(i), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	runtime.GC()
	t.Logf("%d stores of MaxKeys %d (%s); the live heap before them %s; sampling every %v; samples in %s",
		len(stores), maxKeys, policyNames(policies), megabytes(base.heapLive), every, csvPath)

	var stop atomic.Bool
	var wg sync.WaitGroup
	const workers = 2
	pace := newSoakPacer(*soakCPU, workers)
	churners := make([]*churner, workers)
	for i := range churners {
		churners[i] = newChurner(i, stores, maxKeys)
	}
	spawned := 0
	spawn := func(f func()) { spawned++; wg.Go(f) }
	for _, c := range churners {
		spawn(func() { c.run(&stop, pace) })
	}
	spawn(func() { ck.run(&stop) })
	spawn(func() { pace.run(&stop) })

	start := time.Now()
	var samples []soakSample
	prev := soakSample{}
	prevCPU := processCPU()
	tick := time.NewTicker(every)
	t.Log(soakTableHeader)
	for range tick.C {
		elapsed := time.Since(start)
		s := takeSoakSample(elapsed, stores, churners, ck)
		c := processCPU()
		s.cpu = float64(c-prevCPU) / float64(elapsed-prev.at)
		s.perSecond = float64(s.decisions-prev.decisions) / (elapsed - prev.at).Seconds()
		prevCPU, prev = c, s
		samples = append(samples, s)
		t.Log(s.row())
		fmt.Fprintln(csv, s.csv())
		for i, st := range s.stats {
			if st.Keys > maxKeys {
				t.Errorf("at %v: %s holds %d keys, above MaxKeys %d", elapsed.Round(time.Second), stores[i].m.Policy().Name, st.Keys, maxKeys)
			}
		}
		if elapsed >= *soakFor {
			break
		}
	}
	tick.Stop()
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)

	// The goroutines the soak started are gone; the stores started none.
	var end soakMetrics
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if end = readSoakMetrics(); end.goroutines == base.goroutines || time.Now().After(deadline) {
			break
		}
	}
	runtime.GC()
	end.heapLive = readSoakMetrics().heapLive
	last := samples[len(samples)-1]
	keys, fresh, lossy := 0, uint64(0), uint64(0)
	for i, st := range last.stats {
		keys += st.Keys
		fresh += st.FreshDrops
		lossy += st.LossyEvictions
		c := &ck.counts[i]
		t.Logf("%-2s %-14s %.0f decisions/s; keys %d (%.1f%% of MaxKeys), fresh drops %d, lossy evictions %d; sampled %d (allowed %d, denied %d, peeked %d), sampled keys forgotten %d (kept in use %d), holding of %d units: at their last decision before, at most %d (%d all); at their first after, still up to %d (%d still all)",
			policies[i].Name, policies[i].Algorithm, float64(last.perStore[i])/last.at.Seconds(), st.Keys, 100*float64(st.Keys)/float64(maxKeys), st.FreshDrops, st.LossyEvictions,
			c.decisions.Load(), c.allowed.Load(), c.denied.Load(), c.peeked.Load(), c.forgotten.Load(), c.keptForgotten.Load(),
			policies[i].Capacity(), c.heldBefore.Load(), c.fullBefore.Load(), c.heldAfter.Load(), c.fullAfter.Load())
		if c.allowed.Load() == 0 || c.denied.Load() == 0 {
			t.Errorf("%s: the sampled keys were allowed %d times and denied %d: the check needs both", policies[i].Name, c.allowed.Load(), c.denied.Load())
		}
	}
	decisions := last.decisions
	var minted, errs uint64
	for _, c := range churners {
		minted += c.minted.Load()
		errs += c.errs.Load()
	}
	if errs > 0 {
		t.Errorf("%d of the churn's decisions returned an error", errs)
	}
	lo, hi := heapRange(samples)
	full := 0
	for _, s := range samples {
		if s.full(maxKeys) {
			full++
		}
	}
	if float64(full) < fullSamples*float64(len(samples)) {
		t.Errorf("every store held %.0f%% of MaxKeys in %d samples of %d, below %.0f%%: the soak did not hold the stores at their maximum", 100*fullShare, full, len(samples), 100*fullSamples)
	}
	first, lastThird := thirdsMax(samples)
	bound := base.heapLive + uint64(len(stores)*maxKeys*bytesPerKey)
	perKey := float64(end.heapLive-base.heapLive) / float64(len(stores)*maxKeys)
	perHeld := float64(end.heapLive-base.heapLive) / float64(keys)
	t.Logf("ran %v: %d decisions (%.0f/s), %d keys minted; keys held %d at the end, every store full in %d samples of %d; fresh drops %d, lossy evictions %d",
		elapsed.Round(time.Second), decisions, float64(decisions)/elapsed.Seconds(), minted, keys, full, len(samples), fresh, lossy)
	t.Logf("live heap %s before the stores, %s to %s over the run (first third's max %s, last third's %s), %s at the end after a GC: %.1f bytes per key of MaxKeys, %.1f per key held; bound %s",
		megabytes(base.heapLive), megabytes(lo), megabytes(hi), megabytes(first), megabytes(lastThird), megabytes(end.heapLive), perKey, perHeld, megabytes(bound))
	t.Logf("scan heap at the end %s; goroutines %d before, %d at the end, %d created during the run (the soak started %d)",
		megabytes(end.heapScan), base.goroutines, end.goroutines, end.created-base.created, spawned)
	t.Logf("sampled decisions %d, equal to the model %d, forgotten after a counted eviction %d (of keys kept in use %d), mismatches %d",
		ck.total(func(c *checkCounts) uint64 { return c.decisions.Load() }), ck.total(func(c *checkCounts) uint64 { return c.matched.Load() }),
		ck.total(func(c *checkCounts) uint64 { return c.forgotten.Load() }), ck.total(func(c *checkCounts) uint64 { return c.keptForgotten.Load() }),
		ck.mismatches.Load())

	for _, m := range ck.report() {
		t.Error(m)
	}
	if n := ck.mismatches.Load(); n > 0 {
		t.Errorf("%d sampled decisions differ from the model", n)
	}
	if float64(lastThird) > (1+heapGrowth)*float64(first) {
		t.Errorf("live heap grew: the last third's largest sample %s is above the first third's %s by more than %.0f%%", megabytes(lastThird), megabytes(first), 100*heapGrowth)
	}
	if hi > bound || end.heapLive > bound {
		t.Errorf("live heap %s (at the end %s) above %s: %s before the stores and %d bytes for each of %d×%d keys",
			megabytes(hi), megabytes(end.heapLive), megabytes(bound), megabytes(base.heapLive), bytesPerKey, len(stores), maxKeys)
	}
	if end.goroutines != base.goroutines {
		t.Errorf("%d goroutines at the end, %d before the soak", end.goroutines, base.goroutines)
	}
	if n := end.created - base.created; n != uint64(spawned) {
		t.Errorf("%d goroutines created during the soak, which started %d", n, spawned)
	}
	for _, s := range samples {
		if s.goroutines != base.goroutines+spawned {
			t.Errorf("at %v: %d goroutines, want %d (%d before and the soak's %d)", s.at.Round(time.Second), s.goroutines, base.goroutines+spawned, base.goroutines, spawned)
			break
		}
	}
	if *soakSVG != "" {
		svg := heapSVG(samples, bound, len(stores), maxKeys, elapsed)
		if err := os.WriteFile(*soakSVG, []byte(svg), 0o644); err != nil {
			t.Error(err)
		} else {
			t.Logf("heap chart written to %s", *soakSVG)
		}
	}
}

func policyNames(ps []core.Policy) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name + " " + p.String()
	}
	return strings.Join(names, "; ")
}

// A pinClock is the system clock, read through a core.Clock that the
// checker can hold at one reading: while the checker decides a sampled key,
// every read returns the time it took for that decision, so its model sees
// the very instant the store decided at. Reads by the churn in that span
// (a few hundred nanoseconds) return it too; the stores tolerate a clock
// that stands still. The store then counts time as it does for any clock but
// SystemClock: from its first reading, on the monotonic clock.
type pinClock struct {
	pin atomic.Pointer[time.Time]
}

func (c *pinClock) Now() time.Time {
	if p := c.pin.Load(); p != nil {
		return *p
	}
	return time.Now()
}

// A soakStore is one Memory and its clock.
type soakStore struct {
	m     *core.Memory
	clock *pinClock
	base  time.Time // the clock's reading when m was made
}

func newSoakStore(p core.Policy, maxKeys int) (*soakStore, error) {
	s := &soakStore{clock: new(pinClock), base: time.Now()}
	s.clock.pin.Store(&s.base)
	m, err := core.New(p, core.WithClock(s.clock), core.WithMaxKeys(maxKeys))
	s.clock.pin.Store(nil)
	s.m = m
	return s, err
}

// micros returns the time the store counts for a reading t of its clock: in
// Unix microseconds, elapsed from its first reading on the monotonic clock,
// as core.Memory does for a clock other than SystemClock.
func (s *soakStore) micros(t time.Time) int64 {
	ns := s.base.UnixNano() + int64(t.Sub(s.base))
	return divFloor(ns, 1000)
}

// A churner decides keys in each store in turn, for about 2 ms at a time:
// half of them new keys never seen again, a quarter from a pool of four
// times MaxKeys with Zipf-distributed popularity (keys that go idle for any
// length of time and come back), a quarter from a hot set of 1,000 keys that
// are denied most of the time. Each store gets the same time, not the same
// number of decisions: a decision costs more in some stores than others.
type churner struct {
	id        int
	stores    []*soakStore
	rng       *rand.Rand
	zipf      *rand.Zipf
	minted    atomic.Uint64
	decisions []atomic.Uint64 // per store
	errs      atomic.Uint64
}

func newChurner(id int, stores []*soakStore, maxKeys int) *churner {
	rng := rand.New(rand.NewPCG(uint64(id), 0x50a6))
	return &churner{
		id: id, stores: stores, rng: rng, zipf: rand.NewZipf(rng, 1.1, 100, uint64(4*maxKeys-1)),
		decisions: make([]atomic.Uint64, len(stores)),
	}
}

const soakHotKeys = 1000

func (c *churner) run(stop *atomic.Bool, pace *soakPacer) {
	ctx := context.Background()
	buf := make([]byte, 0, 32)
	var minted uint64
	for i := c.id; !stop.Load(); i++ {
		si := i % len(c.stores)
		s := c.stores[si]
		begin := time.Now()
		var decisions uint64
		for time.Since(begin) < 2*time.Millisecond {
			for range 64 {
				switch r := c.rng.Uint32N(4); {
				case r < 2:
					buf = strconv.AppendUint(append(append(buf[:0], 'm'), byte('0'+c.id), '.'), minted, 10)
					minted++
				case r == 2:
					buf = strconv.AppendUint(append(buf[:0], 'p'), c.zipf.Uint64(), 10)
				default:
					buf = strconv.AppendUint(append(buf[:0], 'h'), c.rng.Uint64N(soakHotKeys), 10)
				}
				// A string per decision, as a middleware's key function
				// makes: garbage the collector has to keep up with.
				if _, err := s.m.AllowN(ctx, string(buf), 1); err != nil {
					c.errs.Add(1)
				}
			}
			decisions += 64
		}
		c.decisions[si].Add(decisions)
		c.minted.Store(minted)
		pace.rest(time.Since(begin))
	}
}

// A soakPacer keeps the process near its share of CPU: each churner works in
// slices of about 2 ms and rests in proportion, and every 500 ms the pacer
// moves the share of time they work by what the process used (getrusage:
// the collector and the checker included) against the target.
type soakPacer struct {
	target  float64
	workers int
	duty    atomic.Uint64 // float64 bits: the share of time each churner works
}

func newSoakPacer(cpus float64, workers int) *soakPacer {
	p := &soakPacer{target: cpus, workers: workers}
	p.duty.Store(math.Float64bits(min(0.95, 0.8*cpus/float64(workers))))
	return p
}

func (p *soakPacer) rest(busy time.Duration) {
	d := math.Float64frombits(p.duty.Load())
	time.Sleep(time.Duration(float64(busy) * (1 - d) / d))
}

func (p *soakPacer) run(stop *atomic.Bool) {
	last, at := processCPU(), time.Now()
	for !stop.Load() {
		time.Sleep(500 * time.Millisecond)
		c, now := processCPU(), time.Now()
		used := float64(c-last) / float64(now.Sub(at))
		last, at = c, now
		d := math.Float64frombits(p.duty.Load())
		if used > 0 {
			d *= min(max(p.target/used, 0.7), 1.4)
		}
		p.duty.Store(math.Float64bits(min(max(d, 0.02), min(0.95, p.target/float64(p.workers)))))
	}
}

// processCPU returns the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A soakChecker decides sampled keys, each in one store only, with the
// store's clock pinned to the reading it took, and compares every decision
// (AllowN, and Peek before a quarter of them) with the key's model.
//
// Each sampled key asks at random times (a Poisson process) for 1 to 3
// units, at 0.3, 1 or 3 times its policy's rate on average, so that some
// keys are always allowed and some are often denied. Half of them are kept
// in use all along; the other half come and go: active for 0.2 to 2
// windows, then idle for 0.3 to 8 windows, so that some are swept fresh and
// some return to keys the store evicted.
//
// A store evicts a key that holds usage when it is full and finds no fresh
// entry (counted in Stats.LossyEvictions); the key then decides as a new
// one, which its model, which never forgets, does not. A decision that
// differs from the model's is accepted only when the key's decisions since
// one of its recent ones are exactly those of its model forgotten at that
// point, and the store counted a lossy eviction after it; the model is then
// the forgotten one. Anything else is a mismatch: the test fails, the first
// few are reported, and the key is reset in the store and the model alike.
type soakChecker struct {
	stores     []*soakStore
	keys       [][]sampledKey // per store
	counts     []checkCounts  // per store
	lossy      []uint64       // per store: Stats.LossyEvictions, refreshed every 100 ms
	rng        *rand.Rand
	mismatches atomic.Uint64
	mu         sync.Mutex
	reports    []string
}

type checkCounts struct {
	decisions, matched, allowed, denied, peeked atomic.Uint64
	forgotten, keptForgotten                    atomic.Uint64
	// What forgotten keys held, by their models, when they were evicted:
	// the most units one held at its last decision before (it held no more
	// when it was evicted) and how many held all the policy allows then;
	// the most units one still held at its first decision after (it held
	// no fewer when it was evicted) and how many still held all of them.
	heldBefore, fullBefore atomic.Int64
	heldAfter, fullAfter   atomic.Int64
}

type sampledKey struct {
	name    string
	kept    bool
	load    float64 // requests per µs
	next    int64   // µs: when it asks next
	active  int64   // µs: a returning key is active until then,
	idle    int64   // then idle until then
	model   keyModel
	history []soakEvent // the last decisions, oldest first
}

// A soakEvent is one sampled decision: what was asked, what the store
// decided, and the lossy evictions its store had counted before.
type soakEvent struct {
	now, n int64
	commit bool
	got    soakVerdict
	lossy  uint64
}

const soakHistory = 16

func newSoakChecker(nstores, perStore int) *soakChecker {
	c := &soakChecker{
		keys: make([][]sampledKey, nstores), counts: make([]checkCounts, nstores), lossy: make([]uint64, nstores),
		rng: rand.New(rand.NewPCG(7, 0x50a6)),
	}
	for i := range c.keys {
		c.keys[i] = make([]sampledKey, perStore)
		for j := range c.keys[i] {
			c.keys[i][j] = sampledKey{
				name:    "s" + strconv.Itoa(j),
				kept:    j%2 == 0,
				load:    []float64{0.3, 1, 3}[j%3],
				history: make([]soakEvent, 0, soakHistory),
			}
		}
	}
	return c
}

func (c *soakChecker) total(f func(*checkCounts) uint64) uint64 {
	var n uint64
	for i := range c.counts {
		n += f(&c.counts[i])
	}
	return n
}

func (c *soakChecker) run(stop *atomic.Bool) {
	for i, s := range c.stores {
		p := s.m.Policy()
		// The policy's rate in units per µs, over the mean cost.
		rate := float64(p.Limit) / float64(p.Window/time.Microsecond) / (float64(1+min(3, p.Capacity())) / 2)
		now := s.micros(time.Now())
		for j := range c.keys[i] {
			k := &c.keys[i][j]
			k.model = newKeyModel(p)
			k.load *= rate
			k.next = now + int64(c.rng.ExpFloat64()/k.load)
		}
	}
	refreshed := time.Time{}
	for !stop.Load() {
		if time.Since(refreshed) > 100*time.Millisecond {
			for i, s := range c.stores {
				c.lossy[i] = s.m.Stats().LossyEvictions
			}
			refreshed = time.Now()
		}
		for i, s := range c.stores {
			now := s.micros(time.Now())
			for j := range c.keys[i] {
				if k := &c.keys[i][j]; now >= k.next {
					c.step(i, k, now)
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// step makes the request key k is due for, if it is not idle, and sets
// when it asks next.
func (c *soakChecker) step(si int, k *sampledKey, now int64) {
	s := c.stores[si]
	p := s.m.Policy()
	k.next = now + 1 + int64(c.rng.ExpFloat64()/k.load)
	if !k.kept {
		w := int64(p.Window / time.Microsecond)
		if now >= k.idle {
			k.active = now + w/5 + c.rng.Int64N(w*9/5)
			k.idle = k.active + w*3/10 + c.rng.Int64N(w*77/10)
		}
		if now >= k.active {
			k.next = k.idle
			return
		}
	}
	ctx := context.Background()
	n := 1 + c.rng.Int64N(min(3, p.Capacity()))
	peek := c.rng.IntN(4) == 0
	t := time.Now()
	s.clock.pin.Store(&t)
	var pd core.Decision
	var perr error
	if peek {
		pd, perr = s.m.Peek(ctx, k.name, n)
	}
	d, err := s.m.AllowN(ctx, k.name, n)
	s.clock.pin.Store(nil)
	now = s.micros(t)
	if err != nil || perr != nil {
		c.fail(fmt.Sprintf("%s key %s: n=%d: AllowN: %v; Peek: %v", p.Name, k.name, n, err, perr))
		return
	}
	cnt := &c.counts[si]
	if peek {
		cnt.peeked.Add(1)
		c.check(si, k, soakEvent{now: now, n: n, got: verdictOf(pd), lossy: c.lossy[si]})
	}
	if d.Allowed {
		cnt.allowed.Add(1)
	} else {
		cnt.denied.Add(1)
	}
	c.check(si, k, soakEvent{now: now, n: n, commit: true, got: verdictOf(d), lossy: c.lossy[si]})
}

// check compares one decision with the key's model, and moves the model on.
func (c *soakChecker) check(si int, k *sampledKey, e soakEvent) {
	cnt := &c.counts[si]
	cnt.decisions.Add(1)
	if len(k.history) == soakHistory {
		k.history = append(k.history[:0], k.history[1:]...)
	}
	k.history = append(k.history, e)
	want, next := decideModel(k.model, e.now, e.n, e.commit)
	if want == e.got {
		cnt.matched.Add(1)
		k.model = next
		return
	}
	// Was the key forgotten before one of its recent decisions, the last
	// one first?
	s := c.stores[si]
	lossy := s.m.Stats().LossyEvictions
	for j := len(k.history) - 1; j >= 1; j-- {
		if lossy <= k.history[j-1].lossy {
			continue
		}
		if m, ok := replayModel(newKeyModel(s.m.Policy()), k.history[j:]); ok {
			// k.model is the key's model after its last decision before
			// the eviction if that was its last decision but this one
			// (j == len-1); else it counts later ones too, which only
			// raises the upper bound, and the lower one is not taken.
			held(&cnt.heldBefore, &cnt.fullBefore, k.model, k.history[j-1].now)
			if j == len(k.history)-1 {
				held(&cnt.heldAfter, &cnt.fullAfter, k.model, e.now)
			}
			k.model = m
			cnt.forgotten.Add(1)
			if k.kept {
				cnt.keptForgotten.Add(1)
			}
			return
		}
	}
	c.fail(fmt.Sprintf("%s key %s at +%v: n=%d commit=%v: store %+v, model %+v", s.m.Policy().Name, k.name,
		time.Duration(e.now-s.micros(s.base))*time.Microsecond, e.n, e.commit, e.got, want))
	_ = s.m.Reset(context.Background(), k.name)
	k.model = newKeyModel(s.m.Policy())
	k.history = k.history[:0]
}

// held records the units m holds at time at: the most of them in most, and
// one more in full if that is all the policy allows.
func held(most, full *atomic.Int64, m keyModel, at int64) {
	units := m.capacity() - mostThatFits(m, at)
	if units > most.Load() {
		most.Store(units)
	}
	if units == m.capacity() {
		full.Add(1)
	}
}

// replayModel runs m through the events and reports whether it decides each as
// the store did.
func replayModel(m keyModel, events []soakEvent) (keyModel, bool) {
	for _, e := range events {
		want, next := decideModel(m, e.now, e.n, e.commit)
		if want != e.got {
			return m, false
		}
		m = next
	}
	return m, true
}

func (c *soakChecker) fail(msg string) {
	c.mismatches.Add(1)
	c.mu.Lock()
	if len(c.reports) < 10 {
		c.reports = append(c.reports, msg)
	}
	c.mu.Unlock()
}

func (c *soakChecker) report() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reports)
}

// A soakVerdict is what a model decides, in microseconds; verdictOf reads one
// from a Decision.
type soakVerdict struct {
	allowed                                  bool
	remaining, retryAfter, resetAfter, delay int64
}

func verdictOf(d core.Decision) soakVerdict {
	us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	return soakVerdict{d.Allowed, d.Remaining, us(d.RetryAfter), us(d.ResetAfter), us(d.Delay)}
}

// A keyModel is a key as an algorithm's definition in DESIGN.md says it
// decides, on a clock of whole microseconds, written from the definition
// rather than from core's arithmetic: its state says which requests fit at
// a time if nothing else arrives, and a decision's fields are found by
// search over that.
type keyModel interface {
	// fits reports whether n units fit at time at, if no other request
	// arrives before.
	fits(at, n int64) bool
	// fresh reports whether the key holds nothing at time at.
	fresh(at int64) bool
	// count returns the model after n units allowed at time at.
	count(at, n int64) keyModel
	// delay is the leaky bucket's wait before n units allowed at at are
	// served, 0 for the others.
	delay(at, n int64) int64
	// capacity is the most units that can ever fit; horizon how long after
	// any time every request fits and the key is fresh, if nothing arrives.
	capacity() int64
	horizon() int64
}

func newKeyModel(p core.Policy) keyModel {
	L, W := p.Limit, int64(p.Window/time.Microsecond)
	if p.Algorithm.Burstable() {
		B := p.Capacity()
		return bucketModel{L: L, W: W, B: B, room: B * W, leaky: p.Algorithm == core.LeakyBucket}
	}
	return windowsModel{alg: p.Algorithm, L: L, W: W}
}

// decideModel returns what a request for n units decides at now, and the model
// after it (m itself when it is denied or commit is unset). The fields are
// those of core.Decision: Remaining, the most units that fit now (after the
// request when allowed); RetryAfter, the least wait of at least 1 µs after
// which the request fits if nothing else arrives; ResetAfter, the least
// wait until the key holds nothing (after the request when allowed).
func decideModel(m keyModel, now, n int64, commit bool) (soakVerdict, keyModel) {
	if !m.fits(now, n) {
		return soakVerdict{
			remaining:  mostThatFits(m, now),
			retryAfter: leastTrue(1, m.horizon(), func(t int64) bool { return m.fits(now+t, n) }),
			resetAfter: leastTrue(0, m.horizon(), func(t int64) bool { return m.fresh(now + t) }),
		}, m
	}
	after := m.count(now, n)
	v := soakVerdict{
		allowed:    true,
		remaining:  mostThatFits(after, now),
		resetAfter: leastTrue(0, after.horizon(), func(t int64) bool { return after.fresh(now + t) }),
		delay:      m.delay(now, n),
	}
	if commit {
		return v, after
	}
	return v, m
}

// mostThatFits returns the most units that fit in m at now.
func mostThatFits(m keyModel, now int64) int64 {
	k := m.capacity()
	for k > 0 && !m.fits(now, k) {
		k--
	}
	return k
}

// leastTrue returns the least t in [lo, hi] for which ok holds, ok being false
// and then true; -1 if it never holds.
func leastTrue(lo, hi int64, ok func(int64) bool) int64 {
	if !ok(hi) {
		return -1
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// bucketModel is the token bucket, and the leaky bucket as its queue: room is
// the units the bucket holds times W, as of last, so that it refills by
// exactly L for every microsecond, up to B·W. n units fit when the room is
// at least n·W. The leaky bucket's request is served when the units queued
// before it, and its own but the last, have left at L per W.
type bucketModel struct {
	L, W, B    int64
	room, last int64
	leaky      bool
}

func (b bucketModel) roomAt(at int64) int64 {
	if gap := at - b.last; gap < (b.B*b.W-b.room)/b.L+1 {
		return min(b.room+gap*b.L, b.B*b.W)
	}
	return b.B * b.W
}

func (b bucketModel) fits(at, n int64) bool { return b.roomAt(at) >= n*b.W }
func (b bucketModel) fresh(at int64) bool   { return b.roomAt(at) == b.B*b.W }
func (b bucketModel) capacity() int64       { return b.B }
func (b bucketModel) horizon() int64        { return b.B*b.W/b.L + 2 }

func (b bucketModel) count(at, n int64) keyModel {
	b.room, b.last = b.roomAt(at)-n*b.W, at
	return b
}

func (b bucketModel) delay(at, n int64) int64 {
	if !b.leaky {
		return 0
	}
	return divCeil(b.B*b.W-b.roomAt(at)+(n-1)*b.W, b.L)
}

// windowsModel is the fixed window, the sliding window and the sliding log over
// the list of allowed requests of the last two windows.
type windowsModel struct {
	alg  core.Algorithm
	L, W int64
	log  []logUnit // allowed requests, oldest first
}

type logUnit struct{ at, n int64 }

// sum returns the units allowed at times in [from, to].
func (w windowsModel) sum(from, to int64) int64 {
	var s int64
	for _, u := range w.log {
		if u.at >= from && u.at <= to {
			s += u.n
		}
	}
	return s
}

func (w windowsModel) fits(at, n int64) bool {
	start := divFloor(at, w.W) * w.W
	switch w.alg {
	case core.FixedWindow:
		return w.sum(start, at)+n <= w.L
	case core.SlidingWindow:
		// prev·(W-e)/W + cur + n <= L, times W.
		prev, cur := w.sum(start-w.W, start-1), w.sum(start, at)
		return prev*(w.W-(at-start))+(cur+n)*w.W <= w.L*w.W
	default: // sliding log: a request allowed at s counts while at - W < s
		return w.sum(at-w.W+1, at)+n <= w.L
	}
}

func (w windowsModel) fresh(at int64) bool {
	start := divFloor(at, w.W) * w.W
	switch w.alg {
	case core.FixedWindow:
		return w.sum(start, at) == 0
	case core.SlidingWindow:
		return w.sum(start-w.W, at) == 0
	default:
		return w.sum(at-w.W+1, at) == 0
	}
}

func (w windowsModel) count(at, n int64) keyModel {
	log := make([]logUnit, 0, len(w.log)+1)
	for _, u := range w.log {
		if u.at > at-2*w.W {
			log = append(log, u)
		}
	}
	w.log = append(log, logUnit{at, n})
	return w
}

func (windowsModel) delay(int64, int64) int64 { return 0 }
func (w windowsModel) capacity() int64        { return w.L }
func (w windowsModel) horizon() int64         { return 2*w.W + 2 }

func divFloor(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func divCeil(a, b int64) int64 { return -divFloor(-a, b) }

// A soakSample is the soak at one time.
type soakSample struct {
	at                         time.Duration
	decisions, minted, sampled uint64
	perSecond, cpu             float64
	mismatches, forgotten      uint64
	stats                      []core.Stats
	perStore                   []uint64 // decisions
	soakMetrics
}

type soakMetrics struct {
	heapLive, heapScan, total uint64
	goroutines                int
	created, gcs              uint64
}

var soakMetricNames = []string{
	"/gc/heap/live:bytes",
	"/gc/scan/heap:bytes",
	"/memory/classes/total:bytes",
	"/sched/goroutines:goroutines",
	"/sched/goroutines-created:goroutines",
	"/gc/cycles/total:gc-cycles",
}

func readSoakMetrics() soakMetrics {
	ms := make([]metrics.Sample, len(soakMetricNames))
	for i, n := range soakMetricNames {
		ms[i].Name = n
	}
	metrics.Read(ms)
	v := func(i int) uint64 {
		if ms[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return ms[i].Value.Uint64()
	}
	return soakMetrics{heapLive: v(0), heapScan: v(1), total: v(2), goroutines: int(v(3)), created: v(4), gcs: v(5)}
}

func takeSoakSample(at time.Duration, stores []*soakStore, churners []*churner, ck *soakChecker) soakSample {
	s := soakSample{at: at, soakMetrics: readSoakMetrics()}
	s.perStore = make([]uint64, len(stores))
	for _, c := range churners {
		for i := range c.decisions {
			s.perStore[i] += c.decisions[i].Load()
		}
		s.minted += c.minted.Load()
	}
	for i := range stores {
		s.perStore[i] += ck.counts[i].decisions.Load()
		s.decisions += s.perStore[i]
	}
	s.sampled = ck.total(func(c *checkCounts) uint64 { return c.decisions.Load() })
	s.forgotten = ck.total(func(c *checkCounts) uint64 { return c.forgotten.Load() })
	s.mismatches = ck.mismatches.Load()
	for _, st := range stores {
		s.stats = append(s.stats, st.m.Stats())
	}
	return s
}

// full reports whether every store held at least fullShare of maxKeys.
func (s soakSample) full(maxKeys int) bool {
	for _, st := range s.stats {
		if float64(st.Keys) < fullShare*float64(maxKeys) {
			return false
		}
	}
	return true
}

func (s soakSample) totals() (keys int, fresh, lossy uint64) {
	for _, st := range s.stats {
		keys += st.Keys
		fresh += st.FreshDrops
		lossy += st.LossyEvictions
	}
	return
}

const (
	soakTableHeader = "   time  decisions/s   minted     keys   fresh drops  lossy evict.  live heap  scan heap  goroutines  cpu   sampled  forgotten  mismatches"
	soakCSVHeader   = "seconds,decisions,decisions_per_second,minted,keys,fresh_drops,lossy_evictions,heap_live_bytes,heap_scan_bytes,memory_total_bytes,goroutines,gc_cycles,cpu,sampled,forgotten,mismatches"
)

func (s soakSample) row() string {
	keys, fresh, lossy := s.totals()
	return fmt.Sprintf("%7s  %11.0f  %7.1fM  %7d  %11d  %12d  %9s  %9s  %10d  %.2f  %8d  %9d  %10d",
		s.at.Round(time.Second), s.perSecond, float64(s.minted)/1e6, keys, fresh, lossy, megabytes(s.heapLive), megabytes(s.heapScan), s.goroutines, s.cpu, s.sampled, s.forgotten, s.mismatches)
}

func (s soakSample) csv() string {
	keys, fresh, lossy := s.totals()
	return fmt.Sprintf("%.1f,%d,%.0f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.3f,%d,%d,%d",
		s.at.Seconds(), s.decisions, s.perSecond, s.minted, keys, fresh, lossy, s.heapLive, s.heapScan, s.total, s.goroutines, s.gcs, s.cpu, s.sampled, s.forgotten, s.mismatches)
}

func megabytes(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

func heapRange(samples []soakSample) (lo, hi uint64) {
	lo = math.MaxUint64
	for _, s := range samples {
		lo, hi = min(lo, s.heapLive), max(hi, s.heapLive)
	}
	return lo, hi
}

// thirdsMax returns the largest live heap sampled in the first third of the
// samples and in the last third.
func thirdsMax(samples []soakSample) (first, last uint64) {
	n := max(len(samples)/3, 1)
	for _, s := range samples[:n] {
		first = max(first, s.heapLive)
	}
	for _, s := range samples[len(samples)-n:] {
		last = max(last, s.heapLive)
	}
	return first, last
}

// heapSVG draws the live heap and the scan heap over the run, against the
// bound the soak asserts: a small chart for docs/.
func heapSVG(samples []soakSample, bound uint64, stores, maxKeys int, elapsed time.Duration) string {
	const (
		width, height = 640, 300
		left, right   = 64, 20
		top, bottom   = 48, 44
	)
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	ymax := float64(bound) / (1 << 20)
	step := niceStep(ymax / 5)
	ymax = math.Ceil(ymax/step) * step
	// Minutes, or seconds for a run of under 2 minutes.
	unit, unitName := time.Minute, "minutes"
	if elapsed < 2*time.Minute {
		unit, unitName = time.Second, "seconds"
	}
	xmax := float64(elapsed) / float64(unit)
	x := func(m float64) float64 { return left + pw*m/xmax }
	title := fmt.Sprintf("Memory store soak: live heap over %.0f %s", xmax, unitName)
	y := func(v float64) float64 { return float64(top) + ph*(1-v/ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, "<title>%s</title>\n", title)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold" fill="#222">%s</text>`+"\n", left, title)
	fmt.Fprintf(&b, `<text x="%d" y="36" fill="#444">%d stores, one per algorithm, each held at MaxKeys %s by a churn of keys</text>`+"\n", left, stores, thousands(maxKeys))
	for i := 0.0; i*step <= ymax+step/2; i++ {
		v := i * step
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/><text x="%d" y="%.1f" text-anchor="end" fill="#555">%.4g MB</text>`+"\n",
			left, width-right, y(v), y(v), left-6, y(v)+4, v)
	}
	xstep := niceStep(xmax / 6)
	for i := 0.0; i*xstep <= xmax*1.001; i++ {
		m := i * xstep
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/><text x="%.1f" y="%d" text-anchor="middle" fill="#555">%.4g</text>`+"\n",
			x(m), x(m), height-bottom, height-bottom+4, x(m), height-bottom+16, m)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", left+pw/2, height-8, unitName)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#555"/><line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#555"/>`+"\n",
		left, width-right, height-bottom, height-bottom, left, left, top, height-bottom)
	bv := float64(bound) / (1 << 20)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="5,4"/><text x="%d" y="%.1f" text-anchor="end" fill="#d62728">bound asserted</text>`+"\n",
		left, width-right, y(bv), y(bv), width-right-4, y(bv)-4)
	line := func(color, label string, v func(soakSample) uint64, ly int) {
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="`, color)
		for i, s := range samples {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", x(float64(s.at)/float64(unit)), y(float64(v(s))/(1<<20)))
		}
		b.WriteString(`"/>` + "\n")
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d" fill="#333">%s</text>`+"\n",
			left+12, left+32, ly, ly, color, left+38, ly+4, label)
	}
	line("#1f77b4", "live heap (after each GC)", func(s soakSample) uint64 { return s.heapLive }, top+14)
	line("#2ca02c", "of which the GC scans", func(s soakSample) uint64 { return s.heapScan }, top+30)
	b.WriteString("</svg>\n")
	return b.String()
}

// thousands formats n with commas: 100,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// niceStep returns 1, 2 or 5 times a power of ten, at least v.
func niceStep(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
