package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// TestSlidingLogLayout checks the log's string as it grows past the length
// up to which it is rewritten on each write, is appended to from there on,
// and is cut back once half of it has left the window; and that a refund
// and the clock going back decide as the memory store does throughout.
func TestSlidingLogLayout(t *testing.T) {
	ctx := context.Background()
	client := newClient(t, singleNode(t))
	p := core.Policy{Algorithm: core.SlidingLog, Limit: 1000, Window: time.Second}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	mc, rc := core.NewManualClock(start), core.NewManualClock(start)
	mem, err := core.New(p, core.WithClock(mc))
	if err != nil {
		t.Fatal(err)
	}
	red := mustNew(t, client, p, WithClock(rc), WithPrefix(uniquePrefix(t.Name())))
	key := red.key("k")
	records := func() int64 {
		n, err := client.StrLen(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return (n - 16) / 16
	}
	step := func(d time.Duration) {
		mc.Advance(d)
		rc.Advance(d)
	}
	same := func(what string, n int64) {
		t.Helper()
		md, merr := mem.AllowN(ctx, "k", n)
		rd, rerr := red.AllowN(ctx, "k", n)
		if merr != nil || rerr != nil || md != rd {
			t.Fatalf("%s: memory %+v, %v\nredis %+v, %v", what, md, merr, rd, rerr)
		}
	}
	// 100 records 5 ms apart: the log holds them all.
	for i := range 100 {
		same(fmt.Sprintf("request %d", i), 2)
		step(5 * time.Millisecond)
	}
	if got := records(); got != 100 {
		t.Fatalf("%d records, want 100", got)
	}
	// At 1.195 s, the 40 records up to 0.195 s have left: fewer than half,
	// so the next request appends and the string keeps the 40.
	step(695 * time.Millisecond)
	same("at 1.195 s", 1)
	if got := records(); got != 101 {
		t.Fatalf("%d records, want 101 (appended)", got)
	}
	// The clock goes back 0.2 s: what the last write removed stays removed.
	step(-200 * time.Millisecond)
	same("clock back", 1)
	for range 3 {
		if md, rd := peek(t, mem, "k"), peek(t, red, "k"); md != rd {
			t.Fatalf("peek after the clock went back: memory %+v, redis %+v", md, rd)
		}
	}
	// At 1.295 s, 60 of the 101 have left: the next write cuts them off.
	step(300 * time.Millisecond)
	same("after half left", 1)
	if got := records(); got != 42 {
		t.Fatalf("%d records after half the log left the window, want 42", got)
	}
	// A refund of the last request, then a second's silence: empty.
	if err := mem.Refund(ctx, "k", 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := red.Refund(ctx, "k", 1, 0); err != nil {
		t.Fatal(err)
	}
	same("after a refund", 5)
	step(2 * time.Second)
	same("after the window", 1000)
	if got := records(); got != 1 {
		t.Fatalf("%d records, want 1", got)
	}
}

func peek(t *testing.T, l core.Limiter, key string) core.Decision {
	t.Helper()
	d, err := l.Peek(context.Background(), key, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
