package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/limitertest"
	"github.com/ratekit/ratekit/internal/limitercheck"
)

// clock.lua's definitions are functionHead's, which a library keeps in
// place of clock.lua (functions.go).
func TestFunctionClock(t *testing.T) {
	var defs []string
	for _, line := range strings.Split(clockLua, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
			defs = append(defs, line)
		}
	}
	want := []string{
		"local floor, ceil, byte = math.floor, math.ceil, string.byte",
		"local bpack, bunpack = struct.pack, struct.unpack",
		"local answer = '>i8i8i8i8i8'",
		"local newset = redis.REDIS_VERSION_NUM ~= nil",
		"local fwi, fwn, fww, fwf, fws",
		"local swi, swn, sww, swf, sws",
	}
	if strings.Join(defs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("clock.lua defines\n%s\nfunctionHead keeps\n%s", strings.Join(defs, "\n"), strings.Join(want, "\n"))
	}
	for _, s := range []string{"floor, ceil, byte = math.floor, math.ceil, string.byte", "bpack, bunpack = struct.pack, struct.unpack",
		"local answer = '>i8i8i8i8i8'", "local newset = true", "local fwi, fwn, fww, fwf, fws", "local swi, swn, sww, swf, sws"} {
		if !strings.Contains(functionHead+functionRun, s) {
			t.Errorf("functionHead lacks %q", s)
		}
	}
	// Every script's library omits clock.lua, and one call's the
	// prelude's arg.
	p := core.Policy{Limit: 10, Window: time.Minute}
	for _, src := range []string{scriptSource(p, 1000), batchSource(p, 1000), layeredSource([]core.Policy{p, p}, 1000)} {
		_, code := libraryOf(src)
		if code = code[strings.Index(code, functionRun)+len(functionRun):]; strings.Contains(code, clockLua) || strings.Contains(code, convertLua) || strings.Contains(code, "local arg = tonumber\n") ||
			strings.Contains(code, batchArg) || strings.Contains(code, versionCheck) {
			t.Errorf("library keeps what functionHead replaces:\n%s", code)
		}
	}
}

// noFunctionUser is the ACL user that scriptsClient logs in as: every
// command but FUNCTION and FCALL.
const noFunctionUser = "ratekit-nofunction"

// scriptsClient returns a client of addr logged in as a user that may not
// load or call functions, as on a managed Redis that disables them: its
// limiters call EVALSHA.
func scriptsClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	admin := newClient(t, addr)
	if err := admin.Do(ctx, "ACL", "SETUSER", noFunctionUser, "reset", "on", ">pw", "~*", "&*", "+@all", "-function", "-fcall", "-fcall_ro").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		Username:              noFunctionUser,
		Password:              "pw",
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// On Redis 7 a limiter calls FCALL, one call per decision, and loads
// nothing more once loaded; a client that may not use functions calls
// EVALSHA.
func TestFunctionsCalled(t *testing.T) {
	addr := singleNode(t)
	admin := newClient(t, addr)
	for _, tc := range []struct {
		name   string
		client *redis.Client
		mode   int32
		verb   string
	}{
		{"functions", newClient(t, addr), modeFunctions, "fcall"},
		{"scripts", scriptsClient(t, addr), modeScripts, "evalsha"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 100, Window: time.Hour}, func(t *testing.T, p core.Policy) {
				l := mustNew(t, tc.client, p, WithPrefix(uniquePrefix(t.Name())), WithBatching(1))
				if got := l.fmode.Load(); got != tc.mode {
					t.Fatalf("mode %d after New, want %d", got, tc.mode)
				}
				if err := admin.ConfigResetStat(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				const decisions = 10
				for i := range decisions {
					if d, err := l.Allow(ctx, fmt.Sprint("k", i%3)); err != nil || !d.Allowed {
						t.Fatalf("decision %d: %+v, %v", i, d, err)
					}
				}
				stats := commandStats(t, admin)
				if stats[tc.verb] != decisions || stats["eval"] != 0 || stats["function|load"] != 0 {
					t.Errorf("server saw %v for %d decisions, want %d %s alone", stats, decisions, decisions, tc.verb)
				}
			})
		})
	}
}

// The conformance suite on a single node through a client that may not use
// functions: the scripts by EVALSHA decide as the functions do.
func TestConformanceScripts(t *testing.T) {
	t.Parallel()
	client := scriptsClient(t, singleNode(t))
	limitertest.Run(t, func(t *testing.T, p core.Policy, clock *core.ManualClock) core.Limiter {
		l := mustNew(t, client, p, WithClock(clock), WithPrefix(uniquePrefix(t.Name())))
		if l.fmode.Load() != modeScripts {
			t.Fatal("the limiter calls functions")
		}
		return l
	})
}

// FUNCTION FLUSH between two requests, and between two batches: the next
// call finds its function missing, loads it, and runs once.
func TestFunctionFlush(t *testing.T) {
	addr := singleNode(t)
	admin := newClient(t, addr)
	for _, batching := range []int{1, 0} {
		t.Run(fmt.Sprint("batching ", batching), func(t *testing.T) {
			client := newClient(t, addr)
			limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 10, Window: time.Hour}, func(t *testing.T, p core.Policy) {
				l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())), WithBatching(batching))
				if d, err := l.AllowN(ctx, "k", 2); err != nil || d.Remaining != 8 {
					t.Fatalf("first request: %+v, %v", d, err)
				}
				if err := admin.FunctionFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				if d, err := l.AllowN(ctx, "k", 3); err != nil || !d.Allowed || d.Remaining != 5 {
					t.Fatalf("after FUNCTION FLUSH: %+v, %v; want allowed with 5 left", d, err)
				}
				if err := admin.FunctionFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				// A batch of several decisions (on a single node, one call
				// of the batch script), whose every decision finds it
				// missing.
				var wg sync.WaitGroup
				for i := range 8 {
					wg.Go(func() {
						if d, err := l.Allow(ctx, fmt.Sprint("b", i)); err != nil || !d.Allowed || d.Remaining != 9 {
							t.Errorf("after FUNCTION FLUSH, key b%d: %+v, %v", i, d, err)
						}
					})
				}
				wg.Wait()
				if err := admin.FunctionFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				if err := l.Refund(ctx, "k", 3, time.Minute); err != nil {
					t.Fatalf("refund after FUNCTION FLUSH: %v", err)
				}
				// (8 left, or for a bucket 7: the server's time has moved on
				// by a fraction of a token.)
				if d, err := l.Peek(ctx, "k", 5); err != nil || !d.Allowed || d.Remaining != 8 && !p.Algorithm.Burstable() || d.Remaining < 7 {
					t.Fatalf("Peek 5 after the refund: %+v, %v; want allowed with 8 left", d, err)
				}
				if got := l.fmode.Load(); got != modeFunctions {
					t.Errorf("mode %d, want functions", got)
				}
			})
		})
	}
}

// FCALL refused while the limiter runs (its user loses FUNCTION and FCALL):
// the call is sent again by EVAL, counted once, and the limiter calls
// EVALSHA from then on.
func TestFunctionRefused(t *testing.T) {
	addr := singleNode(t)
	admin := newClient(t, addr)
	const user = "ratekit-refused"
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 10, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())))
		if d, err := l.AllowN(ctx, "k", 2); err != nil || d.Remaining != 8 || l.fmode.Load() != modeFunctions {
			t.Fatalf("first request: %+v, %v, mode %d", d, err, l.fmode.Load())
		}
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "-function", "-fcall", "-fcall_ro").Err(); err != nil {
			t.Fatal(err)
		}
		if d, err := l.AllowN(ctx, "k", 3); err != nil || !d.Allowed || d.Remaining != 5 {
			t.Fatalf("after FCALL refused: %+v, %v; want allowed with 5 left", d, err)
		}
		if got := l.fmode.Load(); got != modeScripts {
			t.Errorf("mode %d, want scripts", got)
		}
		if d, err := l.Peek(ctx, "k", 5); err != nil || !d.Allowed || d.Remaining != 5 {
			t.Fatalf("Peek 5: %+v, %v; want allowed with 5 left", d, err)
		}
	})
}

// Limiters on FCALL and on EVALSHA over the same keys, one request each in
// turn: they share every count, as one limiter would.
func TestFunctionsAndScriptsAgree(t *testing.T) {
	addr := singleNode(t)
	fnClient, scClient := newClient(t, addr), scriptsClient(t, addr)
	limitercheck.ForEachAlgorithm(t, core.Policy{Name: "mixed", Limit: 10, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		prefix := uniquePrefix(t.Name())
		clock := core.NewManualClock(time.Unix(1_700_000_000, 0))
		mem, err := core.New(p, core.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		ls := []*Limiter{
			mustNew(t, fnClient, p, WithPrefix(prefix), WithClock(clock)),
			mustNew(t, scClient, p, WithPrefix(prefix), WithClock(clock)),
		}
		if ls[0].fmode.Load() != modeFunctions || ls[1].fmode.Load() != modeScripts {
			t.Fatalf("modes %d and %d", ls[0].fmode.Load(), ls[1].fmode.Load())
		}
		for i := range 14 {
			want, _ := mem.AllowN(ctx, "k", 1)
			got, err := ls[i%2].AllowN(ctx, "k", 1)
			if err != nil || got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.ResetAfter != want.ResetAfter || got.RetryAfter != want.RetryAfter {
				t.Fatalf("request %d: %+v, %v; memory %+v", i, got, err, want)
			}
			clock.Advance(time.Minute)
		}
	})
}

// On a Cluster, FUNCTION FLUSH on every master (as a master that never had
// the library would be): each decision, alone or in a batch, loads the
// library on every master and runs once.
func TestClusterFunctionFlush(t *testing.T) {
	addrs := cluster(t)
	client := newClusterClient(t, addrs)
	limitercheck.ForEachAlgorithm(t, core.Policy{Limit: 10, Window: time.Hour}, func(t *testing.T, p core.Policy) {
		l := mustNew(t, client, p, WithPrefix(uniquePrefix(t.Name())))
		if l.fmode.Load() != modeFunctions {
			t.Fatalf("mode %d, want functions", l.fmode.Load())
		}
		for round := range 2 {
			if err := client.ForEachMaster(ctx, func(ctx2 context.Context, m *redis.Client) error { return m.FunctionFlush(ctx2).Err() }); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for i := range 12 {
				wg.Go(func() {
					if d, err := l.Allow(ctx, fmt.Sprint("k", i)); err != nil || !d.Allowed || d.Remaining != int64(9-round) {
						t.Errorf("round %d, key k%d: %+v, %v", round, i, d, err)
					}
				})
			}
			wg.Wait()
		}
	})
}
