package faults

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redisserver"
)

// redisCluster is a Redis Cluster of three masters, each with one
// replica, and a node timeout of 2 s, on redis-servers of its own, stopped
// when the test ends.
type redisCluster struct {
	addrs   []string
	servers map[string]*redisserver.Server // by address
}

// startCluster starts a redisCluster and waits until every node is ready.
func startCluster(t *testing.T) *redisCluster {
	t.Helper()
	redisserver.Need(t, "redis-server", "redis-cli")
	rc := &redisCluster{servers: make(map[string]*redisserver.Server)}
	for range 6 {
		bus, err := redisserver.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		s, err := redisserver.Start(dir, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "2000")
		if s != nil {
			t.Cleanup(s.Stop)
		}
		if err != nil {
			t.Fatal(err)
		}
		rc.addrs = append(rc.addrs, s.Addr)
		rc.servers[s.Addr] = s
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, rc.addrs...),
		"--cluster-replicas", "1", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range rc.addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		for {
			err := clusterNodeReady(c, len(rc.addrs))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("cluster node %s not ready: %v", addr, err)
			}
			time.Sleep(20 * time.Millisecond) // polling the cluster's own progress
		}
		c.Close()
	}
	return rc
}

// clusterNodeReady returns nil once c's node says cluster_state:ok, knows
// every node and, if a replica, has its link to its master up.
func clusterNodeReady(c *redis.Client, nodes int) error {
	ctx := context.Background()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", nodes)) {
		return fmt.Errorf("cluster info:\n%s", info)
	}
	repl, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
		return fmt.Errorf("replica not in sync:\n%s", repl)
	}
	return nil
}

// clusterNodeLine is one line of CLUSTER NODES.
type clusterNodeLine struct {
	id, addr, flags, master string
}

func clusterNodesOf(ctx context.Context, c *redis.Client) ([]clusterNodeLine, error) {
	out, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var nodes []clusterNodeLine
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		nodes = append(nodes, clusterNodeLine{id: f[0], addr: addr, flags: f[2], master: f[3]})
	}
	return nodes, nil
}

// replicaOf returns the address of the replica of the master at addr.
func (rc *redisCluster) replicaOf(addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	nodes, err := clusterNodesOf(context.Background(), c)
	if err != nil {
		return "", err
	}
	var id string
	for _, n := range nodes {
		if n.addr == addr {
			id = n.id
		}
	}
	for _, n := range nodes {
		if id != "" && n.master == id {
			return n.addr, nil
		}
	}
	return "", fmt.Errorf("no replica of %s in %v", addr, nodes)
}

// waitPromoted waits, at most within, until every node but dead sees
// replica as a master and says cluster_state:ok, and returns when it saw
// it. It polls every 10 ms.
func (rc *redisCluster) waitPromoted(ctx context.Context, dead, replica string, within time.Duration) (time.Time, error) {
	var clients []*redis.Client
	for _, addr := range rc.addrs {
		if addr != dead {
			clients = append(clients, redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1,
				DialTimeout: 100 * time.Millisecond, ReadTimeout: 500 * time.Millisecond}))
		}
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	promoted := func() bool {
		for _, c := range clients {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
			nodes, err := clusterNodesOf(ctx, c)
			if err != nil {
				return false
			}
			for _, n := range nodes {
				if n.addr == replica && (!strings.Contains(n.flags, "master") || strings.Contains(n.flags, "fail")) {
					return false
				}
			}
		}
		return true
	}
	for deadline := time.Now().Add(within); ; {
		if promoted() {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("replica %s not promoted within %v of the death of %s", replica, within, dead)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

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
			idx, n, _ := strings.Cut(v, ":")
			i, err1 := strconv.ParseInt(idx, 10, 64)
			units, err2 := strconv.ParseInt(n, 10, 64)
			if err1 != nil || err2 != nil {
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
	rc := startCluster(t)
	cfg := failoverConfig().withDefaults()
	ctx := context.Background()

	// The victim is the master of the most keys of the mode it owns fewest of.
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.addrs, MaxRetries: -1})
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
	replica, err := rc.replicaOf(victim)
	if err != nil {
		t.Fatal(err)
	}

	var killed, promoted time.Time
	closed, fallback := runClients(t, Cluster(rc.addrs...), cfg, Fault{
		Name: "Cluster master killed",
		Inject: func(context.Context) error {
			killed = time.Now()
			rc.servers[victim].Stop()
			return nil
		},
		Heal: func(ctx context.Context) error {
			var err error
			promoted, err = rc.waitPromoted(ctx, victim, replica, 30*time.Second)
			return err
		},
	})
	t.Logf("master %s killed; replica %s promoted %v later (the failure mode's gap, and the fault's span in the reports)",
		victim, replica, promoted.Sub(killed).Round(time.Millisecond))

	counts := storedCounts(t, Cluster(rc.addrs...), cfg)
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
		if bound := clusterRecoveryBound(cfg); victimRec > bound {
			t.Errorf("%s: Redis decided again on every key of the dead master %v after the promotion, want at most %v", r.Mode, victimRec, bound)
		}
		if r.BreakerClosed != r.BreakerOpened {
			t.Errorf("%s: breaker opened %d times, closed %d: want every one closed", r.Mode, r.BreakerOpened, r.BreakerClosed)
		}
		switch r.Mode {
		case FailClosed:
			if r.OverAdmitted > lost {
				t.Errorf("fail-closed: over-admitted %d units, want at most the %d the replica lost", r.OverAdmitted, lost)
			}
		case Fallback:
			// Redis's limit, what it lost, and the local shares (the limit again).
			if r.WorstWindow > 2*cfg.Limit+lost {
				t.Errorf("fallback: %d units in one window, want at most 2×%d + %d lost", r.WorstWindow, cfg.Limit, lost)
			}
		}
	}
}
