package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redisserver"
)

// margin is what the slowest decision may take beyond RemoteTimeout: the
// documented bound is RemoteTimeout plus 100 ms on a loaded 2-CPU machine.
const margin = 100 * time.Millisecond

// config returns the run's settings: the short form with -short (each row
// about 2 s), the long form otherwise.
func config() Config {
	if testing.Short() {
		return Config{}
	}
	return Config{Warm: 2 * time.Second, Fault: 10 * time.Second, After: 2 * time.Second}
}

// setup starts a redis-server (with extra configuration), a proxy in front
// of it and an admin client straight to it, all stopped when t ends.
func setup(t *testing.T, extra ...string) (*redisserver.Server, *Proxy, *redis.Client) {
	t.Helper()
	redisserver.Need(t)
	s, err := redisserver.Start(t.TempDir(), extra...)
	if s != nil {
		t.Cleanup(s.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	admin := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { admin.Close() })
	return s, p, admin
}

// run drives fault on the single node at addr; see runClients.
func run(t *testing.T, addr string, cfg Config, fault Fault) (closed, fallback Report) {
	t.Helper()
	return runClients(t, Node(addr), cfg, fault)
}

// runClients drives fault on clients made by newClient and logs each
// mode's report; it fails t on an error or when a decision took longer
// than RemoteTimeout plus margin, or returned an error to the caller, or
// when Redis did not decide again on every key after the fault.
func runClients(t *testing.T, newClient NewClient, cfg Config, fault Fault) (closed, fallback Report) {
	t.Helper()
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reps, err := RunClients(ctx, newClient, cfg, fault)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		t.Log(r)
		if r.FirstStoreError != "" {
			t.Logf("%s: first store error: %s", r.Mode, r.FirstStoreError)
		}
		if r.Errors != 0 {
			t.Errorf("%s: %d errors reached the caller, want 0", r.Mode, r.Errors)
		}
		if r.Slowest > cfg.RemoteTimeout+margin {
			t.Errorf("%s: slowest decision %v, want at most RemoteTimeout %v + %v", r.Mode, r.Slowest, cfg.RemoteTimeout, margin)
		}
		if !r.Recovered {
			t.Errorf("%s: Redis did not decide again on every key of every instance after the fault", r.Mode)
		}
		if r.ByRedis == 0 {
			t.Errorf("%s: no decision by Redis", r.Mode)
		}
	}
	return reps[0], reps[1]
}

// checkBreaker checks that the breakers opened during the fault, that every
// one closed again, and that Redis decided again within the cool-down plus
// a margin.
func checkBreaker(t *testing.T, rs ...Report) {
	t.Helper()
	cfg := config().withDefaults()
	for _, r := range rs {
		if r.BreakerOpened == 0 {
			t.Errorf("%s: the breaker never opened", r.Mode)
		}
		if r.BreakerClosed != r.BreakerOpened {
			t.Errorf("%s: breaker opened %d times, closed %d: want every one closed", r.Mode, r.BreakerOpened, r.BreakerClosed)
		}
		if r.Recovery > cfg.CoolDown+time.Second {
			t.Errorf("%s: Redis decided again %v after the fault, want at most the cool-down %v + 1s", r.Mode, r.Recovery, cfg.CoolDown)
		}
		if r.DuringFault < 0.5 {
			t.Errorf("%s: the failure mode made %.0f%% of the decisions during the fault, want most", r.Mode, 100*r.DuringFault)
		}
	}
}

// checkNoOverAdmission checks the fail-closed mode admitted nothing above
// the limit, and that the fallback admitted at most the limit from Redis and
// the local shares (the limit again) in one window.
func checkNoOverAdmission(t *testing.T, closed, fallback Report) {
	t.Helper()
	limit := config().withDefaults().Limit
	if closed.OverAdmitted != 0 {
		t.Errorf("fail-closed: over-admitted %d units, want 0", closed.OverAdmitted)
	}
	if fallback.WorstWindow > 2*limit {
		t.Errorf("fallback: %d units in one window, want at most 2×%d", fallback.WorstWindow, limit)
	}
}

func TestLatency(t *testing.T) {
	for _, d := range []time.Duration{5 * time.Millisecond, 50 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			_, p, _ := setup(t)
			closed, fallback := run(t, p.Addr(), config(), Fault{
				Name:   fmt.Sprintf("latency +%v", d),
				Inject: func(context.Context) error { p.SetDelay(d); return nil },
				Heal:   func(context.Context) error { p.Heal(); return nil },
			})
			checkNoOverAdmission(t, closed, fallback)
			if d == 5*time.Millisecond {
				for _, r := range []Report{closed, fallback} {
					if r.DuringFault > 0.05 {
						t.Errorf("%s: the failure mode made %.0f%% of the decisions during +5ms, want under 5%%", r.Mode, 100*r.DuringFault)
					}
				}
			}
		})
	}
}

func TestStall(t *testing.T) {
	_, p, _ := setup(t)
	closed, fallback := run(t, p.Addr(), config(), Fault{
		Name:   "stall",
		Inject: func(context.Context) error { p.Stall(); return nil },
		Heal:   func(context.Context) error { p.Heal(); return nil },
	})
	checkBreaker(t, closed, fallback)
	checkNoOverAdmission(t, closed, fallback)
}

func TestReset(t *testing.T) {
	_, p, _ := setup(t)
	closed, fallback := run(t, p.Addr(), config(), Fault{
		Name:   "reset",
		Inject: func(context.Context) error { p.Reset(); return nil },
		Heal:   func(context.Context) error { p.Heal(); return nil },
	})
	checkBreaker(t, closed, fallback)
	checkNoOverAdmission(t, closed, fallback)
}

// fill writes n filler keys of size bytes each.
func fill(ctx context.Context, c *redis.Client, from, n, size int) error {
	v := strings.Repeat("x", size)
	for i := from; i < from+n; i += 100 {
		pipe := c.Pipeline()
		for j := i; j < min(i+100, from+n); j++ {
			pipe.Set(ctx, fmt.Sprintf("filler:%d", j), v, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	return nil
}

// fullRedis returns a fault that fills Redis past maxmemory with policy,
// and a heal that lifts the limit and drops the filler.
func fullRedis(admin *redis.Client, policy string) Fault {
	return Fault{
		Name: "maxmemory " + policy,
		Inject: func(ctx context.Context) error {
			if err := fill(ctx, admin, 0, 2000, 1000); err != nil {
				return err
			}
			used, err := usedMemory(ctx, admin)
			if err != nil {
				return err
			}
			if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
				return err
			}
			return admin.ConfigSet(ctx, "maxmemory", fmt.Sprint(used-256<<10)).Err()
		},
		Heal: func(ctx context.Context) error {
			if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
				return err
			}
			return admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err()
		},
	}
}

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	var used int64
	if _, err := fmt.Sscan(info["Memory"]["used_memory"], &used); err != nil {
		return 0, fmt.Errorf("used_memory: %w", err)
	}
	return used, nil
}

func TestMaxmemoryNoeviction(t *testing.T) {
	_, p, admin := setup(t)
	closed, fallback := run(t, p.Addr(), config(), fullRedis(admin, "noeviction"))
	checkNoOverAdmission(t, closed, fallback)
	for _, r := range []Report{closed, fallback} {
		if r.DuringFault < 0.5 {
			t.Errorf("%s: the failure mode made %.0f%% of the decisions with Redis full, want most", r.Mode, 100*r.DuringFault)
		}
	}
}

func TestMaxmemoryAllkeysLRU(t *testing.T) {
	_, p, admin := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cache traffic keeps writing while Redis is full, so every write evicts.
	fault := fullRedis(admin, "allkeys-lru")
	inject, heal := fault.Inject, fault.Heal
	done := make(chan struct{})
	fault.Inject = func(ictx context.Context) error {
		if err := inject(ictx); err != nil {
			return err
		}
		go func() {
			defer close(done)
			for i := 2000; ctx.Err() == nil; i += 100 {
				fill(ctx, admin, i, 100, 1000)
				time.Sleep(5 * time.Millisecond)
			}
		}()
		return nil
	}
	fault.Heal = func(hctx context.Context) error {
		cancel()
		<-done
		return heal(hctx)
	}
	closed, fallback := run(t, p.Addr(), config(), fault)
	_, _ = closed, fallback // evicted limiter keys over-admit without bound: measured, not bounded
	stats, err := admin.InfoMap(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("evicted_keys: %s", stats["Stats"]["evicted_keys"])
}

// TestRestart stops Redis for 200 ms and starts it again, empty, within one
// 2 s window: every key starts fresh, so the window of the restart may admit
// up to the limit again per key from Redis, and the fallback's local shares on
// top of it.
func TestRestart(t *testing.T) {
	s, p, _ := setup(t)
	cfg := config()
	cfg.Window, cfg.Warm, cfg.Fault, cfg.After = 2*time.Second, 300*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond
	closed, fallback := run(t, p.Addr(), cfg, Fault{
		Name:   "restart, no persistence",
		Inject: func(context.Context) error { s.Stop(); return nil },
		Heal:   func(context.Context) error { return s.Start() },
	})
	checkBreaker(t, closed, fallback)
	limit := cfg.withDefaults().Limit
	if closed.WorstWindow > 2*limit {
		t.Errorf("fail-closed: %d units in one window, want at most 2×%d (Redis before and after)", closed.WorstWindow, limit)
	}
	if fallback.WorstWindow > 3*limit {
		t.Errorf("fallback: %d units in one window, want at most 3×%d (Redis before and after, the local shares)", fallback.WorstWindow, limit)
	}
}

func TestScriptFlush(t *testing.T) {
	_, p, admin := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	closed, fallback := run(t, p.Addr(), config(), Fault{
		Name: "SCRIPT FLUSH every 50 ms",
		Inject: func(context.Context) error {
			go func() {
				defer close(done)
				for ctx.Err() == nil {
					admin.ScriptFlush(ctx)
					time.Sleep(50 * time.Millisecond)
				}
			}()
			return nil
		},
		Heal: func(context.Context) error { cancel(); <-done; return nil },
	})
	checkNoOverAdmission(t, closed, fallback)
	for _, r := range []Report{closed, fallback} {
		if r.StoreErrors != 0 || r.ByFailureMode != 0 {
			t.Errorf("%s: %d store errors, %d decisions by the failure mode, want 0", r.Mode, r.StoreErrors, r.ByFailureMode)
		}
	}
}
