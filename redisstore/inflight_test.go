package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/inflight"
)

func newInFlight(t *testing.T, c redis.UniversalClient, limit int64, opts ...Option) *InFlight {
	t.Helper()
	f, err := NewInFlight(c, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func wantAcquire(t *testing.T, f *InFlight, key string, allowed bool, inFlight int64, retry time.Duration) inflight.Decision {
	t.Helper()
	d, err := f.Acquire(context.Background(), key)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	if d.Allowed != allowed || d.InFlight != inFlight || d.RetryAfter != retry {
		t.Fatalf("Acquire(%q) = allowed %v, in flight %d, RetryAfter %v; want %v, %d, %v", key, d.Allowed, d.InFlight, d.RetryAfter, allowed, inFlight, retry)
	}
	return d
}

// N+1 acquires of one key at once, with a start barrier: exactly N leases,
// on a single node and on a Cluster, on the server's TIME.
func TestInFlightConcurrentNPlusOne(t *testing.T) {
	const n = 8
	for name, client := range map[string]func(t *testing.T) redis.UniversalClient{
		"single":  func(t *testing.T) redis.UniversalClient { return newClient(t, singleNode(t)) },
		"cluster": func(t *testing.T) redis.UniversalClient { return newClusterClient(t, cluster(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			f := newInFlight(t, client(t), n, WithPrefix(uniquePrefix(t.Name())))
			for round := range 20 {
				var allowed atomic.Int64
				leases := make(chan inflight.Lease, n+1)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for range n + 1 {
					wg.Go(func() {
						<-start
						d, err := f.Acquire(context.Background(), "hot")
						if err != nil {
							t.Error(err)
						}
						if d.Allowed {
							allowed.Add(1)
							leases <- d.Lease
						}
					})
				}
				close(start)
				wg.Wait()
				close(leases)
				if got := allowed.Load(); got != n {
					t.Fatalf("round %d: %d of %d concurrent acquires allowed, want %d", round, got, n+1, n)
				}
				for l := range leases {
					if err := f.Release(context.Background(), l); err != nil {
						t.Fatal(err)
					}
				}
			}
			wantAcquire(t, f, "hot", true, 1, 0)
		})
	}
}

// Release frees a slot, once; the key expires with its last lease.
func TestInFlightReleaseAndKeyTTL(t *testing.T) {
	c := newClient(t, singleNode(t))
	clock := core.NewManualClock(inFlightStart)
	f := newInFlight(t, c, 2, WithPrefix(uniquePrefix(t.Name())), WithClock(clock), WithLeaseTTL(10*time.Second), WithExpiryMargin(time.Second))
	a := wantAcquire(t, f, "k", true, 1, 0)
	wantAcquire(t, f, "k", true, 2, 0)
	wantAcquire(t, f, "k", false, 2, time.Second)
	for range 2 { // a second release frees nothing more
		if err := f.Release(context.Background(), a.Lease); err != nil {
			t.Fatal(err)
		}
	}
	wantAcquire(t, f, "k", true, 2, 0)
	wantAcquire(t, f, "k", false, 2, time.Second)
	ttl, err := c.PTTL(context.Background(), f.l.key("k")).Result()
	if err != nil || ttl <= 10*time.Second || ttl > 11*time.Second {
		t.Fatalf("key PTTL = %v (%v), want in (10s, 11s]: the last lease's TTL and the margin", ttl, err)
	}
	// After a SCRIPT FLUSH (or a restart) the script is sent once again.
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	wantAcquire(t, f, "k", true, 1, 0)
}

// inFlightStart is the manual clock's start in the Redis in-flight tests.
var inFlightStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// holderEnv, when set, makes TestInFlightHolderProcess a process that
// takes leases and waits to be killed: "addr prefix limit".
const holderEnv = "RATEKIT_INFLIGHT_HOLDER"

// TestInFlightHolderProcess is the process that TestInFlightKilledHolder
// kills; it does nothing in a normal run.
func TestInFlightHolderProcess(t *testing.T) {
	arg := os.Getenv(holderEnv)
	if arg == "" {
		t.Skip("run by TestInFlightKilledHolder only")
	}
	parts := strings.Fields(arg)
	limit, _ := strconv.ParseInt(parts[2], 10, 64)
	c := redis.NewClient(&redis.Options{Addr: parts[0]})
	f, err := NewInFlight(c, limit, WithPrefix(parts[1]), WithClock(core.NewManualClock(inFlightStart)), WithLeaseTTL(10*time.Second))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for range limit {
		if d, err := f.Acquire(context.Background(), "k"); err != nil || !d.Allowed {
			fmt.Println("error: acquire:", d, err)
			os.Exit(1)
		}
	}
	fmt.Println("held")
	select {} // until killed, releasing nothing
}

// A process that holds every lease of a key and is killed (SIGKILL: no
// release, no cleanup) leaks nothing past the lease TTL: on the manual
// clock, the key is refused until exactly 10 s after the leases were
// taken, and then has its whole cap again.
func TestInFlightKilledHolder(t *testing.T) {
	addr := singleNode(t)
	prefix := uniquePrefix(t.Name())
	const limit = 3
	cmd := exec.Command(os.Args[0], "-test.run=^TestInFlightHolderProcess$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", holderEnv, addr, prefix, limit))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("holder process said %q (%v), want held", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	clock := core.NewManualClock(inFlightStart)
	f := newInFlight(t, newClient(t, addr), limit, WithPrefix(prefix), WithClock(clock), WithLeaseTTL(10*time.Second))
	wantAcquire(t, f, "k", false, limit, time.Second)
	clock.Advance(10*time.Second - 1500*time.Microsecond)
	wantAcquire(t, f, "k", false, limit, 1500*time.Microsecond) // the soonest expiry, sooner than 1 s
	clock.Advance(1500*time.Microsecond - time.Microsecond)
	wantAcquire(t, f, "k", false, limit, time.Millisecond) // 1 µs left: at least 1 ms
	clock.Advance(time.Microsecond)
	for i := range int64(limit) {
		wantAcquire(t, f, "k", true, i+1, 0)
	}
	wantAcquire(t, f, "k", false, limit, time.Second)
}

func TestNewInFlightRejects(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for name, f := range map[string]func() error{
		"nil client": func() error { _, err := NewInFlight(nil, 1); return err },
		"limit 0":    func() error { _, err := NewInFlight(c, 0); return err },
		"ttl 0":      func() error { _, err := NewInFlight(c, 1, WithLeaseTTL(0)); return err },
		"ttl in New": func() error {
			_, err := New(c, core.Policy{Limit: 1, Window: time.Second}, WithLeaseTTL(time.Second))
			return err
		},
	} {
		if f() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// BenchmarkInFlightAcquireRelease is one request's lease on a single
// node: an Acquire and its Release, two round trips, on the server's TIME.
func BenchmarkInFlightAcquireRelease(b *testing.B) {
	f, err := NewInFlight(newClient(b, singleNode(b)), 1<<30, WithPrefix(uniquePrefix(b.Name())))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d, err := f.Acquire(context.Background(), "k")
			if err != nil || !d.Allowed {
				b.Error(d, err)
				return
			}
			f.Release(context.Background(), d.Lease)
		}
	})
}
