package faults

// Clocks that disagree, measured end to end on real redis-servers.
//
// Two faults. A gateway whose clock is minutes behind the others (or a few
// seconds ahead), when the limiters read the gateways' clocks
// (redisstore.WithClock); and the Redis TIME a limiter reads by default,
// after a failover to a replica whose clock is behind (or ahead).
//
// Every run drives four algorithms side by side, each on keys of its own,
// from several gateways far above the limit, and counts the units allowed
// per key in steps of true time (a quarter window), exactly:
//
//   - with client clocks, true time is a manual clock moved one step per
//     step of real time under a write lock, and each gateway reads it plus
//     its offset, as the fault harness's Run does with one clock;
//   - with the server's TIME, true time is the machine's clock, which the
//     master's TIME reads: each decision runs under a read lock that a
//     goroutine takes for writing either side of every step boundary (by
//     twice the slowest recent decision, from 1 ms), so a decision starts
//     and ends within one step. One that did not is counted as ambiguous,
//     and the checks allow for it.
//
// The skewed replica is a redis-server started with a small LD_PRELOAD
// library, compiled here with cc, that moves its process's wall clock
// (gettimeofday, clock_gettime of CLOCK_REALTIME, time) by a fixed offset:
// its TIME, in scripts too, and its key expiry read that clock, as on a
// node whose clock is wrong. libfaketime, the usual tool, cannot start
// Debian's redis-server, which is linked with jemalloc: libfaketime
// recurses into clock_gettime during its own initialization and the
// server exits (wolfcw/libfaketime#130); the library here calls the
// clock_gettime system call directly, and allocates nothing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redisserver"
	"github.com/ratekit/ratekit/redisstore"
)

// skewAlgorithms are the algorithms a clock run drives.
var skewAlgorithms = []core.Algorithm{core.FixedWindow, core.SlidingWindow, core.SlidingLog, core.TokenBucket}

// skewConfig is one clock run. The zero value of a field means the default
// in its comment.
type skewConfig struct {
	// Limit and Window are every algorithm's policy (Burst: Limit).
	// Default: 10 per 100 ms.
	Limit  int64
	Window time.Duration
	// Steps is the number of steps of true time per Window in which
	// allowed units are counted. Default: 4.
	Steps int
	// Offsets holds, with client clocks, each gateway's clock offset from
	// true time. Nil: the limiters read the server's TIME, and Gateways
	// gateways share it.
	Offsets  []time.Duration
	Gateways int // with the server's TIME; default 3
	// Keys is the number of keys per algorithm. Default: 2.
	Keys int
	// Workers is the number of goroutines per gateway, each deciding on
	// every algorithm's keys in turn. Default: 2.
	Workers int
	// Pace is each worker's pause between two decisions. Default: 1 ms.
	Pace time.Duration
	// Before is the traffic before the event, After the traffic after it.
	// The event comes in the middle of a window of true time, with traffic
	// paused: Event runs, if not nil; the gateways switch to the Redis at
	// Switch, if not empty; and the Late last gateways, idle until then,
	// start deciding.
	Before, After time.Duration
	Event         func(ctx context.Context) error
	Switch        string
	Late          int
}

func (c skewConfig) withDefaults() skewConfig {
	if c.Limit == 0 {
		c.Limit = 10
	}
	if c.Window == 0 {
		c.Window = 100 * time.Millisecond
	}
	if c.Steps == 0 {
		c.Steps = 4
	}
	if c.Gateways == 0 {
		c.Gateways = 3
	}
	if c.Offsets != nil {
		c.Gateways = len(c.Offsets)
	}
	if c.Keys == 0 {
		c.Keys = 2
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Pace == 0 {
		c.Pace = time.Millisecond
	}
	return c
}

func (c skewConfig) step() time.Duration { return c.Window / time.Duration(c.Steps) }

// skewFigures is what one algorithm's limiters did in a clock run, counted
// in true time.
type skewFigures struct {
	Algorithm core.Algorithm
	// Decisions and Allowed count every gateway's decisions (a decision
	// that fails fails the run).
	Decisions, Allowed int
	// OverAdmitted is the units allowed above Limit in a key's window
	// (aligned to multiples of Window, as the fixed window's), summed over
	// keys and windows; WorstWindow is the most units in one key's window,
	// and Where says where it was, in windows from the event (or the
	// start).
	OverAdmitted, WorstWindow int64
	Where                     string
	// WorstSpan is the most units allowed for one key in any Window of
	// true time (Steps consecutive steps): the sliding log's contract is
	// Limit there, the fixed window's 2·Limit.
	WorstSpan int64
	// BucketExcess is, for the token bucket, the most units allowed for one
	// key in any span of true time beyond what a bucket of Burst refilled
	// at Limit per Window allows in that span; 0 for the others.
	BucketExcess int64
	// Share is each gateway's part of the units allowed after the event
	// (all of them without one), and MaxRetry the longest RetryAfter it
	// was told then.
	Share    []float64
	MaxRetry []time.Duration
	// LongestDenial is the longest a key went without an allowed unit, in
	// true time (the worst key), and DeniedAcross the longest such time
	// that ended after a switch to another Redis. Both count the time
	// traffic was paused for the event, Pause.
	LongestDenial, DeniedAcross, Pause time.Duration
	// Ambiguous counts the allowed units whose decision straddled a step
	// boundary (server's TIME only).
	Ambiguous int
}

// String formats the figures on one line.
func (f skewFigures) String() string {
	var shares, retries []string
	for i := range f.Share {
		shares = append(shares, fmt.Sprintf("%.0f%%", 100*f.Share[i]))
		retries = append(retries, f.MaxRetry[i].Round(time.Millisecond).String())
	}
	var s string
	if f.Algorithm.Burstable() {
		// Its contract is the bucket's: a window may hold a burst and the
		// refill, so windows above the limit say nothing.
		s = fmt.Sprintf("%-14s %5d decisions, %4d allowed, %d beyond the bucket in a span (most in a window %d)",
			f.Algorithm, f.Decisions, f.Allowed, f.BucketExcess, f.WorstWindow)
	} else {
		s = fmt.Sprintf("%-14s %5d decisions, %4d allowed, over-admitted %d (worst window %d%s; most in any span of a window %d)",
			f.Algorithm, f.Decisions, f.Allowed, f.OverAdmitted, f.WorstWindow, f.Where, f.WorstSpan)
	}
	s += fmt.Sprintf(", shares by gateway %s, longest RetryAfter %s, longest without an allowed unit %v",
		strings.Join(shares, " "), strings.Join(retries, " "), f.LongestDenial.Round(time.Millisecond))
	if f.DeniedAcross > 0 {
		s += fmt.Sprintf(", across the switch %v (traffic paused %v for it)", f.DeniedAcross.Round(time.Millisecond), f.Pause.Round(time.Millisecond))
	}
	if f.Ambiguous > 0 {
		s += fmt.Sprintf(", %d ambiguous", f.Ambiguous)
	}
	return s
}

// skewTally is what the workers of a clock run record, under mu.
type skewTally struct {
	mu       sync.Mutex
	allowed  map[skewSlot]int64 // units allowed per key and step
	decided  map[skewSlot]int64 // decisions per key and step
	byGate   [][]int            // per algorithm, per gateway: units allowed after the event
	retry    [][]time.Duration  // per algorithm, per gateway: longest RetryAfter after the event
	total    []int              // per algorithm: decisions
	firstErr error
	straddle []int // per algorithm: allowed units whose decision straddled a step
}

// skewSlot is one key of one algorithm in one step of true time.
type skewSlot struct {
	alg, key int
	step     int64
}

// skewGateway is one gateway: its client and a limiter per algorithm.
type skewGateway struct {
	client   *redis.Client
	limiters []*redisstore.Limiter
}

// skewRun drives cfg's traffic on the Redis at addr and returns the
// figures per algorithm, in the order of skewAlgorithms. Every wait is
// bounded; ctx ends the run early.
func skewRun(ctx context.Context, addr string, cfg skewConfig) ([]skewFigures, error) {
	cfg = cfg.withDefaults()
	step := cfg.step()
	serverTime := cfg.Offsets == nil
	now := time.Now().UnixNano()
	var base *core.ManualClock
	if !serverTime {
		// True time starts in the middle of a step, a whole number of
		// windows since the epoch, and moves one step per step of real
		// time.
		base = core.NewManualClock(time.Unix(0, now-now%int64(cfg.Window)+int64(step/2)))
	}
	stepOf := func(t int64) int64 { return skewFloorDiv(t, int64(step)) }
	trueStep := func() int64 {
		if serverTime {
			return stepOf(time.Now().UnixNano())
		}
		return stepOf(base.Now().UnixNano())
	}
	var all []*skewGateway
	defer func() {
		for _, g := range all {
			g.client.Close()
		}
	}()
	connect := func(addr string) ([]*skewGateway, error) {
		var gs []*skewGateway
		for i := range cfg.Gateways {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 2 * cfg.Workers})
			g := &skewGateway{client: c}
			gs = append(gs, g)
			all = append(all, g)
			opts := []redisstore.Option{redisstore.WithPrefix("skew")}
			if !serverTime {
				opts = append(opts, redisstore.WithClock(skewClock{base, cfg.Offsets[i]}))
			}
			for _, a := range skewAlgorithms {
				l, err := redisstore.New(c, core.Policy{Algorithm: a, Limit: cfg.Limit, Window: cfg.Window}, opts...)
				if err != nil {
					return nil, fmt.Errorf("faults: %w", err)
				}
				g.limiters = append(g.limiters, l)
			}
		}
		return gs, nil
	}
	gates, err := connect(addr)
	if err != nil {
		return nil, err
	}
	var next []*skewGateway
	if cfg.Switch != "" {
		// Connected ahead, so that the switch is quick.
		if next, err = connect(cfg.Switch); err != nil {
			return nil, err
		}
	}

	tally := &skewTally{
		allowed: make(map[skewSlot]int64), decided: make(map[skewSlot]int64),
		total: make([]int, len(skewAlgorithms)), straddle: make([]int, len(skewAlgorithms)),
	}
	for range skewAlgorithms {
		tally.byGate = append(tally.byGate, make([]int, cfg.Gateways))
		tally.retry = append(tally.retry, make([]time.Duration, cfg.Gateways))
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		// Decisions hold mu for reading; moving the clock, a step boundary
		// and the event hold it for writing.
		mu        sync.RWMutex
		wg        sync.WaitGroup
		after     bool // the event has come; under mu
		eventStep int64
		pause     time.Duration         // the event's
		joined    = make(chan struct{}) // closed at the event
		slowest   atomic.Int64          // the slowest decision since the last boundary, in ns
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !serverTime {
			t := time.NewTicker(step)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					mu.Lock()
					base.Advance(step)
					mu.Unlock()
				}
			}
		}
		// No decision runs within guard of a step boundary: twice the
		// slowest decision of the last step, from 1 ms to a fifth of a
		// step.
		for {
			next := time.Unix(0, (stepOf(time.Now().UnixNano())+1)*int64(step))
			guard := min(max(2*time.Duration(slowest.Swap(0)), time.Millisecond), step/5)
			if skewSleep(ctx, time.Until(next.Add(-guard))) != nil {
				return
			}
			mu.Lock()
			err := skewSleep(ctx, time.Until(next.Add(guard)))
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	pairs := len(skewAlgorithms) * cfg.Keys
	for gi := range cfg.Gateways {
		for w := range cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if gi >= cfg.Gateways-cfg.Late {
					select {
					case <-joined:
					case <-ctx.Done():
						return
					}
				}
				for n := gi + w*pairs/cfg.Workers; ctx.Err() == nil; n++ {
					ai, key := n%len(skewAlgorithms), (n/len(skewAlgorithms))%cfg.Keys
					dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
					mu.RLock()
					s0, t0 := trueStep(), time.Now()
					d, err := gates[gi].limiters[ai].AllowN(dctx, fmt.Sprintf("a%d-k%d", ai, key), 1)
					s1 := s0
					if serverTime {
						s1 = trueStep()
						if took := int64(time.Since(t0)); took > slowest.Load() {
							slowest.Store(took) // racy maximum: a guard, not a figure
						}
					}
					counted := after || cfg.Before == 0
					mu.RUnlock()
					dcancel()
					if ctx.Err() != nil {
						return // the run ended during the decision: not counted
					}
					tally.record(ai, key, gi, s1, s1 != s0, counted, d, err)
					if skewSleep(ctx, cfg.Pace) != nil {
						return
					}
				}
			}()
		}
	}

	runErr := func() error {
		if err := skewSleep(ctx, cfg.Before); err != nil {
			return err
		}
		// The middle of a window: the traffic has spent the window's
		// limit, and the pause ends well before the window does.
		for trueStep()%int64(cfg.Steps) != int64(cfg.Steps/2) {
			if err := skewSleep(ctx, 500*time.Microsecond); err != nil {
				return err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		paused := time.Now()
		if cfg.Event != nil {
			if err := cfg.Event(ctx); err != nil {
				return fmt.Errorf("event: %w", err)
			}
		}
		if next != nil {
			gates = next
		}
		after, eventStep, pause = true, trueStep(), time.Since(paused)
		close(joined)
		return nil
	}()
	if runErr == nil {
		runErr = skewSleep(ctx, cfg.After)
	}
	cancel()
	wg.Wait()
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return nil, fmt.Errorf("faults: clocks: %w", runErr)
	}
	if tally.firstErr != nil {
		return nil, fmt.Errorf("faults: clocks: a decision failed: %w", tally.firstErr)
	}
	switched := int64(-1 << 62)
	if cfg.Switch != "" {
		switched = eventStep
	}
	var figs []skewFigures
	for ai := range skewAlgorithms {
		f := tally.figures(cfg, ai, eventStep, switched)
		f.Pause = pause
		figs = append(figs, f)
	}
	return figs, nil
}

// skewClock is a gateway's clock: true time plus its offset.
type skewClock struct {
	base *core.ManualClock
	off  time.Duration
}

// Now returns true time plus the offset.
func (c skewClock) Now() time.Time { return c.base.Now().Add(c.off) }

// skewSleep waits d, or until ctx ends, and returns ctx's error then.
func skewSleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// skewFloorDiv returns a/b rounded down, for b > 0.
func skewFloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// record counts one decision of gateway gi on algorithm ai's key in step s.
func (t *skewTally) record(ai, key, gi int, s int64, straddled, counted bool, d core.Decision, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total[ai]++
	if err != nil {
		if t.firstErr == nil {
			t.firstErr = err
		}
		return
	}
	slot := skewSlot{ai, key, s}
	t.decided[slot]++
	if !d.Allowed {
		if counted {
			t.retry[ai][gi] = max(t.retry[ai][gi], d.RetryAfter)
		}
		return
	}
	t.allowed[slot]++
	if counted {
		t.byGate[ai][gi]++
	}
	if straddled {
		t.straddle[ai]++
	}
}

// figures computes algorithm ai's figures: eventStep is the step of the
// event, switched that of the switch to another Redis (-2^62 if none).
func (t *skewTally) figures(cfg skewConfig, ai int, eventStep, switched int64) skewFigures {
	t.mu.Lock()
	defer t.mu.Unlock()
	step, steps := cfg.step(), int64(cfg.Steps)
	f := skewFigures{Algorithm: skewAlgorithms[ai], Decisions: t.total[ai], Ambiguous: t.straddle[ai]}
	var counted int
	for gi := range cfg.Gateways {
		counted += t.byGate[ai][gi]
	}
	for gi := range cfg.Gateways {
		share := 0.0
		if counted > 0 {
			share = float64(t.byGate[ai][gi]) / float64(counted)
		}
		f.Share = append(f.Share, share)
		f.MaxRetry = append(f.MaxRetry, t.retry[ai][gi])
	}
	unit := cfg.Window / time.Duration(cfg.Limit) // the bucket's refill interval
	for key := range cfg.Keys {
		// The key's steps, from the first window decided to the last step.
		first, last := int64(1<<62), int64(-1<<62)
		for slot := range t.decided {
			if slot.alg == ai && slot.key == key {
				first, last = min(first, slot.step), max(last, slot.step)
			}
		}
		if first > last {
			continue
		}
		first = skewFloorDiv(first, steps) * steps
		c := make([]int64, last-first+1)
		for i := range c {
			c[i] = t.allowed[skewSlot{ai, key, first + int64(i)}]
			f.Allowed += int(c[i])
		}
		// Windows, aligned, and spans of a window.
		sum := func(i, n int) (u int64) {
			for _, v := range c[i:min(i+n, len(c))] {
				u += v
			}
			return u
		}
		for w := 0; w < len(c); w += cfg.Steps {
			n := sum(w, cfg.Steps)
			f.OverAdmitted += max(n-cfg.Limit, 0)
			if n > f.WorstWindow {
				f.WorstWindow = n
				f.Where = ""
				if n > cfg.Limit {
					at := skewFloorDiv(first+int64(w), steps)
					if cfg.Before > 0 {
						f.Where = fmt.Sprintf(", key %d, window %+d from the event", key, at-skewFloorDiv(eventStep, steps))
					} else {
						f.Where = fmt.Sprintf(", key %d, window %d of the run", key, at-skewFloorDiv(first, steps))
					}
				}
			}
		}
		for i := range c {
			f.WorstSpan = max(f.WorstSpan, sum(i, cfg.Steps))
		}
		if f.Algorithm.Burstable() {
			// Units allowed in steps i..j were allowed within (j-i) steps
			// of each other on a manual clock (a step is one instant), and
			// within j-i+1 steps on the server's clock.
			extra := int64(0)
			if cfg.Offsets == nil {
				extra = 1
			}
			for i := range c {
				var n int64
				for j := i; j < len(c); j++ {
					n += c[j]
					span := time.Duration(int64(j-i)+extra) * step
					f.BucketExcess = max(f.BucketExcess, n-cfg.Limit-int64(span/unit))
				}
			}
		}
		// Gaps: the steps between two with allowed units (or the end),
		// traffic paused or not; those that end after the switch, if any.
		var gap time.Duration
		for i := range c {
			if c[i] == 0 && i > 0 {
				gap += step
			}
			if c[i] > 0 || i == len(c)-1 {
				f.LongestDenial = max(f.LongestDenial, gap)
				if switched > -1<<62 && first+int64(i) >= switched {
					f.DeniedAcross = max(f.DeniedAcross, gap)
				}
				gap = 0
			}
		}
	}
	return f
}

// skewShimSource is the LD_PRELOAD library that moves a process's wall
// clock by SKEW_US microseconds: gettimeofday, time, and clock_gettime of
// the realtime clocks. The monotonic clocks are left alone, as NTP leaves
// them. It calls the clock_gettime system call itself (no dlsym, no
// allocation), so it works in a process linked with jemalloc.
const skewShimSource = `#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_us(void) {
	static long long off;
	static int done;
	if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
		const char *s = getenv("SKEW_US");
		__atomic_store_n(&off, s ? strtoll(s, NULL, 10) : 0, __ATOMIC_RELAXED);
		__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&off, __ATOMIC_RELAXED);
}

int clock_gettime(clockid_t c, struct timespec *ts) {
	long r = syscall(SYS_clock_gettime, c, ts);
	if (r == 0 && (c == CLOCK_REALTIME || c == CLOCK_REALTIME_COARSE)) {
		long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_us() * 1000LL;
		ts->tv_sec = ns / 1000000000LL;
		ts->tv_nsec = ns % 1000000000LL;
		if (ts->tv_nsec < 0) {
			ts->tv_nsec += 1000000000LL;
			ts->tv_sec--;
		}
	}
	return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	int r = clock_gettime(CLOCK_REALTIME, &ts);
	if (r == 0 && tv) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return r;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) {
		*t = ts.tv_sec;
	}
	return ts.tv_sec;
}
`

// skewNeed skips t (fails it when CI is set) unless redis-server and a C
// compiler are installed and the system runs LD_PRELOAD libraries.
func skewNeed(t *testing.T) {
	t.Helper()
	redisserver.Need(t)
	msg := ""
	if runtime.GOOS != "linux" {
		msg = "the skewed replica needs Linux (an LD_PRELOAD library)"
	} else if _, err := exec.LookPath("cc"); err != nil {
		msg = "cc not found in PATH: install a C compiler (Debian: apt-get install gcc libc6-dev) to run the skewed replica"
	}
	if msg != "" {
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// skewShim compiles the shim into t's temporary directory and returns its
// path.
func skewShim(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "skew.c"), filepath.Join(dir, "skew.so")
	if err := os.WriteFile(src, []byte(skewShimSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return lib
}

// startSkewed starts redis-server under the shim lib with its clock off
// by off, persistence off, and extra configuration, stopped when t ends;
// it checks that the server's TIME is off by off, and returns its address.
func startSkewed(t *testing.T, lib string, off time.Duration, extra ...string) string {
	t.Helper()
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("redis-server", append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "yes",
	}, extra...)...)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "SKEW_US="+strconv.FormatInt(off.Microseconds(), 10))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := redisserver.Ping(addr, 200*time.Millisecond)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("skewed redis-server on %s did not answer PING: %v\n%s", addr, err, out.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for the listener
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, how := range []string{"TIME", "TIME in a script"} {
		var got time.Time
		before := time.Now()
		if how == "TIME" {
			got, err = c.Time(ctx).Result()
		} else {
			var v []int64
			v, err = c.Eval(ctx, "return redis.call('TIME')", nil).Int64Slice()
			if err == nil {
				got = time.Unix(v[0], v[1]*1000)
			}
		}
		if err != nil {
			t.Fatalf("skewed redis-server: %s: %v", how, err)
		}
		if skew := got.Sub(before); skew < off-100*time.Millisecond || skew > off+100*time.Millisecond {
			t.Fatalf("skewed redis-server: %s is %v off the machine's clock, want %v: the shim did not move it", how, skew.Round(time.Millisecond), off)
		}
	}
	return addr
}

// skewFailover starts a master on the machine's clock and a replica whose
// clock is off by off, and returns their addresses and the event of a
// failover to the replica: the replica has applied every write, and it is
// promoted (REPLICAOF NO ONE); the run then switches its clients to it.
// Only the clock differs: no write is lost.
func skewFailover(t *testing.T, off time.Duration) (master, replica string, promote func(context.Context) error) {
	t.Helper()
	skewNeed(t)
	lib := skewShim(t)
	m, err := redisserver.Start(t.TempDir(), "--repl-diskless-sync-delay", "0")
	if m != nil {
		t.Cleanup(m.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(m.Addr, ":")
	r := startSkewed(t, lib, off, "--replicaof", "127.0.0.1", port)
	madmin := redis.NewClient(&redis.Options{Addr: m.Addr, MaxRetries: -1})
	t.Cleanup(func() { madmin.Close() })
	radmin := redis.NewClient(&redis.Options{Addr: r, MaxRetries: -1})
	t.Cleanup(func() { radmin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// After a diskless sync the master starts the replica's command
	// stream at its first acknowledgement, up to a second later: wait for
	// a write to arrive, so that the failover's pause is short.
	if err := madmin.Set(ctx, "skew:synced", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := radmin.Exists(ctx, "skew:synced").Result()
		if err == nil && n == 1 {
			break
		}
		if skewSleep(ctx, 5*time.Millisecond) != nil {
			t.Fatalf("the replica did not sync with the master: %v", err)
		}
	}
	return m.Addr, r, func(ctx context.Context) error {
		// The replica has applied the master's whole stream (WAIT would
		// say so too, but at times only at the replica's next periodic
		// acknowledgement, up to a second later).
		want, err := skewOffset(ctx, madmin, "master_repl_offset")
		if err != nil {
			return err
		}
		for deadline := time.Now().Add(time.Second); ; {
			got, err := skewOffset(ctx, radmin, "slave_repl_offset")
			if err != nil {
				return err
			}
			if got >= want {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the replica is at offset %d, the master at %d", got, want)
			}
			time.Sleep(200 * time.Microsecond) // polling the replica, traffic paused
		}
		if err := radmin.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			return fmt.Errorf("REPLICAOF NO ONE: %w", err)
		}
		return nil
	}
}

// skewOffset returns the replication offset named field from c's INFO.
func skewOffset(ctx context.Context, c *redis.Client, field string) (int64, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO replication: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO replication: no %s", field)
}

// skewRunT runs cfg, fails t on an error, and logs the figures under name.
func skewRunT(t *testing.T, name, addr string, cfg skewConfig) []skewFigures {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	figs, err := skewRun(ctx, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range figs {
		t.Logf("%s: %v", name, f)
		if f.Allowed == 0 {
			t.Errorf("%s: %v: nothing allowed", name, f.Algorithm)
		}
	}
	return figs
}

// skewLong returns short in -short mode and long otherwise.
func skewLong[T any](short, long T) T {
	if testing.Short() {
		return short
	}
	return long
}

// skewCheck fails t unless every algorithm kept its contract in true time
// within slack units, and skewLeak's if leak is true (plus the units whose
// decision straddled a step boundary, which may be counted in the wrong
// step): the windows at most
// Limit per window (OverAdmitted summed over keys and windows), the
// sliding log at most Limit in any span of a window, the token bucket at
// most Burst plus the refill in any span.
func skewCheck(t *testing.T, cfg skewConfig, figs []skewFigures, slack int64, leak bool) {
	t.Helper()
	limit := cfg.withDefaults().Limit
	for _, f := range figs {
		s := slack + int64(f.Ambiguous)
		if leak {
			s += max(limit, int64(skewLeak*float64(f.Allowed)))
		}
		switch f.Algorithm {
		case core.TokenBucket:
			if f.BucketExcess > s {
				t.Errorf("%v: %d units beyond the bucket in a span, want at most %d", f.Algorithm, f.BucketExcess, s)
			}
		case core.SlidingLog:
			if f.WorstSpan > limit+s {
				t.Errorf("%v: %d units in a span of a window, want at most %d + %d", f.Algorithm, f.WorstSpan, limit, s)
			}
			fallthrough
		default:
			if f.OverAdmitted > s {
				t.Errorf("%v: over-admitted %d units, want at most %d", f.Algorithm, f.OverAdmitted, s)
			}
		}
	}
}

// skewFigure returns the figures of algorithm a.
func skewFigure(figs []skewFigures, a core.Algorithm) skewFigures {
	for _, f := range figs {
		if f.Algorithm == a {
			return f
		}
	}
	panic("no figures for " + a.String())
}

// skewLeak is what a run with a gateway's clock off may admit above the
// contract besides a limit per key when it meets the others' state: the
// larger of a limit and this share of the units allowed. The gateways'
// requests count in the windows and log entries of the latest clock: at a
// window's start a gateway behind it can still spend what the previous
// window left, and a log entry stamped at the newest entry's time leaves
// the latest gateway's window early. Measured: under 0.5% of the units
// allowed in the long form, up to 2% in the short one (the leak grows with
// gaps in the traffic, which a loaded machine makes). Windows restarted by
// a skewed clock, a limit more per window, would be half the units.
const skewLeak = 0.05

// TestClockSkewGateway runs three gateways on one Redis, far above the
// limit, the third with its clock off, and counts what every algorithm
// allowed in true time. "joins" runs the first two alone for 300 ms, so
// that the third meets keys that hold state; otherwise each key is created
// by whichever gateway comes first.
func TestClockSkewGateway(t *testing.T) {
	d := skewLong(500*time.Millisecond, 10*time.Second)
	const behind, ahead = -5 * time.Minute, 3 * time.Second
	limit := skewConfig{}.withDefaults().Limit
	keys := int64(skewConfig{}.withDefaults().Keys)
	for _, tc := range []struct {
		name    string
		offsets []time.Duration
		late    int
		check   func(t *testing.T, cfg skewConfig, figs []skewFigures)
	}{
		// One clock for every gateway: every contract holds exactly (with
		// the server's TIME, up to the ambiguous units).
		{"server TIME", nil, 0, func(t *testing.T, cfg skewConfig, figs []skewFigures) {
			skewCheck(t, cfg, figs, 0, false)
		}},
		{"client clocks in step", []time.Duration{0, 0, 0}, 0, func(t *testing.T, cfg skewConfig, figs []skewFigures) {
			skewCheck(t, cfg, figs, 0, false)
		}},
		// A key the behind gateway creates is forgotten when the others
		// next write it (its window, its bucket's TAT and its log entries
		// are five minutes old): what it allowed there, at most a limit per
		// key, is allowed again.
		{"client clock 5m behind", []time.Duration{0, 0, behind}, 0, func(t *testing.T, cfg skewConfig, figs []skewFigures) {
			skewCheck(t, cfg, figs, keys*limit, true)
		}},
		// On keys the others hold, the behind gateway's requests count in
		// the latest window (the windows keep it, the log stamps at its
		// newest entry), and the bucket's TAT is five minutes ahead of its
		// clock: it waits, and says so in RetryAfter.
		{"client clock 5m behind joins", []time.Duration{0, 0, behind}, 1, func(t *testing.T, cfg skewConfig, figs []skewFigures) {
			skewCheck(t, cfg, figs, 0, true)
			tb := skewFigure(figs, core.TokenBucket)
			if tb.Share[2] != 0 {
				t.Errorf("token bucket: the behind gateway got %.0f%% of the units, want none (its clock is before every TAT)", 100*tb.Share[2])
			}
			if tb.MaxRetry[2] < -behind {
				t.Errorf("token bucket: the behind gateway was told to retry within %v, want %v or more", tb.MaxRetry[2], -behind)
			}
		}},
		// The ahead gateway's first request on a key the others hold
		// starts a window of its own (a full bucket, an empty log): a limit
		// more per key, once; then the key follows its clock.
		{"client clock 3s ahead", []time.Duration{0, 0, ahead}, 0, func(t *testing.T, cfg skewConfig, figs []skewFigures) {
			skewCheck(t, cfg, figs, keys*limit, true)
		}},
		{"client clock 3s ahead joins", []time.Duration{0, 0, ahead}, 1, func(t *testing.T, cfg skewConfig, figs []skewFigures) {
			skewCheck(t, cfg, figs, keys*limit, true)
			for _, f := range figs {
				if !f.Algorithm.Burstable() && f.WorstWindow > 2*limit {
					t.Errorf("%v: %d units in a window, want at most 2×%d", f.Algorithm, f.WorstWindow, limit)
				}
			}
			// Its TAT is 3 s ahead of the others' clocks: they wait, and it
			// takes nearly every unit (the others' few before its first
			// write).
			if tb := skewFigure(figs, core.TokenBucket); tb.Share[2] < 0.9 {
				t.Errorf("token bucket: the ahead gateway got %.0f%% of the units, want nearly all", 100*tb.Share[2])
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := redisserver.StartT(t)
			cfg := skewConfig{Offsets: tc.offsets, After: d, Late: tc.late}
			if tc.late > 0 {
				cfg.Before = 300 * time.Millisecond
			}
			tc.check(t, cfg, skewRunT(t, tc.name, addr, cfg))
		})
	}
}

// TestClockSkewFailover runs three gateways on the server's TIME of a
// master, fails over to a replica whose clock is off, and counts what every
// algorithm allowed in true time, across the switch.
func TestClockSkewFailover(t *testing.T) {
	cfg := skewConfig{}.withDefaults()
	for _, off := range []time.Duration{skewLong(-500*time.Millisecond, -30*time.Second), skewLong(500*time.Millisecond, 30*time.Second)} {
		t.Run(off.String(), func(t *testing.T) {
			master, replica, promote := skewFailover(t, off)
			run := skewConfig{
				Before: skewLong(300*time.Millisecond, 3*time.Second),
				After:  skewLong(max(off, -off)+700*time.Millisecond, max(off, -off)+5*time.Second),
				Event:  promote, Switch: replica,
			}
			figs := skewRunT(t, "failover to a replica "+off.String(), master, run)
			if off < 0 {
				// Every key holds state from the master's later clock: the
				// windows keep it current, the log stamps at its newest
				// entry, the bucket's TAT is ahead. A key spent at the
				// switch waits until the new clock has caught up, and
				// nothing is admitted above the contract.
				skewCheck(t, run, figs, 0, false)
				// The gap counts the failover's pause, in which true time
				// passes and the new clock catches up as well.
				for _, f := range figs {
					lo, hi := -off-cfg.Window, max(-off+2*cfg.Window, f.Pause+cfg.Window)+500*time.Millisecond
					if f.DeniedAcross < lo || f.DeniedAcross > hi {
						t.Errorf("%v: a key allowed nothing for %v across the switch (traffic paused %v), want between %v and %v (the clock's offset, within the windows' and a loaded machine's margin)", f.Algorithm, f.DeniedAcross, f.Pause, lo, hi)
					}
				}
				return
			}
			// Every key's state is in the past of the new clock: a new
			// window, a full bucket, an empty log. A limit more per key, at
			// the switch, as after a restart; then one clock again.
			skewCheck(t, run, figs, int64(cfg.Keys)*cfg.Limit, false)
			for _, f := range figs {
				if !f.Algorithm.Burstable() && f.WorstWindow > 2*cfg.Limit+int64(f.Ambiguous) {
					t.Errorf("%v: %d units in a window, want at most 2×%d", f.Algorithm, f.WorstWindow, cfg.Limit)
				}
			}
		})
	}
}
