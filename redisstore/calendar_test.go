package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // the zones, on a machine without a zone database

	"github.com/ratekit/ratekit/core"
)

// The same random traffic, refunds and clock steps back on the memory
// store and on Redis, both on a manual clock, across month ends, leap
// days and both daylight saving changes: every Decision must be equal.
func TestCalendarSameAsMemory(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	for _, tc := range []struct {
		policy string
		start  time.Time
	}{
		{"3/1d tz=Europe/Berlin", time.Date(2026, 3, 28, 20, 0, 0, 0, time.UTC)},
		{"3/1d tz=America/New_York", time.Date(2026, 10, 31, 1, 0, 0, 0, time.UTC)},
		{"5/1w tz=Europe/Berlin", time.Date(2026, 3, 27, 0, 0, 0, 0, time.UTC)},
		{"7/1mo tz=Europe/Berlin", time.Date(2028, 2, 20, 0, 0, 0, 0, time.UTC)},
		{"4/1mo", time.Date(2026, 12, 25, 0, 0, 0, 0, time.UTC)},
		{"2/1d tz=America/Sao_Paulo", time.Date(2018, 11, 3, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			p, err := core.ParsePolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			mc, rc := core.NewManualClock(tc.start), core.NewManualClock(tc.start)
			mem, err := core.New(p, core.WithClock(mc))
			if err != nil {
				t.Fatal(err)
			}
			red, err := New(client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(p.Limit), uint64(p.Calendar)))
			step := p.Window / time.Duration(2*p.Limit)
			for i := range 300 {
				var dt time.Duration
				switch r := rng.IntN(20); {
				case r == 0:
					dt = -time.Duration(rng.Int64N(int64(p.Window)))
				case r == 1:
					dt = time.Duration(rng.Int64N(int64(2 * p.Window)))
				default:
					dt = time.Duration(rng.Int64N(int64(step)))
				}
				mc.Advance(dt)
				rc.Advance(dt)
				n := 1 + rng.Int64N(p.Limit)
				for _, op := range []int{0, 1, 2} {
					var md, rd core.Decision
					var merr, rerr error
					switch op {
					case 0:
						md, merr = mem.Peek(ctx, "k", n)
						rd, rerr = red.Peek(ctx, "k", n)
					case 1:
						md, merr = mem.AllowN(ctx, "k", n)
						rd, rerr = red.AllowN(ctx, "k", n)
					case 2:
						if rng.IntN(4) != 0 {
							continue
						}
						e := time.Duration(rng.Int64N(int64(step)))
						merr = mem.Refund(ctx, "k", n, e)
						rerr = red.Refund(ctx, "k", n, e)
					}
					if merr != nil || rerr != nil {
						t.Fatalf("request %d: memory err %v, redis err %v", i, merr, rerr)
					}
					if md != rd {
						t.Fatalf("request %d (op %d, n=%d, at %v):\nmemory %+v\n redis %+v", i, op, n, mc.Now().UTC(), md, rd)
					}
				}
			}
		})
	}
}

// On the server's TIME, a client whose clock guesses another period gets
// a resync answer and calls once more with the server's periods: the
// decision is the server's, for decisions and refunds alike.
func TestCalendarResync(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	p, err := core.ParsePolicy("2/1d tz=UTC")
	if err != nil {
		t.Fatal(err)
	}
	for _, skew := range []time.Duration{0, -40 * 24 * time.Hour, 24 * time.Hour, 365 * 24 * time.Hour} {
		red, err := New(client, p, WithPrefix(uniquePrefix(t.Name())))
		if err != nil {
			t.Fatal(err)
		}
		red.cur.Load().cal.guess = func() time.Time { return time.Now().Add(skew) }
		t0 := time.Now()
		d, err := red.AllowN(ctx, "k", 2)
		t1 := time.Now()
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("skew %v: %+v, %v", skew, d, err)
		}
		// The server runs on this machine's clock: its now lies in
		// [t0, t1], and the window ends at the next UTC midnight.
		end := t0.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		if !t1.Before(end) {
			t.Skip("a UTC midnight passed during the call")
		}
		if lo, hi := end.Sub(t1), end.Sub(t0)+time.Microsecond; d.ResetAfter < lo || d.ResetAfter > hi {
			t.Fatalf("skew %v: ResetAfter %v, want between %v and %v", skew, d.ResetAfter, lo, hi)
		}
		if d, err := red.Peek(ctx, "k", 1); err != nil || d.Allowed {
			t.Fatalf("skew %v: after the limit: %+v, %v", skew, d, err)
		}
		if err := red.Refund(ctx, "k", 1, time.Minute); err != nil {
			t.Fatalf("skew %v: refund: %v", skew, err)
		}
		if d, err := red.Peek(ctx, "k", 1); err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("skew %v: after a refund: %+v, %v", skew, d, err)
		}
		ttl, err := client.PTTL(ctx, red.key("k")).Result()
		if err != nil || ttl <= 0 || ttl > end.Sub(t0)+DefaultExpiryMargin+time.Millisecond {
			t.Fatalf("skew %v: TTL %v, %v; want at most until midnight and the margin", skew, ttl, err)
		}
	}
}

// A calendar key is its own: the same name and limit in another zone or
// on epoch windows shares nothing.
func TestCalendarKeys(t *testing.T) {
	seen := map[string]string{}
	for _, s := range []string{"1/1d", "1/1d tz=UTC", "1/1d tz=Europe/Berlin", "1/1d tz=Europe/Paris", "1/1w", "1/7d algorithm=fixed-window", "1/1mo"} {
		p, err := core.ParsePolicy(s)
		if err != nil {
			t.Fatal(err)
		}
		seg := policySegment(p)
		if other, ok := seen[seg]; ok {
			t.Errorf("%q and %q share the key segment %q", s, other, seg)
		}
		seen[seg] = s
	}
}

// Eight goroutines racing on a new key of a calendar policy with Limit 1,
// on the server's TIME: exactly one is allowed, every round.
func TestCalendarRaceNewKey(t *testing.T) {
	client := newClient(t, singleNode(t))
	p, err := core.ParsePolicy("1/1mo tz=America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	red, err := New(client, p, WithPrefix(uniquePrefix(t.Name())))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for round := range 20 {
		key := "k" + strconv.Itoa(round)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				d, err := red.Allow(ctx, key)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					allowed.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := allowed.Load(); n != 1 {
			t.Fatalf("round %d: %d allowed, want 1", round, n)
		}
	}
}

// A restart from epoch days to Berlin's days, then to New York's: the
// count of the window in force carries into the calendar period that holds
// the restart, as core's SetPolicy carries it, and leaves at that
// period's end.
func TestCalendarRestartCarries(t *testing.T) {
	client := newClient(t, singleNode(t))
	ctx := context.Background()
	prefix := uniquePrefix(t.Name())
	// 22:00 UTC, 23:00 in Berlin (CET), 17:00 in New York (EST).
	rc := core.NewManualClock(time.Date(2026, 1, 14, 22, 0, 0, 0, time.UTC))
	epoch := mustNew(t, client, mustPolicy(t, "10/1d algorithm=fixed-window name=q"), WithClock(rc), WithPrefix(prefix))
	if d, err := epoch.AllowN(ctx, "k", 8); err != nil || !d.Allowed {
		t.Fatalf("8 on epoch days: %+v, %v", d, err)
	}
	berlin := mustNew(t, client, mustPolicy(t, "10/1d tz=Europe/Berlin name=q"), WithClock(rc), WithPrefix(prefix))
	if d, err := berlin.Peek(ctx, "k", 3); err != nil || d.Allowed || d.Remaining != 2 || d.ResetAfter != time.Hour {
		t.Fatalf("Berlin at 23:00: %+v, %v; want 2 left until midnight, an hour", d, err)
	}
	rc.Advance(30 * time.Minute)
	ny := mustNew(t, client, mustPolicy(t, "10/1d tz=America/New_York name=q"), WithClock(rc), WithPrefix(prefix))
	if d, err := ny.Peek(ctx, "k", 3); err != nil || d.Allowed || d.Remaining != 2 || d.ResetAfter != 6*time.Hour+30*time.Minute {
		t.Fatalf("New York at 17:30: %+v, %v; want 2 left until its midnight", d, err)
	}
	rc.Advance(6*time.Hour + 30*time.Minute)
	if d, err := ny.Peek(ctx, "k", 10); err != nil || !d.Allowed || d.Remaining != 10 {
		t.Fatalf("New York's midnight: %+v, %v; want full", d, err)
	}
	// Back to epoch days: a count in New York's day moves to the UTC day.
	if d, err := ny.AllowN(ctx, "k", 4); err != nil || !d.Allowed {
		t.Fatalf("4 in New York: %+v, %v", d, err)
	}
	if err := ny.SetPolicy(mustPolicy(t, "10/1d algorithm=fixed-window name=q")); err != nil {
		t.Fatal(err)
	}
	// 05:00 UTC: 19 hours to the UTC midnight.
	if d, err := ny.Peek(ctx, "k", 7); err != nil || d.Allowed || d.Remaining != 6 || d.ResetAfter != 19*time.Hour {
		t.Fatalf("epoch days at 05:00 UTC: %+v, %v; want 6 left until midnight", d, err)
	}
}

// A batched limiter on the server's TIME changed to a calendar policy:
// its calls go one by one, with the periods, and eight goroutines racing
// on a new key with Limit 1 get exactly one allowed, every round.
func TestSetPolicyToCalendarRace(t *testing.T) {
	client := newClient(t, singleNode(t))
	red := mustNew(t, client, mustPolicy(t, "5/1d algorithm=fixed-window name=q"), WithPrefix(uniquePrefix(t.Name())))
	if red.batch == nil {
		t.Fatal("not batched")
	}
	if err := red.SetPolicy(mustPolicy(t, "1/1w tz=Asia/Tokyo name=q")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for round := range 20 {
		key := "k" + strconv.Itoa(round)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				d, err := red.Allow(ctx, key)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					allowed.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := allowed.Load(); n != 1 {
			t.Fatalf("round %d: %d allowed, want 1", round, n)
		}
	}
}

// SetPolicies refuses a calendar policy, as NewLayered does.
func TestSetPoliciesCalendarRefused(t *testing.T) {
	nowhere := newClient(t, "127.0.0.1:1")
	ps := []core.Policy{mustPolicy(t, "10/1m name=a"), mustPolicy(t, "100/1d algorithm=fixed-window name=b")}
	ll := mustLayered(t, nowhere, ps, WithTimeout(time.Millisecond))
	err := ll.SetPolicies([]core.Policy{ps[0], mustPolicy(t, "100/1d tz=Europe/Berlin name=b")})
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "layer 1") {
		t.Errorf("SetPolicies with a calendar layer: %v, want errors.ErrUnsupported naming layer 1", err)
	}
	if got := ll.Policies(); got[1] != ps[1] {
		t.Errorf("after the refusal: %v", got)
	}
}

func mustPolicy(t testing.TB, s string) core.Policy {
	t.Helper()
	p, err := core.ParsePolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
