package redisstore

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

// Client settings for the outage tests: no retries, and timeouts short
// beside go-redis's defaults (5 s to dial, 3 s to read) yet long enough
// for a loaded machine's round trip.
func outageClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// Redis is stopped mid-run and restarted: every request is decided by the
// fallback within the timeout plus a margin, the hook sees the errors, the
// breaker stops calling Redis, and Redis decides again once it is back.
// The breaker's cool-down runs on a manual clock, so a slow machine cannot
// make it probe early; the margin (a second) tells a decision that waited
// for the timeout from one that waited for go-redis's own seconds.
func TestOutage(t *testing.T) {
	needRedis(t)
	srv, err := servers.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	const (
		timeout  = time.Second
		margin   = time.Second
		coolDown = 300 * time.Millisecond
	)
	p := core.Policy{Limit: 1000, Window: time.Minute}
	remote := mustNew(t, outageClient(t, srv.Addr), p, WithPrefix(uniquePrefix("outage")), WithTimeout(timeout))
	local, _ := core.New(core.Policy{Limit: p.Limit / 4, Window: p.Window})
	var hooked atomic.Int64
	clock := core.NewManualClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	f, err := core.NewFailover(remote, core.WithErrorPolicy(core.Fallback(local)), core.WithBreaker(3, coolDown),
		core.WithErrorHook(func(error) { hooked.Add(1) }), core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	decide := func(phase string) core.Decision {
		t.Helper()
		began := time.Now()
		d, err := f.Allow(ctx, "client")
		if took := time.Since(began); took > timeout+margin {
			t.Errorf("%s: decided in %v, want within the %v timeout", phase, took, timeout)
		}
		if err != nil || !d.Allowed {
			t.Fatalf("%s: %+v, %v; want allowed", phase, d, err)
		}
		return d
	}
	for range 5 {
		if d := decide("up"); d.Limit != p.Limit {
			t.Fatalf("Redis up: decided by limit %d, want Redis's %d", d.Limit, p.Limit)
		}
	}
	srv.Stop()
	var remoteDecisions int
	for range 20 {
		if decide("down").Limit == p.Limit {
			remoteDecisions++
		}
	}
	if remoteDecisions != 0 {
		t.Errorf("%d decisions from Redis while it was down", remoteDecisions)
	}
	if got := hooked.Load(); got != 3 {
		t.Errorf("hook called %d times, want 3 (then the breaker opened)", got)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The breaker probes Redis again after its cool-down: a bounded wait.
	deadline := time.Now().Add(10 * time.Second)
	for {
		clock.Advance(coolDown)
		if decide("restarted").Limit == p.Limit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis back, but the failover still falls back after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 5 {
		if d := decide("resumed"); d.Limit != p.Limit {
			t.Fatalf("resumed: %+v", d)
		}
	}
}

// A Redis that accepts connections and never answers: each request waits
// at most the timeout (and a second's margin for a loaded machine), then
// the breaker stops calling Redis at all: the client sends two scripts in
// all. Fail closed and fail open decide by their Decision.
func TestUnresponsiveRedis(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		l.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	const timeout = 50 * time.Millisecond
	p := core.Policy{Limit: 10, Window: time.Second}
	for _, mode := range []struct {
		name    string
		opt     core.FailoverOption
		allowed bool
	}{{"closed", core.WithErrorPolicy(core.FailClosed()), false}, {"open", core.WithErrorPolicy(core.FailOpen()), true}} {
		t.Run(mode.name, func(t *testing.T) {
			client := outageClient(t, l.Addr().String())
			hook := &pipeHook{}
			client.AddHook(hook)
			remote := mustNew(t, client, p, WithTimeout(timeout))
			var errs []error
			f, err := core.NewFailover(remote, mode.opt, core.WithBreaker(2, time.Minute),
				core.WithErrorHook(func(err error) { errs = append(errs, err) }))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				began := time.Now()
				d, err := f.Allow(ctx, "k")
				took := time.Since(began)
				var u *core.UnavailableError
				if mode.allowed && (err != nil || !d.Allowed) || !mode.allowed && (!errors.As(err, &u) || u.RetryAfter <= 0 || d.Allowed) {
					t.Fatalf("request %d: %+v, %v; want allowed=%v (failing closed, an UnavailableError saying when to retry)", i, d, err, mode.allowed)
				}
				if took > timeout+time.Second {
					t.Errorf("request %d took %v, timeout %v", i, took, timeout)
				}
			}
			if n := hook.scripts.Load(); n != 2 {
				t.Errorf("%d scripts sent for 10 requests, want 2 (then the breaker opens)", n)
			}
			if len(errs) != 2 {
				t.Fatalf("hook called %d times, want 2", len(errs))
			}
			var ne net.Error
			if !errors.As(errs[0], &ne) || !ne.Timeout() {
				t.Logf("hook error: %v", errs[0])
			}
		})
	}
}
