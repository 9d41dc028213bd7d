package redisstore

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redisserver"
)

// clusterRecoveryBound is how soon after the replica's promotion a
// long-lived Cluster client's limiter decides on Redis again for every key
// of the dead master's slots: a slot reload is asked at most every
// reloadEvery after an error (see cluster.go), and takes a round trip to
// a live node, or up to half a second when it asks the dead one first; the
// rest is margin for a loaded machine. Without the reload, go-redis keeps
// the dead master for a minute (ClusterStateReloadInterval).
const clusterRecoveryBound = 3 * time.Second

// keyTally is what one limiter's traffic did on one key.
type keyTally struct {
	allowed, errs atomic.Int64
	first         atomic.Int64 // Unix ns: the end of the first decision by Redis started after the promotion
}

// TestClusterMasterKilled kills a master under traffic through long-lived
// Cluster clients (the recommended settings; a limiter batching, one not,
// and a Layered one, each on its own client) and checks that, once the
// Cluster has promoted its replica, each decides on Redis again for every
// key of the dead master's slots within clusterRecoveryBound, and that no
// key was charged twice: the units counted in Redis are at most the
// decisions allowed plus those that returned an error (whose outcome is
// unknown).
func TestClusterMasterKilled(t *testing.T) {
	rc := redisserver.StartClusterT(t, redisserver.FailoverConfig())
	newClient := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 rc.Addrs,
			MaxRetries:            -1,
			MaxRedirects:          -1,
			ContextTimeoutEnabled: true,
			DialTimeout:           100 * time.Millisecond,
		})
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Each limiter has a client of its own, so that each reloads its own.
	client := newClient()
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 1_000_000_000, Window: time.Hour}
	layered, err := NewLayered(newClient(), []core.Policy{p}, WithPrefix(uniquePrefix("kill-layered")), WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// Each limiter, and the Redis key of one of its keys.
	type limiter struct {
		core.Limiter
		key func(string) string
	}
	batched := mustNew(t, client, p, WithPrefix(uniquePrefix("kill-batched")), WithTimeout(100*time.Millisecond))
	unbatched := mustNew(t, newClient(), p, WithPrefix(uniquePrefix("kill-unbatched")), WithTimeout(100*time.Millisecond), WithBatching(1))
	limiters := map[string]limiter{
		"batched":   {batched, batched.key},
		"unbatched": {unbatched, unbatched.key},
		"layered":   {layered, layered.layers[0].key},
	}
	var keys []string
	for i := range 32 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	// The victim is the master of the first key; onVictim marks its keys.
	masterOf := func(key string) string {
		c, err := client.MasterForKey(ctx, "{"+key+"}")
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	victim := masterOf(keys[0])
	onVictim := make(map[string]bool)
	for _, k := range keys {
		onVictim[k] = masterOf(k) == victim
	}
	replica, err := rc.ReplicaOf(victim)
	if err != nil {
		t.Fatal(err)
	}

	tallies := make(map[string]map[string]*keyTally)
	for name := range limiters {
		tallies[name] = make(map[string]*keyTally)
		for _, k := range keys {
			tallies[name][k] = new(keyTally)
		}
	}
	var promotedAt atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for name, l := range limiters {
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := w; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					key := keys[n%len(keys)]
					kt := tallies[name][key]
					began := time.Now()
					d, err := l.AllowN(ctx, key, 1)
					switch {
					case err != nil:
						kt.errs.Add(1)
						time.Sleep(time.Millisecond) // pacing the load, not timing a result
					case !d.Allowed:
						t.Errorf("%s: %s denied far below its limit: %+v", name, key, d)
					default:
						kt.allowed.Add(1)
						if pa := promotedAt.Load(); pa != 0 && began.UnixNano() >= pa {
							kt.first.CompareAndSwap(0, time.Now().UnixNano())
						}
					}
				}
			}()
		}
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	time.Sleep(500 * time.Millisecond) // traffic before the fault
	killed := time.Now()
	if err := rc.Kill(victim); err != nil {
		t.Fatal(err)
	}
	promoted, err := rc.WaitPromoted(ctx, victim, replica, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	promotedAt.Store(promoted.UnixNano())
	t.Logf("master %s killed; replica %s promoted %v later", victim, replica, promoted.Sub(killed).Round(time.Millisecond))

	var late []string
	deadline := promoted.Add(clusterRecoveryBound)
	for {
		late = late[:0]
		var worst time.Duration
		for name, byKey := range tallies {
			for _, k := range keys {
				f := byKey[k].first.Load()
				if f == 0 {
					late = append(late, name+"/"+k)
					continue
				}
				worst = max(worst, time.Unix(0, f).Sub(promoted))
			}
		}
		if len(late) == 0 {
			t.Logf("every key decided on Redis again within %v of the promotion", worst.Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("no decision by Redis within %v of the promotion for %d keys (%d of %d keys on the dead master): %v",
				clusterRecoveryBound, len(late), countTrue(onVictim), len(keys), late)
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the traffic's progress
	}
	close(stop)
	wg.Wait()

	// Never charged twice: Redis holds at most the allowed decisions plus
	// those of unknown outcome. On the dead master's keys it may hold
	// fewer: what the replica had not received.
	var lost int64
	reader := newClient() // a new client: it knows the promotion
	for name, l := range limiters {
		for _, k := range keys {
			kt := tallies[name][k]
			v, err := reader.Get(ctx, l.key(k)).Result()
			if err != nil {
				t.Fatalf("%s: %s: %v", name, k, err)
			}
			counted, err := fixedWindowCount(v)
			if err != nil {
				t.Fatalf("%s: %s holds %q", name, k, v)
			}
			allowed, errs := kt.allowed.Load(), kt.errs.Load()
			if counted > allowed+errs {
				t.Errorf("%s: %s: Redis counted %d units for %d allowed and %d failed decisions: some counted twice", name, k, counted, allowed, errs)
			}
			switch {
			case onVictim[k]:
				lost += max(0, allowed-counted)
			case counted < allowed:
				t.Errorf("%s: %s on a live master: Redis counted %d units for %d allowed decisions", name, k, counted, allowed)
			}
		}
	}
	t.Logf("units allowed that the promoted replica had not received: %d", lost)
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// TestTopologyError checks which errors make a Cluster limiter reload its
// slots: network errors and timeouts, and the answers that a slot moved or
// is not served yet; not a script's error, nor a caller's cancellation.
func TestTopologyError(t *testing.T) {
	c := newClient(t, singleNode(t))
	reply := func(msg string) error {
		err := c.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
		if err == nil {
			t.Fatalf("%q: no error", msg)
		}
		return err
	}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{dial, true},
		{fmt.Errorf("redisstore: eval: %w", dial), true},
		{context.DeadlineExceeded, true},
		{io.EOF, true},
		{reply("MOVED 3999 127.0.0.1:6381"), true},
		{reply("ASK 3999 127.0.0.1:6381"), true},
		{reply("CLUSTERDOWN The cluster is down"), true},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{reply("READONLY You can't write against a read only replica."), true},
		{reply("MASTERDOWN Link with MASTER is down"), true},
		{reply("LOADING Redis is loading the dataset in memory"), true},
		{context.Canceled, false},
		{redis.ErrClosed, false},
		{reply("ERR user_script:1: boom"), false},
		{reply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{reply("NOSCRIPT No matching script."), false},
		{reply("BUSY Redis is busy running a script."), false},
	} {
		if got := topologyError(tc.err); got != tc.want {
			t.Errorf("topologyError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
