package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

// The batch script (batch.lua) decides as the policy's own script would,
// one call per decision: these tests send batches to it directly, through
// the batcher's send, so that what shares a call does not depend on
// timing.

// fixedWindowCount returns the count of a fixed window's state v, packed
// as fixedwindow.lua stores it ('>i8i8': the window's index, the count).
func fixedWindowCount(v string) (int64, error) {
	if len(v) != 16 {
		return 0, fmt.Errorf("a fixed window's state of %d bytes, want 16", len(v))
	}
	return be64(v[8:]), nil
}

// batchReq is one decision of a batch: its key, cost, and whether it
// counts (AllowN) or not (Peek), made at the limiter's clock's time when
// the batch is built.
type batchReq struct {
	key    string
	n      int64
	commit bool
}

// sendBatch makes reqs in one batch of l, each read at the time of at(i)
// (which may advance l's clock), and returns the decisions and errors.
func sendBatch(t *testing.T, l *Limiter, reqs []batchReq, at func(i int)) ([]core.Decision, []error) {
	t.Helper()
	ctx := context.Background()
	batch := make([]*waiter, len(reqs))
	for i, r := range reqs {
		if at != nil {
			at(i)
		}
		now, err := l.now()
		if err != nil {
			t.Fatal(err)
		}
		c := l.call(ctx, r.key, now, r.n, r.commit)
		batch[i] = &waiter{ctx: ctx, cmd: &c.cmd}
	}
	l.batch.send(batch)
	ds := make([]core.Decision, len(reqs))
	errs := make([]error, len(reqs))
	for i, w := range batch {
		ds[i], errs[i] = l.decision(w.cmd, w.cmd.Err())
	}
	return ds, errs
}

// scriptCalls returns the script calls the server saw since the last
// CONFIG RESETSTAT.
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	s := commandStats(t, c)
	return s["evalsha"] + s["fcall"] + s["eval"]
}

// Random batches of decisions over a few keys (each key often more than
// once in a batch), Peeks and AllowN mixed, the clock moving between them
// and now and then backwards: every decision equals the memory store's
// making the same calls in the batch's order.
func TestBatchScriptSameDecisionsAsMemory(t *testing.T) {
	addr := singleNode(t)
	t.Run("single", func(t *testing.T) {
		client := newClient(t, addr)
		batchParity(t, client, []string{"a", "b", "c"})
	})
	t.Run("cluster", func(t *testing.T) {
		// Keys in different slots (and "{x}" twice in one): a call per slot.
		batchParity(t, newClusterClient(t, cluster(t)), []string{"alice", "bob", "carol", "dave", "{x}"})
	})
}

func batchParity(t *testing.T, client redis.UniversalClient, keys []string) {
	ctx := context.Background()
	for _, base := range parityPolicies {
		for _, a := range core.Algorithms() {
			p := base
			p.Algorithm = a
			if !a.Burstable() {
				p.Burst = 0
			}
			t.Run(p.String(), func(t *testing.T) {
				start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
				mc, rc := core.NewManualClock(start), core.NewManualClock(start)
				mem, err := core.New(p, core.WithClock(mc))
				if err != nil {
					t.Fatal(err)
				}
				red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
				if red.multi == noMulti {
					t.Fatalf("no batch script for %T", client)
				}
				rng := rand.New(rand.NewPCG(uint64(p.Limit), uint64(p.Algorithm)))
				W := int64(p.Window / time.Microsecond)
				step := max(W/p.Limit, 1)
				for b := range 40 {
					reqs := make([]batchReq, 2+rng.IntN(12))
					dts := make([]time.Duration, len(reqs))
					for i := range reqs {
						n := 1 + rng.Int64N(min(p.Capacity(), 3))
						if rng.IntN(4) == 0 {
							n = 1 + rng.Int64N(p.Capacity())
						}
						reqs[i] = batchReq{key: keys[rng.IntN(len(keys))], n: n, commit: rng.IntN(4) != 0}
						switch r := rng.IntN(20); {
						case r == 0:
							dts[i] = -time.Duration(rng.Int64N(2*W)+1) * time.Microsecond
						case r == 1:
							dts[i] = time.Duration(rng.Int64N(3*W)) * time.Microsecond
						case r < 10:
							dts[i] = 0
						default:
							dts[i] = time.Duration(rng.Int64N(2*step+2))*time.Microsecond + time.Duration(rng.IntN(1000))
						}
						if mc.Now().Add(dts[i]).After(start.AddDate(100, 0, 0)) {
							dts[i] = 0
						}
					}
					var want []core.Decision
					for i, r := range reqs {
						mc.Advance(dts[i])
						var d core.Decision
						var err error
						if r.commit {
							d, err = mem.AllowN(ctx, r.key, r.n)
						} else {
							d, err = mem.Peek(ctx, r.key, r.n)
						}
						if err != nil {
							t.Fatal(err)
						}
						want = append(want, d)
					}
					got, errs := sendBatch(t, red, reqs, func(i int) { rc.Advance(dts[i]) })
					for i := range reqs {
						if errs[i] != nil {
							t.Fatalf("batch %d, decision %d: %v", b, i, errs[i])
						}
						if got[i] != want[i] {
							t.Fatalf("batch %d, decision %d (%+v, at %v):\nmemory %+v\n redis %+v", b, i, reqs[i], mc.Now().Sub(start), want[i], got[i])
						}
					}
				}
			})
		}
	}
}

// A batch on one node is one script call; on a Cluster, one per slot.
func TestBatchScriptOneCallPerSlot(t *testing.T) {
	p := core.Policy{Limit: 100, Window: time.Minute}
	reqs := []batchReq{{"a", 1, true}, {"b", 1, true}, {"a", 2, false}, {"c", 1, true}, {"b", 1, true}}
	t.Run("single", func(t *testing.T) {
		addr := singleNode(t)
		admin := newClient(t, addr)
		l := mustNew(t, newClient(t, addr), p, WithPrefix(uniquePrefix(t.Name())))
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		_, errs := sendBatch(t, l, reqs, nil)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if got := scriptCalls(t, admin); got != 1 {
			t.Errorf("%d script calls for a batch of %d, want 1", got, len(reqs))
		}
	})
	t.Run("cluster", func(t *testing.T) {
		addrs := cluster(t)
		client := newClusterClient(t, addrs)
		l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())))
		slots := map[int]bool{}
		for _, r := range reqs {
			k := l.key(r.key)
			slots[keySlot(k[len(l.prefix):len(k)-1])] = true
		}
		var admins []*redis.Client
		for _, a := range addrs {
			c := newClient(t, a)
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			admins = append(admins, c)
		}
		_, errs := sendBatch(t, l, reqs, nil)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		var calls int64
		for _, c := range admins {
			calls += scriptCalls(t, c)
		}
		if calls != int64(len(slots)) {
			t.Errorf("%d script calls for a batch over %d slots, want one per slot", calls, len(slots))
		}
	})
}

// A decision that fails in a batch (its key holds another type, or a state
// the script cannot read) fails alone, with Redis's error; the others are
// made as single calls would make them.
func TestBatchScriptOneKeyFails(t *testing.T) {
	addr := singleNode(t)
	client := newClient(t, addr)
	for _, a := range core.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			p := core.Policy{Algorithm: a, Limit: 5, Window: time.Minute}
			start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			mc, rc := core.NewManualClock(start), core.NewManualClock(start)
			mem, _ := core.New(p, core.WithClock(mc))
			l := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			if err := client.LPush(ctx, l.key("list"), "x").Err(); err != nil {
				t.Fatal(err)
			}
			single := mustNew(t, client, p, WithClock(rc), WithPrefix(l.prefix[:strings.IndexByte(l.prefix, ':')]), WithBatching(1))
			for _, k := range []string{"junk", "junk2"} {
				if err := client.Set(ctx, l.key(k), "not a state", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			reqs := []batchReq{{"a", 1, true}, {"list", 1, true}, {"a", 2, true}, {"junk", 1, true}, {"a", 3, true}, {"b", 1, false}}
			got, errs := sendBatch(t, l, reqs, nil)
			for i, r := range reqs {
				switch r.key {
				case "list":
					if errs[i] == nil || !strings.Contains(errs[i].Error(), "WRONGTYPE") {
						t.Errorf("decision %d on a list: %v, want WRONGTYPE", i, errs[i])
					}
				case "junk":
					// As the single script answers on such a state (the
					// sliding log reads a string too short as no log).
					_, err := single.AllowN(ctx, "junk2", 1)
					if (errs[i] == nil) != (err == nil) {
						t.Errorf("decision %d on a state it cannot read: %v; alone: %v", i, errs[i], err)
					}
				default:
					var want core.Decision
					if r.commit {
						want, _ = mem.AllowN(ctx, r.key, r.n)
					} else {
						want, _ = mem.Peek(ctx, r.key, r.n)
					}
					if errs[i] != nil || got[i] != want {
						t.Errorf("decision %d (%+v): %+v, %v; want %+v", i, r, got[i], errs[i], want)
					}
				}
			}
			a, _ := client.Get(ctx, l.key("junk")).Result()
			b, _ := client.Get(ctx, l.key("junk2")).Result()
			if a != b {
				t.Errorf("the unreadable state became %q in a batch, %q alone", a, b)
			}
		})
	}
}

// On the server's TIME, a batch reads TIME once and decides each key as
// the single script does; the decisions of one key follow each other.
func TestBatchScriptServerTime(t *testing.T) {
	client := newClient(t, singleNode(t))
	for _, a := range core.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			p := core.Policy{Algorithm: a, Limit: 3, Window: time.Hour}
			l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())))
			reqs := []batchReq{{"k", 1, true}, {"k", 1, false}, {"k", 2, true}, {"k", 1, true}, {"j", 3, true}}
			got, errs := sendBatch(t, l, reqs, nil)
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			want := []struct {
				allowed   bool
				remaining int64
			}{{true, 2}, {true, 2}, {true, 0}, {false, 0}, {true, 0}}
			for i, w := range want {
				if got[i].Allowed != w.allowed || got[i].Remaining != w.remaining {
					t.Errorf("decision %d: %+v, want allowed %v remaining %d", i, got[i], w.allowed, w.remaining)
				}
			}
			if got[3].RetryAfter <= 0 {
				t.Errorf("denied with RetryAfter %v", got[3].RetryAfter)
			}
		})
	}
}

// A batch whose script the server lost (SCRIPT FLUSH) is sent again as
// EVAL, once, and decides every key once.
func TestBatchScriptNoScript(t *testing.T) {
	addr := singleNode(t)
	client := scriptsClient(t, addr) // EVALSHA (functions_test.go)
	admin := newClient(t, addr)
	p := core.Policy{Limit: 10, Window: time.Hour, Algorithm: core.FixedWindow}
	l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())))
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := []batchReq{{"a", 1, true}, {"b", 2, true}, {"a", 3, true}}
	got, errs := sendBatch(t, l, reqs, nil)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{9, 8, 6} {
		if got[i].Remaining != want {
			t.Errorf("decision %d: remaining %d, want %d", i, got[i].Remaining, want)
		}
	}
	for k, want := range map[string]int64{"a": 6, "b": 8} {
		d, err := l.Peek(ctx, k, 1)
		if err != nil || d.Remaining != want {
			t.Errorf("%s: %+v, %v; want remaining %d", k, d, err, want)
		}
	}
}
