package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
)

// An arrival is one request: when it is sent, as an offset from the start of
// the simulation, the units it costs, the client that sends it and how many
// times that client sent it before (0 for a first attempt).
type arrival struct {
	at      time.Duration
	cost    int64
	client  int
	attempt int
}

// traffic is what a simulation sends: the arrivals fixed in advance, sorted
// by time, and, for clients that retry, when a denied request is sent again.
type traffic struct {
	name     string
	about    string    // one sentence for the table's heading
	arrivals []arrival // sorted by at
	// retry, when not nil, is asked about every denied request. It returns
	// the request's next attempt, or false when the client gives up.
	retry func(denied arrival) (arrival, bool)
}

// maxArrivals bounds the requests a pattern may generate, so that a typo in
// -rate or -duration fails with a message instead of eating the memory.
const maxArrivals = 5_000_000

// burstSpan is how long each half of a boundary burst lasts, and the
// retry-storm clients' mean backoff: a sixtieth of the window, one second of
// a minute.
func burstSpan(w time.Duration) time.Duration {
	return max(w/60, time.Microsecond).Truncate(time.Microsecond)
}

// firstBoundary returns the offset from start of the first window boundary
// after start. Windows are aligned to multiples of w since the Unix epoch, as
// the fixed and sliding windows count them.
func firstBoundary(start time.Time, w time.Duration) time.Duration {
	into := time.Duration(start.UnixNano() % int64(w))
	if into < 0 {
		into += w
	}
	return w - into
}

// boundaryBurst sends Limit requests, evenly spaced, in the burstSpan before
// every other window boundary, and Limit more in the burstSpan after it: the
// traffic that lets a fixed window admit twice its limit in two seconds. The
// bursts are two windows apart, so that every algorithm is back to fresh
// before the next one.
func boundaryBurst(p core.Policy, start time.Time, d time.Duration) []arrival {
	span := burstSpan(p.Window)
	step := (span / time.Duration(p.Limit)).Truncate(time.Microsecond)
	var out []arrival
	for b := firstBoundary(start, p.Window); b+span <= d; b += 2 * p.Window {
		if b < span {
			continue
		}
		for _, from := range []time.Duration{b - span, b} {
			for i := range p.Limit {
				out = append(out, arrival{at: from + time.Duration(i)*step, cost: 1, client: len(out)})
			}
		}
	}
	return out
}

// interval returns the gap between requests sent at rate times the policy's
// limit, in whole microseconds (at least one).
func interval(p core.Policy, rate float64) time.Duration {
	us := math.Round(float64(p.Window/time.Microsecond) / (float64(p.Limit) * rate))
	return time.Duration(max(us, 1)) * time.Microsecond
}

// steady sends one request every interval(p, rate) from the start: rate 2 is
// twice what the policy allows.
func steady(p core.Policy, d time.Duration, rate float64) ([]arrival, error) {
	gap := interval(p, rate)
	if int64(d/gap) > maxArrivals {
		return nil, fmt.Errorf("steady: %d requests, at most %d: lower -rate or -duration", d/gap, maxArrivals)
	}
	var out []arrival
	for at := time.Duration(0); at < d; at += gap {
		out = append(out, arrival{at: at, cost: 1, client: len(out)})
	}
	return out, nil
}

// sawtooth sends requests at a rate that climbs linearly from zero to twice
// rate times the limit over each window and drops back at the boundary:
// on average rate times the limit, most of it just before each boundary.
// With n requests per tooth the k-th (from 0) leaves at W·√((k+½)/n) into
// the tooth, which makes the rate linear.
func sawtooth(p core.Policy, start time.Time, d time.Duration, rate float64) ([]arrival, error) {
	n := int64(math.Round(float64(p.Limit) * rate))
	if n < 1 {
		return nil, fmt.Errorf("sawtooth: -rate %v sends no request per window", rate)
	}
	if n*int64(d/p.Window+1) > maxArrivals {
		return nil, fmt.Errorf("sawtooth: more than %d requests: lower -rate or -duration", maxArrivals)
	}
	w := float64(p.Window / time.Microsecond)
	var out []arrival
	// Teeth start at window boundaries; the first starts at the last
	// boundary at or before the start.
	for tooth := firstBoundary(start, p.Window) - p.Window; tooth < d; tooth += p.Window {
		for k := range n {
			us := math.Round(w * math.Sqrt((float64(k)+0.5)/float64(n)))
			at := tooth + time.Duration(us)*time.Microsecond
			if at >= 0 && at < d {
				out = append(out, arrival{at: at, cost: 1, client: len(out)})
			}
		}
	}
	return out, nil
}

// stormRetries is how many times a retry-storm client sends a denied
// request again before it gives up.
const stormRetries = 10

// retryStorm sends new requests steadily at rate times the limit, each from
// a new client, and every denied client tries again after burstSpan ± 50 %
// (one second of a minute, jittered), ignoring Retry-After, up to
// stormRetries times. The jitter of a client's k-th retry depends only on
// the seed, the client and k, so that every algorithm sees the same clients
// behave the same way.
func retryStorm(p core.Policy, d time.Duration, rate float64, seed uint64) (traffic, error) {
	first, err := steady(p, d, rate)
	if err != nil {
		return traffic{}, err
	}
	span := burstSpan(p.Window)
	retry := func(a arrival) (arrival, bool) {
		if a.attempt >= stormRetries {
			return arrival{}, false
		}
		rng := rand.New(rand.NewPCG(seed, uint64(a.client)<<8|uint64(a.attempt)))
		backoff := span/2 + time.Duration(rng.Int64N(int64(span/time.Microsecond)+1))*time.Microsecond
		a.at += backoff
		a.attempt++
		return a, true
	}
	return traffic{arrivals: first, retry: retry}, nil
}

// readCSV reads request times, one per line: seconds from the start
// ("12.5"), a Go duration ("1m30s", "250ms") or an RFC 3339 time
// ("2026-01-01T12:00:59.5Z"), optionally followed by a comma and the
// request's cost (default 1). Blank lines, lines starting with '#' and a
// first line that is not a time (a header) are skipped. Offsets and absolute
// times cannot be mixed. For absolute times it returns the first time; the
// arrivals are then offsets from it.
func readCSV(r io.Reader) (arrivals []arrival, first time.Time, absolute bool, err error) {
	type row struct {
		at   time.Duration
		abs  time.Time
		cost int64
	}
	var rows []row
	sc := bufio.NewScanner(r)
	kind := 0 // 1: offsets, 2: absolute times
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Split(text, ",")
		if len(fields) > 2 {
			return nil, time.Time{}, false, fmt.Errorf("line %d: %d fields, want a time and an optional cost", line, len(fields))
		}
		var rw row
		k := 1
		ts := strings.TrimSpace(fields[0])
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			rw.abs, k = t, 2
		} else if d, err := parseOffset(ts); err == nil {
			rw.at = d
		} else if len(rows) == 0 && kind == 0 {
			continue // a header
		} else {
			return nil, time.Time{}, false, fmt.Errorf("line %d: %q is not seconds, a duration or an RFC 3339 time", line, ts)
		}
		if kind != 0 && k != kind {
			return nil, time.Time{}, false, fmt.Errorf("line %d: offsets and absolute times mixed", line)
		}
		kind = k
		rw.cost = 1
		if len(fields) == 2 {
			c, err := strconv.ParseInt(strings.TrimSpace(fields[1]), 10, 64)
			if err != nil || c < 1 {
				return nil, time.Time{}, false, fmt.Errorf("line %d: cost %q is not a positive integer", line, fields[1])
			}
			rw.cost = c
		}
		if len(rows) == maxArrivals {
			return nil, time.Time{}, false, fmt.Errorf("more than %d requests", maxArrivals)
		}
		rows = append(rows, rw)
	}
	if err := sc.Err(); err != nil {
		return nil, time.Time{}, false, err
	}
	if len(rows) == 0 {
		return nil, time.Time{}, false, fmt.Errorf("no request times")
	}
	if kind == 2 {
		first = rows[0].abs
		for _, rw := range rows {
			if rw.abs.Before(first) {
				first = rw.abs
			}
		}
		for i := range rows {
			rows[i].at = rows[i].abs.Sub(first).Truncate(time.Microsecond)
		}
	}
	slices.SortStableFunc(rows, func(a, b row) int { return cmp.Compare(a.at, b.at) })
	for i, rw := range rows {
		arrivals = append(arrivals, arrival{at: rw.at, cost: rw.cost, client: i})
	}
	return arrivals, first, kind == 2, nil
}

// parseOffset reads a non-negative offset: plain seconds ("12.5", parsed
// exactly) or a Go duration ("1m30s"), in whole microseconds.
func parseOffset(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("empty time")
	}
	if c := s[len(s)-1]; c >= '0' && c <= '9' || c == '.' {
		s += "s"
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("negative time %v", d)
	}
	return d.Truncate(time.Microsecond), nil
}
