package faults

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redisserver"
)

// storedCounts returns the units each key of the run holds in Redis (the
// fixed window's "index:count"), read through a new client made by
// newClient; every key must hold the same window, the run's one.
func storedCounts(t *testing.T, newClient NewClient, cfg Config) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	c := newClient(cfg)
	defer c.Close()
	counts := make(map[string]int64)
	windows := make(map[int64]bool)
	var mu sync.Mutex
	read := func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, "faults:*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			v, err := node.Get(ctx, k).Result()
			if err != nil {
				return err
			}
			i, units, ok := fixedWindowState(v)
			if !ok {
				return fmt.Errorf("%s holds %q", k, v)
			}
			_, tag, _ := strings.Cut(k, "{")
			mu.Lock()
			windows[i] = true
			counts[strings.TrimSuffix(tag, "}")] = units
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	default:
		err = fmt.Errorf("client %T", c)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(windows) > 1 {
		t.Fatalf("the keys hold %d windows, want the run in one", len(windows))
	}
	return counts
}

// lostUnits returns the units Redis allowed on keys (in the run's one
// window) that it no longer holds: what the promoted replica had not
// received. A decision whose outcome was unknown (a timeout, a connection
// lost after sending) may have been counted without being allowed, which
// hides as much loss: the figure is a lower bound, exact when there were
// none.
func lostUnits(t *testing.T, r Report, counts map[string]int64, keys []string) int64 {
	t.Helper()
	var lost int64
	for _, k := range keys {
		if len(r.Allowed[k]) > 1 {
			t.Errorf("%s: %s allowed in %d windows, want the run in one", r.Mode, k, len(r.Allowed[k]))
		}
		lost += max(0, r.Allowed[k][0].ByRedis-counts[k])
	}
	return lost
}

// failoverConfig returns the settings of the Cluster and Sentinel rows:
// windows of a minute, so that each key's window lasts the whole run and
// the promoted replica must carry on counting it (windows of 100 ms would
// end long before the promotion and hide what it had not received), a
// limit the keys reach after the promotion rather than before the fault
// (on an idle machine), and time after recovery to reach it.
func failoverConfig() Config {
	if testing.Short() {
		return Config{Limit: 600, Window: time.Minute, Keys: 8, Fault: time.Millisecond, After: 1500 * time.Millisecond}
	}
	return Config{Limit: 150, Window: time.Minute, Workers: 4, Keys: 64, Fault: time.Millisecond,
		Warm: 2 * time.Second, After: 3 * time.Second}
}

// clusterRecoveryBound is how soon after the failover (the promotion) Redis
// must decide again for every key on every instance: a breaker's probe
// comes within the cool-down, the limiter asks for a slot reload at the
// next error (at most every 250 ms, see redisstore's cluster.go), and the
// rest is margin for a loaded machine. Without the reload, a long-lived
// Cluster client kept the dead master for 55 s.
func clusterRecoveryBound(cfg Config) time.Duration { return cfg.CoolDown + 2*time.Second }

// TestClusterMasterKill kills (SIGKILL) the master of some of the keys
// mid-run; the Cluster promotes its replica, and the long-lived clients
// must follow within clusterRecoveryBound of the promotion, with no error to
// the caller, decisions within RemoteTimeout, and over-admission failing
// closed bounded by what the replica had not received.
func TestClusterMasterKill(t *testing.T) {
	rc := redisserver.StartClusterT(t, redisserver.FailoverConfig())
	cfg := failoverConfig().withDefaults()
	ctx := context.Background()

	// The victim is the master of the most keys of the mode it owns fewest of.
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs, MaxRetries: -1})
	owners := make(map[string]string) // key → master
	owned := make(map[string]map[Mode]int)
	for _, mode := range []Mode{FailClosed, Fallback} {
		m := &modeRun{mode: mode, cfg: cfg}
		for n := range cfg.Keys {
			key := m.key(n)
			c, err := admin.MasterForKey(ctx, "{"+key+"}")
			if err != nil {
				t.Fatal(err)
			}
			owner := c.Options().Addr
			owners[key] = owner
			if owned[owner] == nil {
				owned[owner] = make(map[Mode]int)
			}
			owned[owner][mode]++
		}
	}
	admin.Close()
	victim := ""
	for addr, n := range owned {
		if victim == "" || min(n[FailClosed], n[Fallback]) > min(owned[victim][FailClosed], owned[victim][Fallback]) {
			victim = addr
		}
	}
	if min(owned[victim][FailClosed], owned[victim][Fallback]) == 0 {
		t.Fatalf("no master owns keys of both modes: %v", owned)
	}
	replica, err := rc.ReplicaOf(victim)
	if err != nil {
		t.Fatal(err)
	}

	var killed, promoted time.Time
	closed, fallback := runClients(t, Cluster(rc.Addrs...), cfg, Fault{
		Name: "Cluster master killed",
		Inject: func(context.Context) error {
			killed = time.Now()
			return rc.Kill(victim)
		},
		Heal: func(ctx context.Context) error {
			var err error
			promoted, err = rc.WaitPromoted(ctx, victim, replica, 30*time.Second)
			return err
		},
	})
	t.Logf("master %s killed; replica %s promoted %v later (the failure mode's gap, and the fault's span in the reports)",
		victim, replica, promoted.Sub(killed).Round(time.Millisecond))

	counts := storedCounts(t, Cluster(rc.Addrs...), cfg)
	for _, r := range []Report{closed, fallback} {
		var onVictim, elsewhere []string
		var victimRec, elseRec time.Duration
		for key, owner := range owners {
			if !strings.HasPrefix(key, string(r.Mode)+"-") {
				continue
			}
			if owner == victim {
				onVictim = append(onVictim, key)
				victimRec = max(victimRec, r.KeyRecovery[key])
			} else {
				elsewhere = append(elsewhere, key)
				elseRec = max(elseRec, r.KeyRecovery[key])
			}
		}
		lost := lostUnits(t, r, counts, onVictim)
		if l := lostUnits(t, r, counts, elsewhere); l != 0 {
			t.Errorf("%s: %d units lost on the masters that lived", r.Mode, l)
		}
		t.Logf("%s: Redis decided again on all %d keys of the dead master %v after the promotion (%v after the kill), on the %d others after %v; the promoted replica had not received %d units; over-admitted %d (worst window %d of %d)",
			r.Mode, len(onVictim), victimRec.Round(time.Millisecond), (victimRec + promoted.Sub(killed)).Round(time.Millisecond),
			len(elsewhere), elseRec.Round(time.Millisecond), lost, r.OverAdmitted, r.WorstWindow, cfg.Limit)
		checkPromotion(t, r, cfg, victimRec, clusterRecoveryBound(cfg), lost)
	}
}

// checkPromotion checks a failure mode's report after a promotion: Redis
// decided again on every key within bound (rec), every breaker that opened
// closed, failing closed over-admitted at most what the promoted node had
// not received (lost), and falling back admitted at most Redis's limit, what
// it lost and the local shares (the limit again) in one window.
func checkPromotion(t *testing.T, r Report, cfg Config, rec, bound time.Duration, lost int64) {
	t.Helper()
	if rec > bound {
		t.Errorf("%s: Redis decided again on every key %v after the promotion, want at most %v", r.Mode, rec, bound)
	}
	if r.BreakerClosed != r.BreakerOpened {
		t.Errorf("%s: breaker opened %d times, closed %d: want every one closed", r.Mode, r.BreakerOpened, r.BreakerClosed)
	}
	switch r.Mode {
	case FailClosed:
		if r.OverAdmitted > lost {
			t.Errorf("fail-closed: over-admitted %d units, want at most the %d the promoted node lost", r.OverAdmitted, lost)
		}
	case Fallback:
		if r.WorstWindow > 2*cfg.Limit+lost {
			t.Errorf("fallback: %d units in one window, want at most 2×%d + %d lost", r.WorstWindow, cfg.Limit, lost)
		}
	}
}

// fixedWindowState reads a fixed window's state on Redis: the window's
// index and its units, packed as two big-endian int64s (">i8i8"), or as
// "index:units" text as earlier versions wrote it.
func fixedWindowState(v string) (idx, units int64, ok bool) {
	if len(v) == 16 && (v[0] == 0 || v[0] == 0xff) {
		b := []byte(v)
		return int64(binary.BigEndian.Uint64(b[:8])), int64(binary.BigEndian.Uint64(b[8:])), true
	}
	a, n, _ := strings.Cut(v, ":")
	i, err1 := strconv.ParseInt(a, 10, 64)
	u, err2 := strconv.ParseInt(n, 10, 64)
	return i, u, err1 == nil && err2 == nil
}
