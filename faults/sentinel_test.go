package faults

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redisserver"
)

// sentinelMaster is the name the Sentinels give the master they watch.
const sentinelMaster = "faults"

// sentinelSetup is one master, its replica and three Sentinels watching
// them (quorum 2, down after 1 s, failover timeout 2 s), on redis-servers
// of their own, stopped when the test ends.
type sentinelSetup struct {
	master, replica *redisserver.Server
	sentinels       []string
}

// startSentinels starts a sentinelSetup, ready: the replica in sync,
// every Sentinel knowing it and the other Sentinels.
func startSentinels(t *testing.T) *sentinelSetup {
	t.Helper()
	s := redisserver.StartSentinelT(t, redisserver.SentinelConfig{
		Name: sentinelMaster, Replicas: 1, Sentinels: 3, Quorum: 2,
		DownAfter: time.Second, FailoverTimeout: 2 * time.Second,
	})
	return &sentinelSetup{master: s.Master, replica: s.Replicas[0], sentinels: s.Addrs}
}

// poll calls f every 10 ms until it returns nil, and returns its last
// error if it has not within.
func poll(ctx context.Context, within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitSwitched waits until a Sentinel names the replica as the master and
// the replica says it is one, and returns when it saw it; and then until
// every Sentinel names it, and returns when.
func (ss *sentinelSetup) waitSwitched(ctx context.Context, within time.Duration) (first, all time.Time, err error) {
	var clients []*redis.SentinelClient
	for _, addr := range ss.sentinels {
		clients = append(clients, redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1,
			DialTimeout: 100 * time.Millisecond, ReadTimeout: 500 * time.Millisecond}))
	}
	replica := redis.NewClient(&redis.Options{Addr: ss.replica.Addr, MaxRetries: -1,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
	defer func() {
		for _, c := range clients {
			c.Close()
		}
		replica.Close()
	}()
	switched := func(c *redis.SentinelClient) bool {
		a, err := c.GetMasterAddrByName(ctx, sentinelMaster).Result()
		return err == nil && len(a) == 2 && net.JoinHostPort(a[0], a[1]) == ss.replica.Addr
	}
	err = poll(ctx, within, func() error {
		info, err := replica.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			return fmt.Errorf("replica %s not promoted: %v", ss.replica.Addr, err)
		}
		for _, c := range clients {
			if switched(c) {
				return nil
			}
		}
		return fmt.Errorf("no Sentinel names %s the master", ss.replica.Addr)
	})
	if err != nil {
		return first, all, err
	}
	first = time.Now()
	err = poll(ctx, within, func() error {
		for _, c := range clients {
			if !switched(c) {
				return fmt.Errorf("a Sentinel does not name %s the master yet", ss.replica.Addr)
			}
		}
		return nil
	})
	return first, time.Now(), err
}

// sentinelRecoveryBound is how soon after the switch Redis must decide
// again for every key on every instance. After PoolSize dial failures in a
// row (the dead master), go-redis's pool fails every dial at once with the
// last error and probes once a second; the failover client's probe asks a
// Sentinel for the master, so it reaches the new one at the first probe
// after the switch, within a second. A breaker's probe comes within the
// cool-down; the rest is margin for a loaded machine.
func sentinelRecoveryBound(cfg Config) time.Duration { return cfg.CoolDown + 3*time.Second }

// TestSentinelFailover fails the master over to its replica under
// traffic through long-lived failover clients (redis.NewFailoverClient),
// by killing it (SIGKILL) and by SENTINEL FAILOVER, and checks what
// TestClusterMasterKill does: no error to the caller, decisions within
// RemoteTimeout, Redis deciding again within sentinelRecoveryBound of the
// switch, and over-admission failing closed bounded by what the new
// master had not received.
func TestSentinelFailover(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(ctx context.Context, ss *sentinelSetup) error
	}{
		{"master killed", func(_ context.Context, ss *sentinelSetup) error {
			ss.master.Stop()
			return nil
		}},
		{"SENTINEL FAILOVER", func(ctx context.Context, ss *sentinelSetup) error {
			s := redis.NewSentinelClient(&redis.Options{Addr: ss.sentinels[0], MaxRetries: -1})
			defer s.Close()
			return s.Failover(ctx, sentinelMaster).Err()
		}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			ss := startSentinels(t)
			cfg := failoverConfig().withDefaults()
			var injected, first, all time.Time
			closed, fallback := runClients(t, Sentinel(sentinelMaster, ss.sentinels...), cfg, Fault{
				Name: "Sentinel failover, " + tc.name,
				Inject: func(ctx context.Context) error {
					injected = time.Now()
					return tc.inject(ctx, ss)
				},
				Heal: func(ctx context.Context) error {
					var err error
					first, all, err = ss.waitSwitched(ctx, 30*time.Second)
					return err
				},
			})
			t.Logf("%s: the replica is the master, named by a Sentinel, %v later; by every Sentinel %v later",
				tc.name, first.Sub(injected).Round(time.Millisecond), all.Sub(injected).Round(time.Millisecond))
			counts := storedCounts(t, Node(ss.replica.Addr), cfg)
			for _, r := range []Report{closed, fallback} {
				var keys []string
				var rec time.Duration
				for key, d := range r.KeyRecovery {
					keys = append(keys, key)
					rec = max(rec, d)
				}
				lost := lostUnits(t, r, counts, keys)
				t.Logf("%s: Redis decided again on all %d keys %v after the switch (%v after the fault); the new master had not received %d units; over-admitted %d (worst window %d of %d)",
					r.Mode, len(keys), rec.Round(time.Millisecond), (rec + first.Sub(injected)).Round(time.Millisecond),
					lost, r.OverAdmitted, r.WorstWindow, cfg.Limit)
				checkPromotion(t, r, cfg, rec, sentinelRecoveryBound(cfg), lost)
			}
		})
	}
}
