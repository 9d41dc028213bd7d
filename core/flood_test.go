package core

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Tests of what the memory store evicts under a flood of new keys: an
// attacker who has used up its key must not get it back by minting others.

// A flood of new keys, one request each, 1 ms apart, reaches a store full of
// entries that are fresh again and one exhausted key: the new keys take the
// fresh entries' places (and, as they become fresh themselves, each other's),
// and the exhausted key keeps its count. Run with many limiters, each with a
// hash seed of its own, so that no placement of the keys passes by luck.
func TestFloodKeepsExhaustedKey(t *testing.T) {
	ctx := context.Background()
	for run := range 20 {
		clock := NewManualClock(time.Unix(1_800_000_000, 0))
		m, err := New(Policy{Algorithm: TokenBucket, Limit: 100, Window: 100 * time.Second}, WithMaxKeys(1000), WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		abuser := "abuser-" + strconv.Itoa(run)
		if d, _ := m.AllowN(ctx, abuser, 100); !d.Allowed {
			t.Fatalf("run %d: the abuser's first 100 denied: %+v", run, d)
		}
		for i := range 999 {
			m.Allow(ctx, "client-"+strconv.Itoa(i))
		}
		clock.Advance(5 * time.Second) // the clients are full again, the abuser has 5 tokens
		for i := range 3000 {
			clock.Advance(time.Millisecond)
			m.Allow(ctx, "minted-"+strconv.Itoa(run)+"-"+strconv.Itoa(i))
		}
		d, _ := m.AllowN(ctx, abuser, 10)
		if got, want := d.Allowed, false; got != want {
			t.Fatalf("run %d: abuser asks for 10 after the flood: allowed %v, want %v (%+v; %+v)", run, got, want, d, m.Stats())
		}
		if st := m.Stats(); st.Keys > 1000 {
			t.Fatalf("run %d: Stats %+v: more keys than the maximum", run, st)
		}
	}
}

// 500 clients that made one request a second ago (their buckets full again)
// and 700 new keys arriving at once do not evict a key that spent its whole
// bucket a second ago, however the keys fall into shards.
func TestNewKeysDoNotResetSpentBucket(t *testing.T) {
	ctx := context.Background()
	for run := range 50 {
		clock := NewManualClock(time.Unix(1_800_000_000, 0))
		m, err := New(Policy{Algorithm: TokenBucket, Limit: 100, Window: time.Minute}, WithMaxKeys(1000), WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		abuser := "abuser-" + strconv.Itoa(run)
		if d, _ := m.AllowN(ctx, abuser, 100); !d.Allowed {
			t.Fatalf("run %d: the abuser's first 100 denied: %+v", run, d)
		}
		for i := range 500 {
			m.Allow(ctx, "client-"+strconv.Itoa(run)+"-"+strconv.Itoa(i))
		}
		clock.Advance(time.Second)
		for i := range 700 {
			m.Allow(ctx, "new-"+strconv.Itoa(run)+"-"+strconv.Itoa(i))
		}
		d, _ := m.AllowN(ctx, abuser, 90)
		if got, want := d.Allowed, false; got != want {
			t.Fatalf("run %d: abuser asks for 90 a second after spending 100: allowed %v, want %v (%+v; %+v)", run, got, want, d, m.Stats())
		}
	}
}

// When no entry of a full shard is fresh, a new key evicts the entry the
// hand looked at that holds the fewest units: a flood of minted keys, one
// request each, or two to set their reference bits, goes before a key that
// used up its limit and keeps asking, or keeps quiet.
func TestMintedKeysGoBeforeUsedUpKey(t *testing.T) {
	ctx := context.Background()
	for _, a := range Algorithms() {
		for _, tt := range []struct {
			name       string
			perMinted  int  // requests per minted key
			abuserAsks bool // the used-up key asks again between minted keys
		}{{"once", 1, false}, {"twice", 2, false}, {"asking", 1, true}} {
			t.Run(a.String()+"/"+tt.name, func(t *testing.T) {
				clock := NewManualClock(time.Unix(1_800_000_000, 0))
				m, err := New(Policy{Algorithm: a, Limit: 100, Window: time.Hour}, WithClock(clock), WithMaxKeys(64))
				if err != nil {
					t.Fatal(err)
				}
				if d, _ := m.AllowN(ctx, "abuser", 100); !d.Allowed {
					t.Fatalf("the abuser's 100 denied: %+v", d)
				}
				const flood = 5000
				for i := range flood {
					clock.Advance(time.Millisecond)
					k := "minted-" + strconv.Itoa(i)
					for range tt.perMinted {
						m.Allow(ctx, k)
					}
					if tt.abuserAsks && i%10 == 0 {
						if d, _ := m.Allow(ctx, "abuser"); d.Allowed {
							t.Fatalf("after %d minted keys the abuser was allowed: %+v", i+1, d)
						}
					}
				}
				if d, _ := m.Allow(ctx, "abuser"); d.Allowed {
					t.Fatalf("after %d minted keys the abuser was allowed: %+v", flood, d)
				}
				st := m.Stats()
				if got, want := uint64(st.Keys)+st.LossyEvictions+st.FreshDrops, uint64(flood+1); st.Keys != 64 || got != want {
					t.Fatalf("Stats %+v: want 64 keys, and keys + evicted + dropped = %d", st, want)
				}
			})
		}
	}
}

// Of keys that hold as many units, the ones requested since the hand last
// passed them are kept: a key that keeps asking (and is denied, holding its
// one unit) outlives a flood of keys that asked once.
//
// Each algorithm runs on 40 stores, 40 hash seeds: where the keys land
// decides when the hand passes them, and a same-size rebuild of a
// lock-free shard that sent the hand back over entries it had just passed
// evicted an asking key on about one seed in fifty.
func TestAskingKeysOutliveEqualOnes(t *testing.T) {
	ctx := context.Background()
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			for range 40 {
				askingKeysOutlive(t, ctx, a)
			}
		})
	}
}

func askingKeysOutlive(t *testing.T, ctx context.Context, a Algorithm) {
	t.Helper()
	clock := NewManualClock(time.Unix(1_800_000_000, 0))
	m, err := New(Policy{Algorithm: a, Limit: 1, Window: time.Hour}, WithClock(clock), WithMaxKeys(64))
	if err != nil {
		t.Fatal(err)
	}
	asking := func(i int) string { return "asking-" + strconv.Itoa(i) }
	for i := range maxSecondChances {
		m.Allow(ctx, asking(i))
	}
	for round := range 200 {
		for i := range maxSecondChances {
			if d, _ := m.Allow(ctx, asking(i)); d.Allowed {
				t.Fatalf("round %d: %s allowed again: %+v", round, asking(i), d)
			}
		}
		for i := range 16 {
			m.Allow(ctx, "minted-"+strconv.Itoa(round)+"-"+strconv.Itoa(i))
		}
	}
	if st := m.Stats(); st.Keys != 64 || st.LossyEvictions != 200*16+maxSecondChances-64 {
		t.Fatalf("Stats %+v: want 64 keys and every minted key but the last %d evicted", st, 64-maxSecondChances)
	}
}

// freshSoon returns how long after a key's one request at a window boundary
// it is fresh but has not been fresh for a window yet, under a 100/1m
// policy of algorithm a: the entries a full shard drops first, that a shard
// with room keeps.
func freshSoon(a Algorithm) time.Duration {
	switch a {
	case TokenBucket, LeakyBucket:
		return time.Second // one unit refills in 600 ms
	case SlidingWindow:
		return 2 * time.Minute // the count left both windows
	}
	return time.Minute // the window ended
}

// A new key in a full shard takes the place of a fresh entry the hand finds
// within its reach, before any entry that holds usage; one further away is
// not looked at, and the eviction is counted as lossy. Here every used key
// was requested since the hand last passed it, so the reach is handReach
// plus the maxSecondChances such keys it passes. The hand is placed so
// that before used keys lie between it and the fresh one.
func TestFreshEntryWithinReachGoesFirst(t *testing.T) {
	ctx := context.Background()
	const reach = handReach + maxSecondChances
	for _, a := range Algorithms() {
		for _, before := range []int{0, reach - 1, reach} { // used keys between the hand and the fresh one
			t.Run(a.String()+"/"+strconv.Itoa(before), func(t *testing.T) {
				clock := NewManualClock(time.Unix(1_800_000_000, 0)) // a minute boundary
				// 64 keys at most: one shard, so every key meets the hand.
				m, err := New(Policy{Algorithm: a, Limit: 100, Window: time.Minute}, WithClock(clock), WithMaxKeys(64))
				if err != nil {
					t.Fatal(err)
				}
				used := func(i int) string { return "used-" + strconv.Itoa(i) }
				m.Allow(ctx, "light")
				for i := range 63 {
					m.Allow(ctx, used(i))
				}
				clock.Advance(freshSoon(a))
				for i := range 63 {
					if d, _ := m.AllowN(ctx, used(i), 50); !d.Allowed {
						t.Fatalf("%s denied 50: %+v", used(i), d)
					}
				}
				if d, _ := m.Peek(ctx, "light", 100); !d.Allowed {
					t.Fatalf("light is not fresh: %+v", d)
				}
				placeHand(t, m.eng, "light", before)
				m.Allow(ctx, "new-0")
				want := Stats{Keys: 64, FreshDrops: 1}
				if before >= reach {
					want = Stats{Keys: 64, LossyEvictions: 1}
				}
				if got := m.Stats(); got != want {
					t.Fatalf("the fresh entry behind %d used ones: Stats %+v, want %+v", before, got, want)
				}
				// The hand goes on from where it stopped: the fresh entry it
				// did not reach is next.
				m.Allow(ctx, "new-1")
				if got, want := m.Stats().FreshDrops, uint64(1); got != want {
					t.Fatalf("after a second new key: FreshDrops %d, want %d", got, want)
				}
				kept := 0
				for i := range 63 {
					if d, _ := m.Peek(ctx, used(i), 51); !d.Allowed {
						kept++
					}
				}
				// Every used key lost is counted (a lossy eviction may also
				// take new-0, which holds less than any used key).
				if got, want := kept, 63-int(m.Stats().LossyEvictions); got < want {
					t.Fatalf("used keys that kept their count: %d, want at least %d", got, want)
				}
			})
		}
	}
}

// Keys that hold one unit, the least a key with usage can, do not hide a
// fresh entry from the hand: evicting the first of them at once is right
// only while no entry of the shard can be fresh. None of them was requested,
// or added, since the hand last passed it (placeHand), so the hand's reach
// is handReach.
func TestOneUnitKeysDoNotHideFreshOnes(t *testing.T) {
	ctx := context.Background()
	const reach = handReach
	for _, before := range []int{reach - 1, reach} { // one-unit keys between the hand and the fresh one
		t.Run(strconv.Itoa(before), func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_000, 0))
			m, err := New(Policy{Algorithm: TokenBucket, Limit: 100, Window: time.Minute}, WithClock(clock), WithMaxKeys(64))
			if err != nil {
				t.Fatal(err)
			}
			m.Allow(ctx, "light") // fresh 600 ms on
			for i := range 63 {
				m.AllowN(ctx, "used-"+strconv.Itoa(i), 2) // 1.2 s
			}
			clock.Advance(time.Second) // light is fresh; the others hold one unit
			placeHand(t, m.eng, "light", before)
			m.Allow(ctx, "new-0")
			want := Stats{Keys: 64, FreshDrops: 1}
			if before >= reach {
				want = Stats{Keys: 64, LossyEvictions: 1}
			}
			if got := m.Stats(); got != want {
				t.Fatalf("the fresh entry behind %d one-unit ones: Stats %+v, want %+v", before, got, want)
			}
			if before >= reach {
				return
			}
			// No entry is fresh now, nor can be before 200 ms from now:
			// new keys take the places of one-unit keys, one each.
			for i := 1; i <= 10; i++ {
				m.Allow(ctx, "new-"+strconv.Itoa(i))
			}
			if got, want := m.Stats(), (Stats{Keys: 64, FreshDrops: 1, LossyEvictions: 10}); got != want {
				t.Fatalf("Stats %+v, want %+v", got, want)
			}
		})
	}
}

// calm is a lower bound on when any entry of its shard becomes fresh, under
// a mix of new keys, known keys and costs, with the clock standing still or
// moving on, with the shards full. The bound is of use, too: the hand knows
// that no entry can be fresh at most of the checks.
func TestCalmIsABound(t *testing.T) {
	ctx := context.Background()
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_800_000_000, 0))
			m, err := New(Policy{Algorithm: a, Limit: 100, Window: time.Minute}, WithClock(clock), WithMaxKeys(128))
			if err != nil {
				t.Fatal(err)
			}
			x := uint64(1)
			next := func(n uint64) uint64 { // xorshift: the same walk every run
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				return x % n
			}
			checks, ahead := 0, 0 // of shards
			for step := range 50_000 {
				clock.Advance(time.Duration(next(2)*next(50_000)) * time.Microsecond)
				key := "k-" + strconv.Itoa(int(next(1000)))
				if next(4) == 0 {
					key = "hot-" + strconv.Itoa(int(next(20)))
				}
				m.AllowN(ctx, key, int64(1+next(2)*next(30)))
				if step%10 == 0 {
					k, n := checkCalm(t, m.eng, m.now(), step)
					ahead, checks = ahead+k, checks+n
				}
			}
			if ahead < checks/2 {
				t.Fatalf("calm was after now in %d of %d checks of a shard, want at least half", ahead, checks)
			}
		})
	}
}

// checkCalm fails t if an entry of e's shards becomes fresh before its
// shard's calm. It returns the number of shards whose calm is after now,
// and of shards.
func checkCalm(t *testing.T, e engine, now int64, step int) (ahead, shards int) {
	t.Helper()
	switch s := e.(type) {
	case *store[uint64, *gcra]:
		return calmHolds(t, s, now, step)
	case *store[fwState, *fixedWindow]:
		return calmHolds(t, s, now, step)
	case *store[swState, *slidingWindow]:
		return calmHolds(t, s, now, step)
	case *store[logRef, *slidingLog]:
		return calmHolds(t, s, now, step)
	}
	t.Fatalf("unknown store %T", e)
	return 0, 0
}

func calmHolds[S any, A algorithm[S]](t *testing.T, s *store[S, A], now int64, step int) (ahead, shards int) {
	t.Helper()
	for i := range s.shards {
		sh := &s.shards[i]
		for _, e := range sh.slots {
			if e.tag == 0 {
				continue
			}
			_, until := s.alg.holds(e.state, now)
			if now+until < sh.calm {
				t.Fatalf("step %d: shard %d: an entry is fresh at %d, before calm %d (now %d)", step, i, now+until, sh.calm, now)
			}
		}
		if now < sh.calm {
			ahead++
		}
	}
	return ahead, len(s.shards)
}

// placeHand moves the hand of key's shard in e so that exactly before
// entries lie between it and key's slot (the hand at key itself for 0),
// and starts a lap there, every entry added before it (none counts as new
// to the hand; reference bits are kept).
func placeHand(t *testing.T, e engine, key string, before int) {
	t.Helper()
	switch s := e.(type) {
	case *store[uint64, *gcra]:
		placeHandIn(t, s, key, before)
	case *store[fwState, *fixedWindow]:
		placeHandIn(t, s, key, before)
	case *store[swState, *slidingWindow]:
		placeHandIn(t, s, key, before)
	case *store[logRef, *slidingLog]:
		placeHandIn(t, s, key, before)
	default:
		t.Fatalf("unknown store %T", e)
	}
}

func placeHandIn[S any, A algorithm[S]](t *testing.T, s *store[S, A], key string, before int) {
	t.Helper()
	sh, h, check := s.locate(key)
	i, res := sh.find(h&tagHash|tagUsed, check)
	if res != found {
		t.Fatalf("%q is not held", key)
	}
	if before >= sh.n {
		t.Fatalf("%d entries before %q in a shard of %d", before, key, sh.n)
	}
	m := len(sh.slots) - 1
	for k := 0; k < before; {
		if i = (i - 1) & m; sh.slots[i].tag != 0 {
			k++
		}
	}
	sh.hand, sh.lapLeft = i, len(sh.slots)
	for j := range sh.slots {
		sh.slots[j].tag &^= tagNew
	}
}

// handOrder returns keys in the order the hand of their shard in e meets
// them, from where it is now (all keys in one shard).
func handOrder[S any, A algorithm[S]](t *testing.T, s *store[S, A], keys []string) []string {
	t.Helper()
	type at struct {
		key  string
		dist int
	}
	var order []at
	for _, k := range keys {
		sh, h, check := s.locate(k)
		i, res := sh.find(h&tagHash|tagUsed, check)
		if res != found {
			t.Fatalf("%q is not held", k)
		}
		order = append(order, at{k, (i - sh.hand) & (len(sh.slots) - 1)})
	}
	slices.SortFunc(order, func(a, b at) int { return a.dist - b.dist })
	out := make([]string, len(order))
	for i, o := range order {
		out[i] = o.key
	}
	return out
}
