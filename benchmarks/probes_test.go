package benchmarks

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Correctness probes, next to the speed comparison: what each library
// admits under concurrency, reported as counts of violations. A peer that
// fails a probe is a finding, logged and written to the report, not a test
// failure; ratekit failing one is a test failure.
//
//   - one-of-8: policy 1 per minute, burst 1; 8 goroutines released at once
//     (a barrier, no sleeps) each make one request on a key never seen.
//     Exactly 1 must be allowed. A violation is a round that allowed 0 or
//     more than 1 (two goroutines each creating the key's state).
//   - exactly-100: policy 100 per minute, burst 100; 100 goroutines released
//     at once each make 10 requests on a new key. Exactly 100 of the 1,000
//     must be allowed. A round is void (and redone) if it lasted long enough
//     for a token to refill (600 ms) or spanned a minute boundary of the
//     Unix epoch, where window algorithms legitimately start over.

const (
	oneOf8Rounds    = 1000
	exact100Rounds  = 100
	redisExactRound = 20
)

// probeResult is what one library did in the probes.
type probeResult struct {
	name                      string
	oneOf8Bad, oneOf8Rounds   int
	oneOf8Seen                map[int]int // allowed per round -> rounds
	exactBad, exactRounds     int
	exactMin, exactMax, voids int
}

// TestProbes runs both probes on every library, in memory and on Redis.
func TestProbes(t *testing.T) {
	var results []probeResult
	peers := memoryPeers()
	if redisAddr != "" {
		peers = append(peers, redisPeers()...)
	} else {
		t.Log("redis-server not installed: Redis libraries not probed")
	}
	for _, p := range peers {
		t.Run(p.name, func(t *testing.T) {
			rounds := exact100Rounds
			if strings.Contains(p.name, "redis") {
				rounds = redisExactRound
			}
			r := probeResult{name: p.name, oneOf8Rounds: oneOf8Rounds, exactRounds: rounds}
			r.oneOf8Bad, r.oneOf8Seen = probeOneOf8(t, p, oneOf8Rounds)
			r.exactBad, r.exactMin, r.exactMax, r.voids = probeExact100(t, p, rounds)
			report := t.Logf
			if strings.HasPrefix(p.name, "ratekit") {
				report = t.Errorf
			}
			if r.oneOf8Bad != 0 {
				report("one-of-8: %d of %d rounds did not allow exactly 1 (allowed per round -> rounds: %v)", r.oneOf8Bad, oneOf8Rounds, r.oneOf8Seen)
			}
			if r.exactBad != 0 {
				report("exactly-100: %d of %d rounds did not allow exactly 100 (allowed %d..%d)", r.exactBad, rounds, r.exactMin, r.exactMax)
			}
			t.Logf("probe %s: one-of-8 violations %d/%d, exactly-100 violations %d/%d (allowed %d..%d, %d void rounds redone)",
				p.name, r.oneOf8Bad, oneOf8Rounds, r.exactBad, rounds, r.exactMin, r.exactMax, r.voids)
			results = append(results, r)
		})
	}
	writeProbeReport(t, results)
}

// probeOneOf8 runs the one-of-8 probe for rounds rounds on one limiter,
// a new key each round, and returns the rounds that did not allow exactly
// one and how many rounds allowed how many.
func probeOneOf8(t *testing.T, p peer, rounds int) (bad int, seen map[int]int) {
	l := p.new(t, policy{limit: 1, window: time.Minute, burst: 1})
	l.closeWith(t)
	seen = map[int]int{}
	for round := range rounds {
		key := "one-of-8-" + strconv.Itoa(round)
		n := race(8, 1, func() bool { return l.allow(key) })
		seen[n]++
		if n != 1 {
			bad++
		}
	}
	return bad, seen
}

// probeExact100 runs the exactly-100 probe and returns the rounds that did
// not allow exactly 100, the least and most allowed, and the void rounds.
func probeExact100(t *testing.T, p peer, rounds int) (bad, least, most, voids int) {
	l := p.new(t, canonical)
	l.closeWith(t)
	least = 1 << 30
	for round := 0; round < rounds; {
		key := "exactly-100-" + strconv.Itoa(round) + "-" + strconv.Itoa(voids)
		start := time.Now()
		n := race(100, 10, func() bool { return l.allow(key) })
		end := time.Now()
		if end.Sub(start) >= 600*time.Millisecond || start.Truncate(time.Minute) != end.Truncate(time.Minute) {
			voids++
			if voids > rounds {
				t.Fatalf("%d void rounds: the machine is too slow for this probe", voids)
			}
			continue
		}
		least, most = min(least, n), max(most, n)
		if n != 100 {
			bad++
		}
		round++
	}
	return bad, least, most, voids
}

// race starts g goroutines, waits until all are running, releases them at
// once and has each call allow k times; it returns how many calls allowed.
func race(g, k int, allow func() bool) int {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var allowed atomic.Int64
	ready.Add(g)
	for range g {
		done.Go(func() {
			ready.Done()
			<-start
			for range k {
				if allow() {
					allowed.Add(1)
				}
			}
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	return int(allowed.Load())
}

// writeProbeReport writes the probe results as a markdown table to
// $BENCH_REPORT_DIR/probes.md, when that is set (run.sh sets it).
func writeProbeReport(t *testing.T, results []probeResult) {
	dir := os.Getenv("BENCH_REPORT_DIR")
	if dir == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| library | one-of-8 violations | exactly-100 violations | allowed per exactly-100 round |\n|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d / %d | %d / %d | %d–%d |\n", r.name, r.oneOf8Bad, r.oneOf8Rounds, r.exactBad, r.exactRounds, r.exactMin, r.exactMax)
	}
	if err := os.WriteFile(filepath.Join(dir, "probes.md"), []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}
