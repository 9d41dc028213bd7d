package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/redis/go-redis/v9"
)

var ctx = context.Background()

// mustNew is New for a test: keys expire an hour after their ResetAfter
// unless opts set a margin of their own. Redis expires keys on its own
// clock, which runs on while a test's manual clock stands still: with the
// default second, a key of a window of a few microseconds expired between
// two batches on a busy machine and decided as new, unlike memory
// (TestBatchScriptSameDecisionsAsMemory, about one run in 25). The tests
// compare decisions; those of expiry set their margin.
func mustNew(t testing.TB, c redis.UniversalClient, p core.Policy, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(c, p, append([]Option{WithExpiryMargin(time.Hour)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestKeys(t *testing.T) {
	// A client of a closed port: New's script load fails fast, and no
	// other Redis is ever touched.
	nowhere := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer nowhere.Close()
	l := mustNew(t, nowhere, core.Policy{Name: "api", Limit: 10, Window: time.Minute}, WithPrefix("app"))
	for _, tt := range []struct{ key, want string }{
		{"203.0.113.7", "app:api/token-bucket:{203.0.113.7}"},
		{"{x}", "app:api/token-bucket:{%7Bx%7D}"},
		{"a}b{c%", "app:api/token-bucket:{a%7Db%7Bc%25}"},
		{"%7B", "app:api/token-bucket:{%257B}"},
	} {
		if got := l.key(tt.key); got != tt.want {
			t.Errorf("key(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
	// An unnamed policy's keys carry its numbers.
	u := mustNew(t, nowhere, core.Policy{Limit: 10, Window: time.Minute}, WithPrefix("app"))
	if got, want := u.key("k"), "app:token-bucket/10/60000000/10:{k}"; got != want {
		t.Errorf("unnamed: key(%q) = %q, want %q", "k", got, want)
	}
	if _, err := New(nowhere, core.Policy{Limit: 1, Window: time.Second}, WithPrefix("a{b")); err == nil {
		t.Error("WithPrefix with a brace: no error")
	}
	if _, err := New(nowhere, core.Policy{Limit: 0, Window: time.Second}); !errors.Is(err, core.ErrInvalidPolicy) {
		t.Errorf("invalid policy: err = %v, want ErrInvalidPolicy", err)
	}
}

// Every algorithm through a ClusterClient: keys with braces, every limit of
// one caller on one slot, Reset, no CROSSSLOT.
func TestCluster(t *testing.T) {
	addrs := cluster(t)
	client := newClusterClient(t, addrs)
	prefix := uniquePrefix("cluster")
	users := []string{"alice", "{bob}", "c}a{rol", "}", "dave%7B"}
	var limiters []*Limiter
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 3, Window: time.Hour, Burst: 3}, func(t *testing.T, p core.Policy) {
		clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		l := mustNew(t, client, p, WithPrefix(prefix), WithClock(clock))
		limiters = append(limiters, l)
		for _, u := range users {
			for i := range 4 {
				d, err := l.Allow(ctx, u)
				if err != nil {
					t.Fatalf("%q request %d: %v", u, i+1, err)
				}
				if d.Allowed != (i < 3) {
					t.Fatalf("%q request %d: allowed=%v", u, i+1, d.Allowed)
				}
			}
			if err := l.Reset(ctx, u); err != nil {
				t.Fatalf("Reset(%q): %v", u, err)
			}
			if d, err := l.Peek(ctx, u, 3); err != nil || !d.Allowed {
				t.Fatalf("Peek(%q) after Reset: %+v, %v", u, d, err)
			}
			l.Allow(ctx, u)
		}
	})
	// The keys of one caller, across policies, hash to one slot.
	for _, u := range users {
		slots := map[int64]bool{}
		for _, l := range limiters {
			k := l.key(u)
			s, err := client.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[s] = true
		}
		if len(slots) != 1 {
			t.Errorf("keys of %q on %d slots, want 1", u, len(slots))
		}
	}
	// The five users spread over more than one master.
	nodes := map[string]bool{}
	for _, u := range users {
		s, _ := client.ClusterKeySlot(ctx, limiters[0].key(u)).Result()
		nodes[slotOwner(t, client, s)] = true
	}
	if len(nodes) < 2 {
		t.Logf("all users on one master; the test still ran every script through the cluster")
	}
}

// slotOwner returns the ID of the master that serves slot.
func slotOwner(t *testing.T, c *redis.ClusterClient, slot int64) string {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, n := range sh.Nodes {
					if n.Role == "master" {
						return n.ID
					}
				}
			}
		}
	}
	return ""
}

// Four limiters, as on four servers, each with its own client and 50
// goroutines: exactly Limit allowed in all, and exactly Burst of 200
// goroutines on a bucket of 10.
func TestExactAcrossServers(t *testing.T) {
	addr := singleNode(t)
	race := func(t *testing.T, p core.Policy, instances, goroutines, each int) int64 {
		prefix := uniquePrefix(t.Name())
		ls := make([]*Limiter, instances)
		for i := range ls {
			ls[i] = mustNew(t, newClient(t, addr), p, WithPrefix(prefix))
		}
		return limitercheck.CountAllowed(t, instances*goroutines, each, func(g int) (core.Decision, error) {
			return ls[g/goroutines].Allow(ctx, "shared")
		})
	}
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 100, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		if got := race(t, p, 4, 50, 3); got != 100 {
			t.Fatalf("%d of 600 allowed, want exactly 100", got)
		}
	})
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		p := core.Policy{Algorithm: a, Limit: 1, Window: time.Hour, Burst: 10}
		t.Run(p.String(), func(t *testing.T) {
			if got := race(t, p, 4, 50, 1); got != 10 {
				t.Fatalf("%d of 200 allowed, want exactly Burst 10", got)
			}
		})
	}
}

// After a mixed workload, every key has an expiry no later than its
// ResetAfter plus the margin, and once that has passed, no key is left.
//
// The limiters decide on a manual clock, so each key's expiry is known
// exactly: its last write (its last allowed request: denials write
// nothing) set it to that decision's ResetAfter, rounded up to the
// millisecond, plus the margin, counted by the server's clock from the
// write; PTTL, read later by the same clock, can only be less, however
// long a loaded machine takes between the two. (On the server's TIME the
// script reads the time before it writes the expiry, and a server
// descheduled in between sets an expiry that much later: no bound can be
// put on that.)
func TestExpiry(t *testing.T) {
	client := newClient(t, singleNode(t))
	prefix := uniquePrefix("expiry")
	const margin = 5 * time.Millisecond
	clock := core.NewManualClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	var limiters []*Limiter
	for _, p := range []core.Policy{
		{Limit: 5, Window: 150 * time.Millisecond},
		{Algorithm: core.LeakyBucket, Limit: 20, Window: 100 * time.Millisecond, Burst: 4},
		{Algorithm: core.FixedWindow, Limit: 5, Window: 120 * time.Millisecond},
		{Algorithm: core.SlidingWindow, Limit: 5, Window: 60 * time.Millisecond},
		{Algorithm: core.SlidingLog, Limit: 5, Window: 150 * time.Millisecond},
	} {
		limiters = append(limiters, mustNew(t, client, p, WithPrefix(prefix), WithExpiryMargin(margin), WithClock(clock)))
	}
	// Each key's expiry as its last write set it.
	expiry := map[string]time.Duration{}
	for i := range 200 {
		l := limiters[i%len(limiters)]
		user := "user-" + strconv.Itoa(i%7)
		d, err := l.AllowN(ctx, user, 1+int64(i%2))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			expiry[l.key(user)] = (d.ResetAfter + time.Millisecond - 1).Truncate(time.Millisecond) + margin
		}
		if i%3 == 0 {
			clock.Advance(7 * time.Millisecond)
		}
	}
	keys := scanKeys(t, client, prefix+":*")
	if len(keys) == 0 {
		t.Fatal("no keys written")
	}
	var longest time.Duration
	for _, k := range keys {
		want, ok := expiry[k]
		if !ok {
			t.Fatalf("key %q was never written by an allowed request", k)
		}
		pttl, err := client.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if pttl == -2*time.Nanosecond {
			continue // expired between SCAN and PTTL
		}
		if pttl < 0 || pttl > want {
			t.Errorf("key %q: PTTL %v, want in [0, %v] (ResetAfter rounded up + margin %v)", k, pttl, want, margin)
		}
		longest = max(longest, want)
	}
	// Wait out the longest expiry: a real wait, bounded by the windows
	// above (at most ~160 ms). SCAN does not return an expired key, so a
	// machine that wakes late only finds fewer.
	deadline := time.Now().Add(longest + 200*time.Millisecond)
	for {
		left := scanKeys(t, client, prefix+":*")
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys left after their expiry: %v", len(left), left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func scanKeys(t *testing.T, c *redis.Client, match string) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(ctx, 0, match, 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// SCRIPT FLUSH between two requests: the second runs (EVAL on NOSCRIPT)
// and counts once.
func TestScriptFlush(t *testing.T) {
	client := scriptsClient(t, singleNode(t)) // EVALSHA (functions_test.go)
	prefix := uniquePrefix("flush")
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 10, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		l := mustNew(t, client, p, WithPrefix(prefix))
		if d, err := l.AllowN(ctx, "k", 2); err != nil || d.Remaining != 8 {
			t.Fatalf("first request: %+v, %v", d, err)
		}
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if d, err := l.AllowN(ctx, "k", 3); err != nil || !d.Allowed || d.Remaining != 5 {
			t.Fatalf("after SCRIPT FLUSH: %+v, %v; want allowed with 5 left", d, err)
		}
		if d, err := l.Peek(ctx, "k", 5); err != nil || !d.Allowed || d.Remaining != 5 {
			t.Fatalf("Peek 5: %+v, %v; want allowed with 5 left", d, err)
		}
	})
}

// blockServer makes the server busy for d with a script of its own, the
// way a slow command or a long Lua script of another application would,
// and returns once the script runs: the script is written before it
// returns, and a PING on another connection then goes unanswered. (A
// machine too loaded to answer a PING in 50 ms may make it return a little
// early; the script, sent first, still runs before what is sent after.)
func blockServer(t *testing.T, addr string, d time.Duration) <-chan error {
	t.Helper()
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	script := `
		local t = redis.call('TIME')
		local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
		repeat
			t = redis.call('TIME')
		until tonumber(t[1]) * 1000000 + tonumber(t[2]) >= stop
		return 1`
	if _, err := busy.Write(respCommand("EVAL", script, "0", strconv.FormatInt(d.Microseconds(), 10))); err != nil {
		busy.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		defer busy.Close()
		line, err := bufio.NewReader(busy).ReadString('\n')
		if err == nil && line != ":1\r\n" {
			err = fmt.Errorf("busy script answered %q", line)
		}
		done <- err
	}()
	ping, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ping.Close()
	r := bufio.NewReader(ping)
	for {
		if _, err := ping.Write(respCommand("PING")); err != nil {
			t.Fatal(err)
		}
		ping.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := r.ReadString('\n'); err != nil {
			return done // unanswered: the script runs
		}
		time.Sleep(time.Millisecond)
	}
}

// respCommand returns args as a RESP command.
func respCommand(args ...string) []byte {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b
}

// A request that times out while Redis is busy returns an error within the
// timeout, and is counted at most once: with MaxRetries -1 the client never
// sends the script again.
func TestTimeoutCountsAtMostOnce(t *testing.T) {
	addr := singleNode(t)
	client := newClient(t, addr)
	l := mustNew(t, client, core.Policy{Limit: 10, Window: time.Hour}, WithPrefix(uniquePrefix("timeout")), WithTimeout(100*time.Millisecond))
	if _, err := l.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	done := blockServer(t, addr, 1500*time.Millisecond)
	began := time.Now()
	_, err := l.Allow(ctx, "k")
	took := time.Since(began)
	if err == nil {
		t.Fatal("Allow on a busy server: no error")
	}
	if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
		t.Errorf("err = %v, want a timeout", err)
	}
	// Well before the server is free: a second's room for a loaded machine.
	if took > 1100*time.Millisecond {
		t.Errorf("Allow took %v with a 100ms timeout", took)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d, err := l.Peek(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	// Peek(1) leaves 8 if the timed-out script never ran, 7 if it ran
	// once; never 6.
	if d.Remaining != 7 && d.Remaining != 8 {
		t.Fatalf("after a timed-out request, Peek(1) leaves %d, want 7 or 8", d.Remaining)
	}
	t.Logf("the timed-out request was counted %d time(s)", 8-d.Remaining)
}

// commandStats returns the calls of each command since the last CONFIG
// RESETSTAT.
func commandStats(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		stats[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return stats
}

// Each decision is one round trip: one EVALSHA, counted by the server in
// INFO commandstats, and one command seen by the client.
func TestOneRoundTrip(t *testing.T) {
	addr := singleNode(t)
	admin := newClient(t, addr)
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 50, Window: time.Minute}, func(t *testing.T, p core.Policy) {
		client := newClient(t, addr)
		var sent atomic.Int64
		client.AddHook(countHook{&sent})
		l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())))
		l.Allow(ctx, "warm") // the script is loaded
		const decisions = 100
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		sent.Store(0)
		for i := range decisions {
			if _, err := l.Allow(ctx, fmt.Sprint("k", i%3)); err != nil {
				t.Fatal(err)
			}
		}
		stats := commandStats(t, admin)
		if stats["evalsha"]+stats["fcall"] != decisions || stats["eval"] != 0 {
			t.Errorf("server saw %d EVALSHA or FCALL and %d EVAL for %d decisions, want %d and 0", stats["evalsha"]+stats["fcall"], stats["eval"], decisions, decisions)
		}
		if got := sent.Load(); got != decisions {
			t.Errorf("client sent %d commands for %d decisions", got, decisions)
		}
	})
}

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
