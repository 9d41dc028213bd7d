package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/redis/go-redis/v9"
)

// pipeHook counts the pipelines a client sends and their largest size, and
// runs before, if set, ahead of each pipeline.
type pipeHook struct {
	pipelines, largest atomic.Int64
	scripts, pipelined atomic.Int64 // EVALSHA and EVAL sent: in all, in pipelines
	before             func()
}

func isScript(cmd redis.Cmder) bool {
	return cmd.Name() == "evalsha" || cmd.Name() == "fcall" || cmd.Name() == "eval"
}

func (h *pipeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			h.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		for _, cmd := range cmds {
			if isScript(cmd) {
				h.scripts.Add(1)
				h.pipelined.Add(1)
			}
		}
		for {
			l := h.largest.Load()
			if int64(len(cmds)) <= l || h.largest.CompareAndSwap(l, int64(len(cmds))) {
				break
			}
		}
		if h.before != nil {
			h.before()
		}
		return next(ctx, cmds)
	}
}

// The conformance suite with batching (its calls are sequential: each is
// sent at once, alone).
func TestBatchingConformance(t *testing.T) {
	t.Parallel() // with the other conformance run, after the package's other tests
	client := newClient(t, singleNode(t))
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		return mustNew(t, client, p, WithClock(clock), WithPrefix(uniquePrefix(t.Name())), WithBatching(0))
	})
}

// Concurrent decisions in batches make the memory store's decisions: 16
// goroutines, each on its own key, decide together in rounds on one manual
// clock, and every Decision equals the memory store's.
func TestBatchingSameDecisionsAsMemory(t *testing.T) {
	addr := singleNode(t)
	for _, base := range []core.Policy{
		{Limit: 3, Window: time.Second},
		{Limit: 7, Window: time.Second, Burst: 11},
		{Limit: 97, Window: time.Minute},
		{Limit: core.MaxLimit, Window: 30 * 24 * time.Hour},
	} {
		limitercheck.ForEachAlgorithm(t, base, func(t *testing.T, p core.Policy) {
			client := newClient(t, addr)
			hook := &pipeHook{}
			client.AddHook(hook)
			start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			mem, err := core.New(p, core.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())), WithBatching(8))
			const goroutines = 16
			rng := rand.New(rand.NewPCG(uint64(p.Limit), uint64(p.Algorithm)))
			step := max(int64(p.Window/time.Microsecond)/p.Limit, 1)
			for round := range 60 {
				dt := time.Duration(rng.Int64N(2*step+2)) * time.Microsecond
				mc.Advance(dt)
				rc.Advance(dt)
				var wg sync.WaitGroup
				errs := make(chan error, goroutines)
				for g := range goroutines {
					n := 1 + rng.Int64N(min(p.Capacity(), 3))
					peek := rng.IntN(3) == 0
					wg.Go(func() {
						key := fmt.Sprint("k", g)
						var md, rd core.Decision
						var merr, rerr error
						if peek {
							md, merr = mem.Peek(ctx, key, n)
							rd, rerr = red.Peek(ctx, key, n)
						} else {
							md, merr = mem.AllowN(ctx, key, n)
							rd, rerr = red.AllowN(ctx, key, n)
						}
						if merr != nil || rerr != nil || md != rd {
							errs <- fmt.Errorf("round %d, %s (n=%d, peek=%v): memory %+v, %v\n redis %+v, %v", round, key, n, peek, md, merr, rd, rerr)
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
			}
			if hook.largest.Load() < 2 {
				t.Errorf("largest pipeline %d: batching never happened", hook.largest.Load())
			}
		})
	}
}

// Four limiters with batching, 50 goroutines each, race on one key:
// exactly Limit allowed; and on a Cluster, exactly Limit per caller.
func TestBatchingExact(t *testing.T) {
	race := func(t *testing.T, newLimiter func() *Limiter, instances, goroutines, each int, keys []string) map[string]int64 {
		var mu sync.Mutex
		allowed := map[string]int64{}
		ls := make([]*Limiter, instances)
		for i := range ls {
			ls[i] = newLimiter()
		}
		limitercheck.Race(instances*goroutines, func(g int) {
			l := ls[g/goroutines]
			for i := range each {
				key := keys[(g%goroutines+i)%len(keys)]
				d, err := l.Allow(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					allowed[key]++
					mu.Unlock()
				}
			}
		})
		return allowed
	}
	t.Run("single", func(t *testing.T) {
		addr := singleNode(t)
		limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 100, Window: time.Hour}, func(t *testing.T, p core.Policy) {
			prefix := uniquePrefix(t.Name())
			got := race(t, func() *Limiter {
				return mustNew(t, newClient(t, addr), p, WithPrefix(prefix), WithBatching(16))
			}, 4, 50, 3, []string{"shared"})
			if got["shared"] != 100 {
				t.Fatalf("%d of 600 allowed, want exactly 100", got["shared"])
			}
		})
	})
	t.Run("cluster", func(t *testing.T) {
		client := newClusterClient(t, cluster(t))
		users := []string{"alice", "{bob}", "carol", "dave", "erin"}
		limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 10, Window: time.Hour}, func(t *testing.T, p core.Policy) {
			prefix := uniquePrefix(t.Name())
			got := race(t, func() *Limiter {
				return mustNew(t, client, p, WithPrefix(prefix), WithBatching(0))
			}, 2, 20, 5, users)
			for _, u := range users {
				if got[u] != 10 {
					t.Errorf("%q: %d of 40 allowed, want exactly 10", u, got[u])
				}
			}
		})
	})
}

// With batching, fewer script calls and round trips than decisions (a
// batch's decisions share one batch script), every decision counted once;
// once idle, no goroutine of the limiter is left.
func TestBatchingFewerCallsThanDecisions(t *testing.T) {
	addr := singleNode(t)
	admin := newClient(t, addr)
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 1_000_000, Window: time.Minute}, func(t *testing.T, p core.Policy) {
		client := newClient(t, addr)
		hook := &pipeHook{}
		client.AddHook(hook)
		l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())), WithBatching(0))
		l.Allow(ctx, "warm")
		baseline := runtime.NumGoroutine()
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		hook.scripts.Store(0)
		const goroutines, each = 32, 20
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range each {
					if _, err := l.Allow(ctx, fmt.Sprint("k", (g+i)%7)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		const decisions = goroutines * each
		stats := commandStats(t, admin)
		calls := stats["evalsha"] + stats["fcall"]
		if calls >= decisions || calls == 0 || stats["eval"] != 0 {
			t.Errorf("server saw %d EVALSHA or FCALL and %d EVAL for %d decisions, want fewer EVALSHA or FCALL and no EVAL", calls, stats["eval"], decisions)
		}
		if got := hook.scripts.Load(); got != calls {
			t.Errorf("client sent %d scripts, server saw %d", got, calls)
		}
		t.Logf("%d decisions: %d script calls, %d in %d pipelines (largest %d)",
			decisions, calls, hook.pipelined.Load(), hook.pipelines.Load(), hook.largest.Load())
		if hook.pipelines.Load() == 0 {
			t.Error("no pipeline sent: batching never happened")
		}
		var counted int64
		for k := range 7 {
			d, err := l.Peek(ctx, fmt.Sprint("k", k), 1)
			if err != nil {
				t.Fatal(err)
			}
			counted += p.Limit - d.Remaining
		}
		if p.Algorithm.Burstable() {
			counted = -1 // the buckets refill meanwhile: no exact count
		}
		if counted != -1 && counted != decisions {
			t.Errorf("%d units counted for %d decisions", counted, decisions)
		}
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > baseline {
			if time.Now().After(deadline) {
				t.Fatalf("%d goroutines after the burst, %d before", runtime.NumGoroutine(), baseline)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// NOSCRIPT in a batch: the script is flushed just before the batch is sent;
// its decisions did not run, are sent again as EVAL, and count once each.
func TestBatchingNoScript(t *testing.T) {
	addr := singleNode(t)
	admin := newClient(t, addr)
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 100, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		client := scriptsClient(t, addr) // EVALSHA (functions_test.go)
		var flushed atomic.Bool
		hook := &pipeHook{before: func() {
			if flushed.CompareAndSwap(false, true) {
				if err := admin.ScriptFlush(ctx).Err(); err != nil {
					t.Error(err)
				}
			}
		}}
		client.AddHook(hook)
		l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())), WithBatching(0))
		// Hold the first request in flight so that the others queue: they
		// start once it has been sent, with half a second to queue.
		done := blockServer(t, addr, 500*time.Millisecond)
		const requests = 20
		var wg sync.WaitGroup
		for i := range requests {
			wg.Go(func() {
				if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
					t.Errorf("request %d: %+v, %v", i, d, err)
				}
			})
			for i == 0 && hook.scripts.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		wg.Wait()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !flushed.Load() || hook.largest.Load() < 2 {
			t.Fatalf("no batch sent (largest pipeline %d)", hook.largest.Load())
		}
		d, err := l.Peek(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != 100-requests {
			t.Fatalf("after %d requests, Peek(1) reports %d left, want %d", requests, d.Remaining, 100-requests)
		}
	})
}

// Redis busy past the deadlines: decisions still queued when their context
// ends return at once and are never sent; a batch that times out in flight
// is an error for each of its decisions, none sent twice: every key counts
// at most one request.
func TestBatchingTimeoutCountsAtMostOnce(t *testing.T) {
	addr := singleNode(t)
	// A client that counts the EVALSHAs it has written to the server.
	var written atomic.Int64
	client := redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return &writeCounter{Conn: c, evalsha: &written}, err
		},
	})
	t.Cleanup(func() { client.Close() })
	hook := &pipeHook{}
	client.AddHook(hook)
	l := mustNew(t, client, core.Policy{Limit: 10, Window: time.Hour}, WithPrefix(uniquePrefix("btimeout")), WithBatching(0))
	// Two connections ready: a new one could not say hello to a busy server.
	for range 100 {
		if client.PoolStats().IdleConns >= 2 {
			break
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { client.Ping(ctx) })
		}
		wg.Wait()
	}
	if n := client.PoolStats().IdleConns; n < 2 {
		t.Fatalf("%d idle connections, want 2", n)
	}
	done := blockServer(t, addr, 2*time.Second)
	// first and second are sent at once (two round trips in flight) and
	// time out at 1 s; queued, whose contexts end at 100 ms, are dropped
	// from the queue; batched, queued until first fails, are then sent as
	// one batch that times out at 1.4 s, before Redis is free at 2 s. Each
	// step has more than half a second's room for a loaded machine.
	type result struct {
		key  string
		err  error
		took time.Duration
	}
	results := make(chan result, 32)
	decide := func(key string, timeout time.Duration) {
		c, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		began := time.Now()
		_, err := l.Allow(c, key)
		results <- result{key, err, time.Since(began)}
	}
	var wg sync.WaitGroup
	wg.Go(func() { decide("first", time.Second) })
	wg.Go(func() { decide("second", time.Second) })
	for written.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	for i := range 10 {
		wg.Go(func() { decide(fmt.Sprint("queued", i), 100*time.Millisecond) })
		wg.Go(func() { decide(fmt.Sprint("batched", i), 1400*time.Millisecond) })
	}
	wg.Wait()
	close(results)
	var keys []string
	for r := range results {
		if r.err == nil {
			t.Errorf("%s: no error while Redis was busy", r.key)
		}
		if r.key[0] == 'q' && r.took > 700*time.Millisecond {
			t.Errorf("%s: returned after %v, its context ended at 100ms (first's at 1s)", r.key, r.took)
		}
		keys = append(keys, r.key)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if hook.largest.Load() < 2 {
		t.Errorf("largest pipeline %d: the batch was never sent", hook.largest.Load())
	}
	counted := map[byte]int{}
	for _, k := range keys {
		d, err := l.Peek(ctx, k, 1)
		if err != nil {
			t.Fatal(err)
		}
		// 10 left if the request never ran, 9 if it ran once.
		if d.Remaining != 9 && d.Remaining != 10 {
			t.Fatalf("%s: %d left, want 9 or 10: counted twice", k, d.Remaining)
		}
		if d.Remaining == 9 {
			counted[k[0]]++
		}
	}
	if counted['q'] != 0 {
		t.Errorf("%d decisions dropped from the queue were run", counted['q'])
	}
	t.Logf("run once after timing out: first and second %d/2, batched %d/10", counted['f']+counted['s'], counted['b'])
}

// writeCounter is a connection that counts the EVALSHA and FCALL
// commands written on it.
type writeCounter struct {
	net.Conn
	evalsha *atomic.Int64
}

func (c *writeCounter) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		c.evalsha.Add(int64(bytes.Count(b, []byte("$7\r\nevalsha\r\n")) + bytes.Count(b, []byte("$5\r\nfcall\r\n"))))
	}
	return n, err
}
