package redisstore

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/redis/go-redis/v9"
)

// A refund writes no key without an expiry, and creates none: refunds of
// keys never seen leave Redis empty; after requests and refunds, every key
// has an expiry; with no expiry margin, a state refunded back to fresh
// does not linger.
func TestRefundKeysExpiry(t *testing.T) {
	client := newClient(t, singleNode(t))
	ttls := func(t *testing.T, prefix string) int {
		t.Helper()
		keys := scanKeys(t, client, prefix+":*")
		for _, k := range keys {
			if ttl, err := client.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
				t.Errorf("key %s: PTTL %v, %v; want an expiry", k, ttl, err)
			}
		}
		return len(keys)
	}
	start := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 4, Window: time.Minute}, func(t *testing.T, p core.Policy) {
		for _, margin := range []time.Duration{DefaultExpiryMargin, 0} {
			prefix := uniquePrefix(t.Name())
			clock := core.NewManualClock(start)
			l := mustNew(t, client, p, WithPrefix(prefix), WithClock(clock), WithExpiryMargin(margin))
			ll := mustLayered(t, client, []core.Policy{p, {Name: "day", Limit: 100, Window: 24 * time.Hour}},
				WithPrefix(prefix), WithClock(clock), WithExpiryMargin(margin))
			for _, r := range []core.Refunder{l, ll} {
				for _, elapsed := range []time.Duration{0, time.Second, time.Hour, math.MaxInt64} {
					if err := r.Refund(ctx, "never-seen", 1, elapsed); err != nil {
						t.Fatal(err)
					}
				}
			}
			if n := ttls(t, prefix); n != 0 {
				t.Fatalf("margin %v: refunds of a key never seen left %d keys", margin, n)
			}
			// Requests and refunds, partial and whole, with the clock moving.
			for i := range 12 {
				key := fmt.Sprint("k", i%3)
				if _, err := l.AllowN(ctx, key, 1+int64(i%2)); err != nil {
					t.Fatal(err)
				}
				if _, err := ll.AllowN(ctx, key+"-layered", 1); err != nil {
					t.Fatal(err)
				}
				clock.Advance(time.Duration(i) * time.Second)
				if err := l.Refund(ctx, key, 1+int64(i%3), time.Duration(i)*time.Second); err != nil {
					t.Fatal(err)
				}
				if err := ll.Refund(ctx, key+"-layered", 1, time.Duration(i)*time.Second); err != nil {
					t.Fatal(err)
				}
				ttls(t, prefix)
			}
			// Back to fresh: with no margin, nothing is left.
			if err := l.Reset(ctx, "fresh"); err != nil {
				t.Fatal(err)
			}
			if _, err := l.AllowN(ctx, "fresh", p.Capacity()); err != nil {
				t.Fatal(err)
			}
			if err := l.Refund(ctx, "fresh", p.Capacity(), 0); err != nil {
				t.Fatal(err)
			}
			ttls(t, prefix)
			if fresh := scanKeys(t, client, prefix+":*{fresh}*"); margin == 0 && len(fresh) > 0 {
				t.Errorf("margin 0: a key refunded to fresh left %q", fresh)
			}
			if d, err := l.Peek(ctx, "fresh", p.Capacity()); err != nil || !d.Allowed {
				t.Errorf("margin %v: after a whole refund: %+v, %v; want the capacity allowed", margin, d, err)
			}
		}
	})
}

// With the server's TIME, a request taken and given back right away
// leaves the key with its whole capacity, but for the refill of the
// elapsed time in a bucket. elapsed is measured from before AllowN, on
// this process's clock, and applied at the time the refund's script runs,
// later by its trip to Redis, which the limiter adds (see
// Limiter.Refund): without it, a sliding log missed its entry in about
// half of these. The windows are a year long, so that no boundary falls
// between the two calls.
func TestRefundServerTime(t *testing.T) {
	client := newClient(t, singleNode(t))
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 1000, Window: core.MaxWindow}, func(t *testing.T, p core.Policy) {
		l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())))
		missed := 0
		for i := range 200 {
			key := fmt.Sprint("k", i)
			began := time.Now()
			if d, err := l.AllowN(ctx, key, 7); err != nil || !d.Allowed {
				t.Fatalf("AllowN: %+v, %v", d, err)
			}
			if err := l.Refund(ctx, key, 7, time.Since(began)); err != nil {
				t.Fatal(err)
			}
			d, err := l.Peek(ctx, key, p.Capacity())
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed && (!p.Algorithm.Burstable() || d.RetryAfter > 50*time.Millisecond) {
				missed++
				t.Logf("refund %d: after it %+v; want the whole capacity allowed, or within 50 ms for a bucket", i, d)
			}
		}
		// A trip slower than the allowance can still miss (a scheduler's
		// pause): a few in 200 under load, about 100 without it.
		if missed > 10 {
			t.Errorf("%d of 200 refunds missed their units", missed)
		}
	})
}

// A refund is one command, EVALSHA; after SCRIPT FLUSH it runs as EVAL,
// once; with batching too.
func TestRefundScriptFlush(t *testing.T) {
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 10, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		for _, batching := range []bool{false, true} {
			client := scriptsClient(t, singleNode(t)) // EVALSHA (functions_test.go)
			var sent atomic.Int64
			client.AddHook(countHook{&sent})
			prefix := uniquePrefix(t.Name())
			clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			opts := []Option{WithPrefix(prefix), WithClock(clock)}
			if batching {
				opts = append(opts, WithBatching(0))
			}
			l := mustNew(t, client, p, opts...)
			ll := mustLayered(t, client, []core.Policy{p, {Name: "day", Limit: 100, Window: 24 * time.Hour}},
				append(opts, WithPrefix(prefix+"-layered"))...)
			for _, r := range []core.Refunder{l, ll} {
				if d, err := r.AllowN(ctx, "k", 10); err != nil || d.Remaining != 0 {
					t.Fatalf("%T: first request: %+v, %v", r, d, err)
				}
				sent.Store(0)
				if err := r.Refund(ctx, "k", 4, 0); err != nil {
					t.Fatal(err)
				}
				if n := sent.Load(); n != 1 {
					t.Errorf("%T: a refund sent %d commands, want 1", r, n)
				}
				if err := client.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				sent.Store(0)
				if err := r.Refund(ctx, "k", 3, 0); err != nil {
					t.Fatalf("%T: refund after SCRIPT FLUSH: %v", r, err)
				}
				if n := sent.Load(); n != 2 {
					t.Errorf("%T: a refund after SCRIPT FLUSH sent %d commands, want 2 (EVALSHA, then EVAL)", r, n)
				}
				if d, err := r.Peek(ctx, "k", 7); err != nil || !d.Allowed || d.Remaining != 7 {
					t.Errorf("%T: Peek 7 after refunds of 4 and 3: %+v, %v; want allowed with 7 left", r, d, err)
				}
			}
		}
	})
}

// Refunds on a Cluster: every algorithm, one key per caller; a layered
// refund with keys on different
// slots is refused before anything is sent.
func TestRefundCluster(t *testing.T) {
	client := newClusterClient(t, cluster(t))
	users := []string{"alice", "{bob}", "c}a{rol", "dave%7B"}
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 5, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		prefix := uniquePrefix(t.Name())
		clock := core.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		l := mustNew(t, client, p, WithPrefix(prefix), WithClock(clock))
		ll := mustLayered(t, client, []core.Policy{p, {Name: "day", Algorithm: core.SlidingLog, Limit: 50, Window: 24 * time.Hour}},
			WithPrefix(prefix+"-layered"), WithClock(clock))
		for _, r := range []core.Refunder{l, ll} {
			for _, u := range users {
				if d, err := r.AllowN(ctx, u, 5); err != nil || d.Remaining != 0 {
					t.Fatalf("%T %q: %+v, %v", r, u, d, err)
				}
				if err := r.Refund(ctx, u, 2, 0); err != nil {
					t.Fatalf("%T %q: %v", r, u, err)
				}
				if d, err := r.Peek(ctx, u, 2); err != nil || !d.Allowed || d.Remaining != 2 {
					t.Errorf("%T %q: Peek 2 after a refund of 2: %+v, %v; want allowed with 2 left", r, u, d, err)
				}
			}
		}
		var other string
		for i := 0; other == ""; i++ {
			if k := fmt.Sprint("ip-", i); keySlot(k) != keySlot("alice") {
				other = k
			}
		}
		if err := ll.RefundKeys(ctx, []string{"alice", other}, 1, 0); !errors.Is(err, ErrCrossSlot) {
			t.Errorf("RefundKeys across slots: %v, want ErrCrossSlot", err)
		}
	})
}

// Bad arguments fail before anything is sent, with the package's prefix,
// and give nothing back.
func TestRefundErrors(t *testing.T) {
	client, sent := countedClient(t)
	p := core.Policy{Limit: 3, Window: time.Minute}
	l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())))
	ll := mustLayered(t, client, []core.Policy{{Name: "big", Limit: 10, Window: time.Minute}, p}, WithPrefix(uniquePrefix(t.Name())))
	for _, r := range []core.Refunder{l, ll} {
		if _, err := r.AllowN(ctx, "k", 3); err != nil {
			t.Fatal(err)
		}
	}
	sent.Store(0)
	for _, tt := range []struct {
		key     string
		n       int64
		elapsed time.Duration
		want    error
		says    string
	}{
		{"", 1, 0, core.ErrEmptyKey, ""},
		{"k", 0, 0, core.ErrInvalidCost, "cost 0"},
		{"k", -5, 0, core.ErrInvalidCost, "cost -5"},
		{"k", 4, 0, core.ErrCostTooHigh, "at most 3"},
		{"k", 1, -time.Microsecond, core.ErrInvalidElapsed, "elapsed -1µs"},
	} {
		for _, r := range []core.Refunder{l, ll} {
			err := r.Refund(ctx, tt.key, tt.n, tt.elapsed)
			if !errors.Is(err, tt.want) || !strings.HasPrefix(err.Error(), "redisstore: ") || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("%T: Refund(%q, %d, %v) = %v, want a redisstore error saying %q, wrapping %v", r, tt.key, tt.n, tt.elapsed, err, tt.says, tt.want)
			}
		}
	}
	if err := ll.Refund(ctx, "k", 4, 0); err == nil || !strings.Contains(err.Error(), "layer 1") {
		t.Errorf("layered cost too high: %v, want it to name layer 1", err)
	}
	if err := ll.RefundKeys(ctx, []string{"a", "b", "c"}, 1, 0); err == nil {
		t.Error("RefundKeys with 3 keys for 2 layers: no error")
	}
	if err := ll.RefundKeys(ctx, []string{"a", ""}, 1, 0); !errors.Is(err, core.ErrEmptyKey) {
		t.Errorf("RefundKeys with an empty key: %v, want ErrEmptyKey", err)
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("refunds with bad arguments sent %d scripts, want 0", n)
	}
	for _, r := range []core.Refunder{l, ll} {
		if d, err := r.Peek(ctx, "k", 1); err != nil || d.Allowed {
			t.Errorf("%T: after refunds that failed: %+v, %v; want denied", r, d, err)
		}
	}

	// A broken Redis: the error is wrapped.
	nowhere := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer nowhere.Close()
	for _, r := range []core.Refunder{mustNew(t, nowhere, p), mustLayered(t, nowhere, []core.Policy{p})} {
		if err := r.Refund(ctx, "k", 1, 0); err == nil || !strings.HasPrefix(err.Error(), "redisstore: eval: ") {
			t.Errorf("%T on a closed port: %v, want a wrapped eval error", r, err)
		}
	}
}
