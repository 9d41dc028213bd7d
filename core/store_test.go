package core

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestShardCount(t *testing.T) {
	for _, tt := range []struct{ maxKeys, atMost int }{{1, 1}, {63, 1}, {200, 2}, {1 << 20, 64}} {
		n := shardCount(tt.maxKeys)
		if n < 1 || n&(n-1) != 0 || n > tt.atMost || (n > 1 && tt.maxKeys/n < 64) {
			t.Errorf("shardCount(%d) = %d, want a power of two <= %d with >= 64 keys each", tt.maxKeys, n, tt.atMost)
		}
	}
}

// A flood of new keys never holds more than MaxKeys; keys that were used up
// and are still live are evicted (and counted as lossy) only when the store
// is full of them.
func TestMaxKeysBoundsMemory(t *testing.T) {
	for _, maxKeys := range []int{1, 100, 5000} {
		t.Run(strconv.Itoa(maxKeys), func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_000, 0))
			m, err := New(Policy{Limit: 10, Window: time.Hour}, WithClock(clock), WithMaxKeys(maxKeys))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const flood = 20000
			for i := range flood {
				if d, _ := m.Allow(ctx, "flood-"+strconv.Itoa(i)); !d.Allowed {
					t.Fatalf("new key %d denied", i)
				}
				if k := m.Stats().Keys; i%997 == 0 && k > maxKeys {
					t.Fatalf("after %d keys the store holds %d, above %d", i+1, k, maxKeys)
				}
			}
			st := m.Stats()
			if st.Keys > maxKeys || st.Keys < maxKeys*3/4 {
				t.Fatalf("Stats %+v: want Keys near %d and never above", st, maxKeys)
			}
			if got := uint64(st.Keys) + st.LossyEvictions + st.FreshDrops; got != flood {
				t.Fatalf("Stats %+v: keys held + evicted + dropped = %d, want %d", st, got, flood)
			}
			if st.FreshDrops != 0 {
				t.Fatalf("Stats %+v: no key was fresh yet, want 0 fresh drops", st)
			}
		})
	}
}

// Keys whose state has become fresh are dropped before any live key, and
// their dropping is free: the key decides as if new anyway.
func TestFreshKeysGoFirst(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_000, 0))
			m, err := New(Policy{Algorithm: a, Limit: 2, Window: time.Second}, WithClock(clock), WithMaxKeys(64))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 64 {
				m.Allow(ctx, "old-"+strconv.Itoa(i))
			}
			clock.Advance(time.Hour) // every old key is fresh now
			for i := range 64 {
				if d, _ := m.AllowN(ctx, "new-"+strconv.Itoa(i), 2); !d.Allowed {
					t.Fatalf("new key %d denied", i)
				}
			}
			st := m.Stats()
			if st.LossyEvictions != 0 || st.FreshDrops != 64 || st.Keys != 64 {
				t.Fatalf("Stats %+v: want 64 fresh drops, no lossy eviction, 64 keys", st)
			}
			// The new keys are live: a flood now evicts them, counted.
			for i := range 10 {
				m.Allow(ctx, "flood-"+strconv.Itoa(i))
			}
			if st := m.Stats(); st.LossyEvictions != 10 {
				t.Fatalf("Stats %+v: want 10 lossy evictions", st)
			}
		})
	}
}

// Inserting new keys sweeps fresh ones from the LRU tail, so idle keys do
// not pile up even below MaxKeys.
func TestIdleKeysAreSwept(t *testing.T) {
	ctx := context.Background()
	fill := func(m *Memory, clock *ManualClock, old, fresh int) Stats {
		for i := range old {
			m.Allow(ctx, "a-"+strconv.Itoa(i))
		}
		clock.Advance(time.Minute)
		for i := range fresh {
			m.Allow(ctx, "b-"+strconv.Itoa(i))
		}
		return m.Stats()
	}
	// One shard (fewer than 128 keys): each new key sweeps up to two idle
	// ones, so 50 new keys sweep all 50 idle ones.
	clock := NewManualClock(time.Unix(1_800_000_000, 0))
	m, _ := New(Policy{Limit: 5, Window: time.Second}, WithClock(clock), WithMaxKeys(127))
	if st := fill(m, clock, 50, 50); st.Keys != 50 || st.FreshDrops != 50 {
		t.Fatalf("one shard: Stats %+v: want the 50 idle keys swept", st)
	}
	// 64 shards: a new key sweeps its own shard only, so 1000 new keys
	// spread over the shards sweep nearly all of 1000 idle ones (995 in
	// the median and 957 at the fewest of 5,000 simulated placements; the
	// rest go as more keys arrive).
	clock = NewManualClock(time.Unix(1_800_000_000, 0))
	m, _ = New(Policy{Limit: 5, Window: time.Second}, WithClock(clock), WithMaxKeys(1<<16))
	if st := fill(m, clock, 1000, 1000); st.FreshDrops < 900 || st.Keys != 2000-int(st.FreshDrops) || st.LossyEvictions != 0 {
		t.Fatalf("64 shards: Stats %+v: want nearly all of the 1000 idle keys swept, nothing lost", st)
	}
}

// A key that has only just become fresh is kept while its shard has room:
// a token bucket at 100/1m is full again 600 ms after one request, and
// sweeping it then would only allocate it again on its next request. Keys
// fresh for a window or more are swept by new keys.
func TestBrieflyFreshKeysAreKept(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_000, 0)) // a minute boundary
			// At most 127 keys: one shard, so the LRU order is global.
			m, err := New(Policy{Algorithm: a, Limit: 100, Window: time.Minute}, WithClock(clock), WithMaxKeys(127))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 40 {
				m.Allow(ctx, "a-"+strconv.Itoa(i))
			}
			clock.Advance(30 * time.Second) // buckets full, windows not yet ended
			for i := range 40 {
				m.Allow(ctx, "b-"+strconv.Itoa(i))
			}
			if st := m.Stats(); st.Keys != 80 || st.FreshDrops != 0 {
				t.Fatalf("Stats %+v: want all 80 keys kept", st)
			}
			// 3 minutes on, every key has been fresh for at least a window
			// (the sliding window's since the end of the next window).
			clock.Advance(3 * time.Minute)
			for i := range 40 {
				m.Allow(ctx, "c-"+strconv.Itoa(i))
			}
			if st := m.Stats(); st.Keys != 40 || st.FreshDrops != 80 || st.LossyEvictions != 0 {
				t.Fatalf("Stats %+v: want the 80 idle keys swept, 40 left", st)
			}
		})
	}
}

// A key fresh for less than a second is never swept, however short the
// window: a clock that then steps back finds its state as a Memory that
// kept every key would, as redisstore's keys outlive their state by a
// margin. Here a bucket refills in 21 ns (3 of 1000 per 7 µs), so the
// window alone would let new keys sweep it at once.
func TestSweepKeepsStateAClockSteppingBackFinds(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			p := Policy{Algorithm: a, Limit: 1000, Window: 7 * time.Microsecond}
			if a.Burstable() {
				p.Burst = 3
			}
			start := time.Unix(1_800_000_000, 0)
			clock, lone := NewManualClock(start), NewManualClock(start)
			m, err := New(p, WithClock(clock), WithMaxKeys(127)) // one shard
			if err != nil {
				t.Fatal(err)
			}
			ref, _ := New(p, WithClock(lone)) // holds one key only: never sweeps it
			ctx := context.Background()
			for range 3 {
				m.AllowN(ctx, "k", 1)
				ref.AllowN(ctx, "k", 1)
			}
			step := 900 * time.Millisecond
			clock.Advance(step)
			for i := range 100 {
				m.Allow(ctx, "new-"+strconv.Itoa(i))
			}
			clock.Advance(-step)
			got, _ := m.AllowN(ctx, "k", 2)
			want, _ := ref.AllowN(ctx, "k", 2)
			if got != want {
				t.Fatalf("after a step back:\n got %+v\nwant %+v (Stats %+v)", got, want, m.Stats())
			}
		})
	}
}

// Denied requests and Peeks never create a key.
func TestNoStateWithoutAllowedRequest(t *testing.T) {
	m, _ := New(Policy{Algorithm: SlidingLog, Limit: 5, Window: time.Second})
	ctx := context.Background()
	for i := range 100 {
		m.Peek(ctx, "p-"+strconv.Itoa(i), 1)
	}
	if k := m.Stats().Keys; k != 0 {
		t.Fatalf("Peek created %d keys", k)
	}
}

func TestManualClockConcurrent(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("X", 3600))
	c := NewManualClock(start)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(8*time.Second); !got.Equal(want) || got.Location() != start.Location() {
		t.Fatalf("Now() = %v, want %v", got, want)
	}
	c.Set(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Set did not move the clock back")
	}
}

// The system clock's monotonic reading drives elapsed time.
func TestSystemClockIsMonotonic(t *testing.T) {
	m, _ := New(Policy{Limit: 1, Window: time.Second})
	if m.base.Round(0) == m.base {
		t.Skip("this platform's clock has no monotonic reading")
	}
	a := m.now()
	b := m.now()
	if b < a {
		t.Fatalf("time went backwards: %d then %d", a, b)
	}
}

// Two keys whose hashes share the LRU index (a 64-bit collision, forced here
// by corrupting the stored check) are told apart: the newcomer starts fresh
// and the replaced state is counted.
func TestHashCollisionIsDetected(t *testing.T) {
	clock := NewManualClock(time.Unix(1_800_000_000, 0))
	m, _ := New(Policy{Limit: 1, Window: time.Hour}, WithClock(clock))
	ctx := context.Background()
	if d, _ := m.Allow(ctx, "victim"); !d.Allowed {
		t.Fatal("first request denied")
	}
	s := m.eng.(*store[uint64, *gcra])
	sh, h, check := s.locate("victim")
	i, res := sh.find(h&tagHash|tagUsed, check)
	if res != found {
		t.Fatal("the key is not in its shard")
	}
	sh.slots[i].check ^= 1 // the entry now belongs to "another key" with the same index
	d, _ := m.Allow(ctx, "victim")
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after a collision: %+v, want a fresh state (allowed, 0 left)", d)
	}
	if st := m.Stats(); st.LossyEvictions != 1 || st.Keys != 1 {
		t.Fatalf("Stats %+v: want the replaced live state counted as 1 lossy eviction", st)
	}
	if err := m.Reset(ctx, "victim"); err != nil || m.Stats().Keys != 0 {
		t.Fatalf("Reset after a collision: %v, %d keys left", err, m.Stats().Keys)
	}
}

// A key requested while a flood of new keys passes through its shard is
// never the one evicted: each time it reaches the LRU tail its reference
// bit sends it back to the front, and its count survives the flood.
func TestRequestedKeySurvivesFlood(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_000, 0))
			// 64 keys at most: one shard, so every key meets the hot one.
			m, err := New(Policy{Algorithm: a, Limit: 1000, Window: time.Hour}, WithClock(clock), WithMaxKeys(64))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const flood, every = 10_000, 50 // a request from the hot key every 50 new keys
			spent := int64(0)
			for i := range flood {
				if i%every == 0 {
					d, _ := m.Allow(ctx, "hot")
					if spent++; !d.Allowed || d.Remaining != 1000-spent {
						t.Fatalf("request %d of the hot key, after %d new keys: %+v, want %d left", spent, i, d, 1000-spent)
					}
				}
				m.Allow(ctx, "flood-"+strconv.Itoa(i))
			}
			st := m.Stats()
			if st.Keys != 64 || st.LossyEvictions != flood-63 {
				t.Fatalf("Stats %+v: want 64 keys, every flood key but the last 63 evicted", st)
			}
		})
	}
}

// When every key in a full shard has been requested since it last reached
// the tail, a new key still evicts exactly one after a bounded number of
// second chances, and the shard stays within its limit.
func TestSecondChancesAreBounded(t *testing.T) {
	clock := NewManualClock(time.Unix(1_800_000_000, 0))
	m, _ := New(Policy{Limit: 10, Window: time.Hour}, WithClock(clock), WithMaxKeys(64))
	ctx := context.Background()
	for round := range 3 {
		for i := range 64 {
			m.Allow(ctx, "k-"+strconv.Itoa(i))
		}
		if st := m.Stats(); st.Keys != 64 {
			t.Fatalf("round %d: Stats %+v, want 64 keys", round, st)
		}
	}
	// The first new key passes maxSecondChances keys from the hand,
	// clearing their bits, and evicts the next one, requested or not.
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "k-" + strconv.Itoa(i)
	}
	placeHand(t, m.eng, "k-0", 0)
	order := handOrder(t, m.eng.(*store[uint64, *gcra]), keys)
	m.Allow(ctx, "new-0")
	for i, k := range order[:maxSecondChances+1] {
		want := int64(7) // 3 requests counted
		if i == maxSecondChances {
			want = 10 // evicted: a new key
		}
		if d, _ := m.Peek(ctx, k, 1); d.Remaining != want {
			t.Fatalf("%s, the hand's %d-th, after one new key: %+v, want Remaining %d", k, i, d, want)
		}
	}
	for i := 1; i < 100; i++ {
		m.Allow(ctx, "new-"+strconv.Itoa(i))
		if st := m.Stats(); st.Keys != 64 || st.LossyEvictions != uint64(i+1) {
			t.Fatalf("after %d new keys: Stats %+v, want 64 keys and %d lossy evictions", i+1, st, i+1)
		}
	}
}

// The sliding log's arena reuses the index of every removed key's log and
// empties the log it held: under a flood through a small store it never
// hands out more indices than the limit allows, and every free index holds
// an empty log (an evicted key's entries are not kept).
func TestLogArenaReusesIndices(t *testing.T) {
	clock := NewManualClock(time.Unix(1_800_000_000, 0))
	m, _ := New(Policy{Algorithm: SlidingLog, Limit: 3, Window: time.Hour}, WithClock(clock), WithMaxKeys(100))
	ctx := context.Background()
	for i := range 5000 {
		m.Allow(ctx, "flood-"+strconv.Itoa(i))
		if i%7 == 0 {
			m.Reset(ctx, "flood-"+strconv.Itoa(i))
		}
	}
	s := m.eng.(*store[logRef, *slidingLog])
	a := s.alg.logs
	held := 0
	for i := range s.shards {
		sh := &s.shards[i]
		if sh.n > sh.limit {
			t.Fatalf("shard %d: %d keys, limit %d", i, sh.n, sh.limit)
		}
		held += sh.n
	}
	if used := int(a.next) - 1; used > 100+1 || used != held+len(a.free) {
		t.Fatalf("%d log indices handed out, %d keys, %d free", used, held, len(a.free))
	}
	for _, r := range a.free {
		l := a.at(r)
		if l.n() != 0 || l.sum != 0 || l.head != 0 || cap(l.slots) == 0 || l.prefix(cap(l.slots)) != 0 {
			t.Fatalf("free index %d still holds a log: %+v", r, *l)
		}
	}
}
