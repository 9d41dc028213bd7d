package redisstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

// slidingLogHeader is the size of a sliding log's header (slidinglog.lua).
const slidingLogHeader = 48

// slidingLogState is a sliding log's string as slidinglog.lua lays it out:
// records base+1 to k, those before h left the window, and node[i] the
// Fenwick node of record base+1+i.
type slidingLogState struct {
	base, h, k, zeros, zfrom, dead, total, last int64   // zfrom 0: none
	at, node                                    []int64 // records base+1..k
	extra                                       int     // records past k (written over by the next append)
}

// readSlidingLog returns the log at key, and false when there is none.
func readSlidingLog(t testing.TB, client *redis.Client, key string) (slidingLogState, bool) {
	t.Helper()
	raw, err := client.Get(ctx, key).Bytes()
	if err == redis.Nil {
		return slidingLogState{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < slidingLogHeader || (len(raw)-slidingLogHeader)%16 != 0 {
		t.Fatalf("log of %d bytes, want a %d-byte header and 16-byte records", len(raw), slidingLogHeader)
	}
	be := binary.BigEndian
	s := slidingLogState{
		base:  int64(be.Uint64(raw)),
		zeros: int64(be.Uint32(raw[16:])),
		dead:  int64(be.Uint64(raw[24:])),
		total: int64(be.Uint64(raw[32:])),
		last:  int64(be.Uint64(raw[40:])),
	}
	if zd := int64(be.Uint32(raw[20:])); zd > 0 {
		s.zfrom = s.base + zd
	}
	s.h = s.base + int64(be.Uint32(raw[8:]))
	s.k = s.base + int64(be.Uint32(raw[12:]))
	records := raw[slidingLogHeader:]
	if n := int64(len(records) / 16); n < s.k-s.base {
		t.Fatalf("header says records %d to %d, the string holds %d", s.base+1, s.k, n)
	} else {
		s.extra = int(n - (s.k - s.base))
	}
	for i := range s.k - s.base {
		s.at = append(s.at, int64(be.Uint64(records[16*i:])))
		s.node = append(s.node, int64(be.Uint64(records[16*i+8:])))
	}
	return s, true
}

// units returns the units of records base+1 to j.
func (s slidingLogState) units(j int64) int64 {
	var sum int64
	for j > s.base {
		sum += s.node[j-s.base-1]
		j -= j & -j
	}
	return sum
}

// check reports what in s breaks the layout's invariants: times strictly
// increasing, no record with fewer than 0 units and the last with some,
// the header's sums and last time those of the records, every empty record
// from h on counted and at or after the first counted, fewer of them than
// half of the records from there, and fewer records before h than from h.
func (s slidingLogState) check() error {
	switch {
	case s.base < 0 || s.h <= s.base || s.k < s.h:
		return fmt.Errorf("base %d, h %d, k %d", s.base, s.h, s.k)
	case s.at[len(s.at)-1] != s.last:
		return fmt.Errorf("last %d, record %d at %d", s.last, s.k, s.at[len(s.at)-1])
	case s.units(s.h-1) != s.dead || s.units(s.k) != s.total:
		return fmt.Errorf("dead %d total %d, records say %d and %d", s.dead, s.total, s.units(s.h-1), s.units(s.k))
	case s.units(s.k) == s.units(s.k-1):
		return fmt.Errorf("the last record, %d, holds no units", s.k)
	case (s.zeros == 0) != (s.zfrom == 0):
		return fmt.Errorf("%d zeros counted from record %d", s.zeros, s.zfrom)
	case s.zfrom != 0 && (s.zfrom < s.h || s.zfrom > s.k):
		return fmt.Errorf("zeros counted from record %d, out of %d..%d", s.zfrom, s.h, s.k)
	case s.zeros > 0 && 2*s.zeros >= s.k-s.zfrom+1:
		return fmt.Errorf("%d zeros counted in records %d..%d: not rebuilt", s.zeros, s.zfrom, s.k)
	case s.h-1-s.base >= s.k-s.h+1:
		return fmt.Errorf("%d records before h, %d from h on: not cut off", s.h-1-s.base, s.k-s.h+1)
	}
	empty := int64(0)
	for j := s.base + 1; j <= s.k; j++ {
		if j > s.base+1 && s.at[j-s.base-1] <= s.at[j-s.base-2] {
			return fmt.Errorf("record %d at %d, after %d", j, s.at[j-s.base-1], s.at[j-s.base-2])
		}
		u := s.units(j) - s.units(j-1)
		switch {
		case u < 0:
			return fmt.Errorf("record %d holds %d units", j, u)
		case u > 0 || j < s.h:
		case s.zfrom == 0 || j < s.zfrom:
			return fmt.Errorf("record %d is empty, uncounted (zeros %d from %d)", j, s.zeros, s.zfrom)
		default:
			empty++
		}
	}
	if empty > s.zeros {
		return fmt.Errorf("%d empty records from %d on, the header counts %d", empty, s.zfrom, s.zeros)
	}
	return nil
}

// packSlidingLog returns the string of a log numbered from 1 holding the
// given units at each of ats (µs, increasing), none left.
func packSlidingLog(ats, units []int64) []byte {
	k := len(ats)
	be := binary.BigEndian
	nodes := append([]int64(nil), units...)
	var total int64
	for i := 1; i <= k; i++ {
		total += units[i-1]
		if p := i + i&-i; p <= k {
			nodes[p-1] += nodes[i-1]
		}
	}
	buf := be.AppendUint64(nil, 0) // base
	buf = be.AppendUint32(buf, 1)  // h - base
	buf = be.AppendUint32(buf, uint32(k))
	buf = be.AppendUint32(buf, 0) // zeros
	buf = be.AppendUint32(buf, 0) // first emptied record: none
	buf = be.AppendUint64(buf, 0) // dead
	buf = be.AppendUint64(buf, uint64(total))
	buf = be.AppendUint64(buf, uint64(ats[k-1]))
	for i := range k {
		buf = be.AppendUint64(buf, uint64(ats[i]))
		buf = be.AppendUint64(buf, uint64(nodes[i]))
	}
	return buf
}

// TestSlidingLogLayout follows one log's string: one record per distinct
// time, appended; the records that left cut off once they are as many as
// the rest, the rest copied; a refund of the last request moves the end
// back, and the next request writes over it; records emptied in the middle
// stay until they are half of the records from the first of them on, which
// are then rebuilt without them.
// Every decision is the memory store's.
func TestSlidingLogLayout(t *testing.T) {
	client := newClient(t, singleNode(t))
	p := core.Policy{Algorithm: core.SlidingLog, Limit: 1000, Window: time.Second}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	mc, rc := core.NewManualClock(start), core.NewManualClock(start)
	mem, err := core.New(p, core.WithClock(mc))
	if err != nil {
		t.Fatal(err)
	}
	red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
	key := red.key("k")
	state := func(want string) slidingLogState {
		t.Helper()
		s, ok := readSlidingLog(t, client, key)
		if !ok {
			t.Fatalf("%s: no log", want)
		}
		if err := s.check(); err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		return s
	}
	expect := func(what string, s slidingLogState, base, h, k int64) {
		t.Helper()
		if s.base != base || s.h != h || s.k != k {
			t.Fatalf("%s: base %d h %d k %d, want %d %d %d", what, s.base, s.h, s.k, base, h, k)
		}
	}
	step := func(d time.Duration) {
		mc.Advance(d)
		rc.Advance(d)
	}
	same := func(what string, n int64) {
		t.Helper()
		md, merr := mem.AllowN(ctx, "k", n)
		rd, rerr := red.AllowN(ctx, "k", n)
		if merr != nil || rerr != nil || md != rd {
			t.Fatalf("%s: memory %+v, %v\nredis %+v, %v", what, md, merr, rd, rerr)
		}
	}
	refund := func(what string, n int64, elapsed time.Duration) {
		t.Helper()
		if err := mem.Refund(ctx, "k", n, elapsed); err != nil {
			t.Fatal(err)
		}
		if err := red.Refund(ctx, "k", n, elapsed); err != nil {
			t.Fatal(err)
		}
		if md, rd := peek(t, mem, "k"), peek(t, red, "k"); md != rd {
			t.Fatalf("%s: memory %+v, redis %+v", what, md, rd)
		}
	}
	// 100 records 5 ms apart, and a second request at the last one's time,
	// which adds to it.
	for i := range 100 {
		same(fmt.Sprintf("request %d", i), 2)
		step(5 * time.Millisecond)
	}
	step(-5 * time.Millisecond)
	same("at the last record's time", 1)
	expect("100 records", state("100 records"), 0, 1, 100)
	// At 1.195 s the 40 records up to 0.195 s have left; the next request
	// moves h past them and appends.
	step(700 * time.Millisecond)
	same("at 1.195 s", 1)
	s := state("40 left")
	expect("40 left", s, 0, 41, 101)
	// The clock goes back 0.2 s: what that request removed stays removed.
	step(-200 * time.Millisecond)
	for range 3 {
		if md, rd := peek(t, mem, "k"), peek(t, red, "k"); md != rd {
			t.Fatalf("peek after the clock went back: memory %+v, redis %+v", md, rd)
		}
	}
	same("clock back", 1)
	// At 1.295 s, 60 of the 101 have left, more than the 41 after them: the
	// log is cut off at record 60 and numbers on from there.
	step(300 * time.Millisecond)
	same("after 60 left", 1)
	s = state("cut off")
	expect("cut off", s, 60, 61, 102)
	if s.extra != 0 {
		t.Fatalf("cut off: %d records past the end", s.extra)
	}
	// The last request given back: the end moves back, the bytes stay; the
	// next request writes over them.
	refund("the last request given back", 1, 0)
	s = state("given back")
	expect("given back", s, 60, 61, 101)
	if s.extra != 1 {
		t.Fatalf("given back: %d records past the end, want 1", s.extra)
	}
	step(time.Millisecond)
	same("after the refund", 3)
	s = state("written over")
	expect("written over", s, 60, 61, 102)
	if s.extra != 0 {
		t.Fatalf("written over: %d records past the end", s.extra)
	}
	// Requests A, B and C 1 µs apart, then A given back: A's record stays,
	// empty, counted; the records from it on are not half empty.
	for _, name := range []string{"A", "B", "C"} {
		step(time.Microsecond)
		same("request "+name, 1)
	}
	refund("A given back", 1, 2*time.Microsecond)
	s = state("A given back")
	expect("A given back", s, 60, 61, 105)
	if s.zeros != 1 || s.zfrom != 103 {
		t.Fatalf("A given back: %d zeros from %d, want 1 from 103", s.zeros, s.zfrom)
	}
	// D, then C given back: two of the four records from A's are empty;
	// those four are rebuilt without them, numbered on from 103.
	step(time.Microsecond)
	same("request D", 1)
	refund("C given back", 1, time.Microsecond)
	s = state("C given back")
	expect("C given back", s, 60, 61, 104)
	if s.zeros != 0 || s.extra != 2 {
		t.Fatalf("C given back: %d zeros, %d records past the end; want 0 and 2", s.zeros, s.extra)
	}
	// Everything leaves: the next request starts a log of one record.
	step(2 * time.Second)
	same("after the window", 1000)
	expect("new log", state("new log"), 0, 1, 1)
}

func peek(t *testing.T, l core.Limiter, key string) core.Decision {
	t.Helper()
	d, err := l.Peek(context.Background(), key, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Random traffic on one sliding log, on the memory store and on Redis:
// requests of random costs at random gaps (the same time often, the clock
// sometimes going back, by up to more than a window), peeks, and refunds of
// random units counted at random times ago. Every decision must be the
// memory store's, and the string must keep its invariants after each step.
// The traffic takes every path of the script: records cut off, records
// rebuilt without the empty ones, the end moved back, the log deleted by a
// refund.
func TestSlidingLogSameAsMemoryRandom(t *testing.T) {
	client := newClient(t, singleNode(t))
	paths := map[string]int{}
	for _, c := range []struct {
		limit   int64
		maxCost int64
		steps   int
	}{
		{limit: 12, maxCost: 4, steps: 3000},
		{limit: 600, maxCost: 3, steps: 3000},
		{limit: 5000, maxCost: 1, steps: 8000}, // thousands of records
	} {
		t.Run(fmt.Sprintf("limit=%d", c.limit), func(t *testing.T) {
			p := core.Policy{Algorithm: core.SlidingLog, Limit: c.limit, Window: time.Second}
			start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			mem, err := core.New(p, core.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			key := red.key("k")
			rng := rand.New(rand.NewPCG(uint64(c.limit), 7))
			gap := int64(2 * time.Second / time.Duration(c.limit))
			var history []string
			var prev slidingLogState
			had := false
			for i := range c.steps {
				var dt time.Duration
				switch r := rng.IntN(100); {
				case r < 25: // same time
				case r < 90:
					dt = time.Duration(rng.Int64N(gap)) + time.Microsecond
				case r < 96:
					dt = time.Duration(rng.Int64N(int64(p.Window)))
				case r < 99:
					dt = -time.Duration(rng.Int64N(int64(p.Window / 2)))
				default:
					dt = -time.Duration(rng.Int64N(int64(2 * p.Window)))
				}
				dt = dt.Truncate(time.Microsecond)
				mc.Advance(dt)
				rc.Advance(dt)
				n := 1 + rng.Int64N(c.maxCost)
				var what string
				var md, rd core.Decision
				var merr, rerr error
				switch r := rng.IntN(100); {
				case r < 60:
					what = fmt.Sprintf("AllowN(%d)", n)
					md, merr = mem.AllowN(ctx, "k", n)
					rd, rerr = red.AllowN(ctx, "k", n)
				case r < 65:
					what = "AllowN(L)"
					md, merr = mem.AllowN(ctx, "k", c.limit)
					rd, rerr = red.AllowN(ctx, "k", c.limit)
				case r < 75:
					what = fmt.Sprintf("Peek(%d)", n)
					md, merr = mem.Peek(ctx, "k", n)
					rd, rerr = red.Peek(ctx, "k", n)
				default:
					elapsed := time.Duration(rng.Int64N(int64(gap) * 20)).Truncate(time.Microsecond)
					if rng.IntN(10) == 0 {
						elapsed = time.Duration(rng.Int64N(int64(p.Window + p.Window/4))).Truncate(time.Microsecond)
					}
					what = fmt.Sprintf("Refund(%d, %v)", n, elapsed)
					merr = mem.Refund(ctx, "k", n, elapsed)
					rerr = red.Refund(ctx, "k", n, elapsed)
					if merr == nil && rerr == nil {
						md, merr = mem.Peek(ctx, "k", 1)
						rd, rerr = red.Peek(ctx, "k", 1)
						what += ", then Peek(1)"
					}
				}
				history = append(history, fmt.Sprintf("%v %s", dt, what))
				if len(history) > 12 {
					history = history[1:]
				}
				if merr != nil || rerr != nil || md != rd {
					t.Fatalf("step %d, %s:\nmemory %+v, %v\nredis  %+v, %v\nlast steps:\n%s",
						i, what, md, merr, rd, rerr, strings.Join(history, "\n"))
				}
				s, ok := readSlidingLog(t, client, key)
				if ok {
					if err := s.check(); err != nil {
						t.Fatalf("step %d, %s: %v\nlast steps:\n%s", i, what, err, strings.Join(history, "\n"))
					}
				}
				switch refund := strings.HasPrefix(what, "Refund"); {
				case had && !ok && refund:
					paths["deleted by a refund"]++
				case !had || !ok:
				case refund && prev.zeros > 0 && s.zeros == 0 && s.last == prev.last:
					paths["rebuilt"]++
				case s.base > prev.base:
					paths["cut off"]++
				case refund && s.k < prev.k:
					paths["end moved back"]++
				}
				prev, had = s, ok
			}
		})
	}
	for _, path := range []string{"deleted by a refund", "cut off", "rebuilt", "end moved back"} {
		if paths[path] == 0 {
			t.Errorf("no step took the path %q", path)
		}
	}
	t.Logf("paths taken: %v", paths)
}

// A decision on a long log reads a few of its records, not the log:
// allowed, denied at a cost of L, an allowed request given back, and a
// refund from the middle of the log each read at most about 8·log2(k)
// 8-byte fields, and call Redis at most as many times. MONITOR shows the
// commands the script calls; the log is built by the script itself.
func TestSlidingLogReadsFewRecords(t *testing.T) {
	client := newClient(t, singleNode(t))
	const records = 3000
	p := core.Policy{Algorithm: core.SlidingLog, Limit: 100_000, Window: time.Hour}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := core.NewManualClock(start)
	l := mustNew(t, client, p, WithClock(clock), WithBatching(1), WithPrefix(uniquePrefix(t.Name())))
	gap := p.Window / (2 * records)
	for i := range records {
		if d, err := l.AllowN(ctx, "k", 2); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		clock.Advance(gap)
	}
	key := l.key("k")
	if n, err := client.StrLen(ctx, key).Result(); err != nil || n < 16*records {
		t.Fatalf("STRLEN %d, %v: want %d records", n, err, records)
	}

	lines := monitor(t, singleNode(t))
	// MONITOR has begun once it shows this command.
	marker := "monitor-marker-" + t.Name()
	for seen := false; !seen; {
		client.Get(ctx, marker)
		select {
		case line := <-lines:
			seen = strings.Contains(line, marker)
		case <-time.After(10 * time.Second):
			t.Fatal("MONITOR shows nothing")
		}
	}

	const each = 8
	cases := []struct {
		name string
		run  func() error
	}{
		{"allowed", func() error {
			clock.Advance(gap)
			_, err := l.AllowN(ctx, "k", 1)
			return err
		}},
		{"denied at L", func() error {
			d, err := l.AllowN(ctx, "k", p.Limit)
			if err == nil && d.Allowed {
				err = fmt.Errorf("cost L allowed: %+v", d)
			}
			return err
		}},
		{"given back", func() error {
			clock.Advance(gap)
			if _, err := l.AllowN(ctx, "k", 1); err != nil {
				return err
			}
			return l.Refund(ctx, "k", 1, 0)
		}},
		{"refund from the middle", func() error {
			return l.Refund(ctx, "k", 1, p.Window/4)
		}},
	}
	// The script's commands read: GETRANGE's range, or the whole string.
	limit := 8 * 12 // 8·log2(3000) fields or calls
	for _, c := range cases {
		for range each {
			if err := c.run(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		client.Get(ctx, marker) // the end of this case's commands
		calls, fields, evals := 0, 0, 0
		for done := false; !done; {
			var line string
			select {
			case line = <-lines:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: MONITOR stopped", c.name)
			}
			args := monitorArgs(line)
			switch {
			case len(args) == 0:
			case strings.EqualFold(args[0], "get") && strings.Contains(line, marker):
				done = true
			case strings.EqualFold(args[0], "evalsha") || strings.EqualFold(args[0], "fcall"):
				evals++
			case !strings.Contains(line, "lua]"):
			case strings.EqualFold(args[0], "get"):
				t.Errorf("%s: the script reads the whole log: %s", c.name, line)
				fields += records
				calls++
			case strings.EqualFold(args[0], "getrange") && len(args) == 4:
				from, _ := strconv.Atoi(args[2])
				to, _ := strconv.Atoi(args[3])
				fields += (to - from + 8) / 8
				calls++
			default:
				calls++
			}
		}
		if evals == 0 {
			t.Fatalf("%s: MONITOR saw no EVALSHA or FCALL", c.name)
		}
		if per := fields / evals; per > limit {
			t.Errorf("%s: %d 8-byte fields read per call, want at most %d", c.name, per, limit)
		}
		if per := calls / evals; per > limit {
			t.Errorf("%s: %d commands per call, want at most %d", c.name, per, limit)
		}
		t.Logf("%s: %d script calls, %.1f fields read and %.1f commands each", c.name, evals,
			float64(fields)/float64(evals), float64(calls)/float64(evals))
	}
}

// monitor sends MONITOR to the server at addr on a connection of its own,
// and returns the lines it then shows, until t ends.
func monitor(t *testing.T, addr string) <-chan string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	lines := make(chan string, 100_000)
	go func() {
		defer close(lines)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSuffix(strings.TrimPrefix(line, "+"), "\r\n")
		}
	}()
	return lines
}

// monitorArgs returns the command and arguments of a MONITOR line, such as
// `1700000000.000000 [0 lua] "GETRANGE" "key" "44" "51"`.
func monitorArgs(line string) []string {
	var args []string
	for {
		i := strings.IndexByte(line, '"')
		if i < 0 {
			return args
		}
		line = line[i+1:]
		var b strings.Builder
		for len(line) > 0 && line[0] != '"' {
			if line[0] == '\\' && len(line) > 1 {
				b.WriteByte(line[0])
				line = line[1:]
			}
			b.WriteByte(line[0])
			line = line[1:]
		}
		args = append(args, b.String())
		if len(line) > 0 {
			line = line[1:]
		}
	}
}

// A log whose total passes 2^50 is cut off at the first live record, so
// that the units it sums stay exact in Lua's numbers: here a record of
// 2^50 units (more than any log holds, but what a long life adds up to)
// has left the window.
func TestSlidingLogTotalCutBack(t *testing.T) {
	client := newClient(t, singleNode(t))
	p := core.Policy{Algorithm: core.SlidingLog, Limit: 10, Window: time.Second}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	mc, rc := core.NewManualClock(start), core.NewManualClock(start)
	mem, err := core.New(p, core.WithClock(mc))
	if err != nil {
		t.Fatal(err)
	}
	red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
	us := start.UnixMicro()
	ats := []int64{us - 10, us + 100, us + 200, us + 300}
	if err := client.Set(ctx, red.key("k"), packSlidingLog(ats, []int64{1 << 50, 1, 2, 3}), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int64{1, 2, 3} {
		mc.Set(time.UnixMicro(ats[i+1]))
		if _, err := mem.AllowN(ctx, "k", n); err != nil {
			t.Fatal(err)
		}
	}
	now := start.Add(time.Second)
	mc.Set(now)
	rc.Set(now)
	for _, n := range []int64{4, 5} {
		md, merr := mem.AllowN(ctx, "k", n)
		rd, rerr := red.AllowN(ctx, "k", n)
		if merr != nil || rerr != nil || md != rd {
			t.Fatalf("AllowN(%d): memory %+v, %v\nredis %+v, %v", n, md, merr, rd, rerr)
		}
	}
	s, _ := readSlidingLog(t, client, red.key("k"))
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	if s.base != 1 || s.total != 10 {
		t.Fatalf("base %d, total %d; want the log cut off at record 1, 10 units", s.base, s.total)
	}
}
