package redisserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelConfig describes the Sentinel setup that [StartSentinel] starts.
type SentinelConfig struct {
	// Name is the name the Sentinels give the master; zero means
	// "ratekit".
	Name string
	// Replicas is the number of the master's replicas.
	Replicas int
	// Sentinels is the number of Sentinels; zero means 1.
	Sentinels int
	// Quorum is how many Sentinels must agree that the master is down;
	// zero means a majority of them.
	Quorum int
	// DownAfter is how long the master is unreachable before a Sentinel
	// thinks it down, to the millisecond; zero means 1 s.
	DownAfter time.Duration
	// FailoverTimeout is the Sentinels' failover-timeout, to the
	// millisecond; zero means 2 s.
	FailoverTimeout time.Duration
	// ReadyWithin bounds the wait until the replicas are in sync and every
	// Sentinel knows them and the other Sentinels; zero means 20 s.
	ReadyWithin time.Duration
}

// Sentinel is a master, its replicas and the Sentinels watching them, on
// redis-servers of a [Group], started by [StartSentinel].
type Sentinel struct {
	// Name is the master's name, for a client's MasterName.
	Name string
	// Master is the master as started; after a failover another server
	// is.
	Master *Server
	// Replicas are the master's replicas as started.
	Replicas []*Server
	// Addrs holds the Sentinels' addresses, for a client's
	// SentinelAddrs.
	Addrs     []string
	sentinels []*Server
}

// StartSentinel starts the setup cfg describes on new servers of g: the
// master and its replicas as [Start] does, and the Sentinels, each with
// its configuration file (which a Sentinel rewrites) in a directory of its
// own; and waits, at most cfg.ReadyWithin, until every replica's link to
// the master is up and every Sentinel sees the master ok with its replicas
// and the other Sentinels. On error it stops the servers it started;
// otherwise they run until [Sentinel.Stop] or g's Stop.
func StartSentinel(g *Group, cfg SentinelConfig) (*Sentinel, error) {
	if cfg.Name == "" {
		cfg.Name = "ratekit"
	}
	cfg.Sentinels = max(cfg.Sentinels, 1)
	if cfg.Quorum == 0 {
		cfg.Quorum = cfg.Sentinels/2 + 1
	}
	if cfg.DownAfter == 0 {
		cfg.DownAfter = time.Second
	}
	if cfg.FailoverTimeout == 0 {
		cfg.FailoverTimeout = 2 * time.Second
	}
	if cfg.ReadyWithin == 0 {
		cfg.ReadyWithin = 20 * time.Second
	}
	if msg := Missing("redis-server"); msg != "" {
		return nil, errors.New("redisserver: " + msg)
	}
	s := &Sentinel{Name: cfg.Name}
	started := false
	defer func() {
		if !started {
			s.Stop()
		}
	}()
	var err error
	if s.Master, err = g.Start(); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(s.Master.Addr)
	for range cfg.Replicas {
		r, err := g.Start("--replicaof", host, port)
		if err != nil {
			return nil, err
		}
		s.Replicas = append(s.Replicas, r)
	}
	deadline := time.Now().Add(cfg.ReadyWithin)
	for _, r := range s.Replicas {
		if err := pollUntil(deadline, func() error {
			info, err := Do(r.Addr, time.Second, "INFO", "replication")
			if err == nil && !strings.Contains(info, "master_link_status:up") {
				err = fmt.Errorf("replica %s not in sync:\n%s", r.Addr, info)
			}
			return err
		}); err != nil {
			return nil, err
		}
	}
	for range cfg.Sentinels {
		dir, err := g.Dir()
		if err != nil {
			return nil, err
		}
		sn, err := startSentinel(dir, cfg, host, port)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		g.servers = append(g.servers, sn)
		g.mu.Unlock()
		s.sentinels = append(s.sentinels, sn)
		s.Addrs = append(s.Addrs, sn.Addr)
	}
	want := fmt.Sprintf("name=%s,status=ok,address=%s,slaves=%d,sentinels=%d", cfg.Name, s.Master.Addr, cfg.Replicas, cfg.Sentinels)
	for _, addr := range s.Addrs {
		if err := pollUntil(deadline, func() error {
			info, err := Do(addr, time.Second, "INFO", "sentinel")
			if err == nil && !strings.Contains(info, want) {
				err = fmt.Errorf("sentinel %s: want %q in\n%s", addr, want, info)
			}
			return err
		}); err != nil {
			return nil, err
		}
	}
	started = true
	return s, nil
}

// startSentinel starts one Sentinel watching the master at host:port, its
// configuration file in dir, on a free port (chosen again when taken).
func startSentinel(dir string, cfg SentinelConfig, host, port string) (*Server, error) {
	conf := filepath.Join(dir, "sentinel.conf")
	var err error
	for range portAttempts {
		var p int
		if p, err = FreePort(); err != nil {
			return nil, err
		}
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
			"sentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %[3]s %[7]d\n"+
			"sentinel failover-timeout %[3]s %[8]d\n",
			p, dir, cfg.Name, host, port, cfg.Quorum, cfg.DownAfter.Milliseconds(), cfg.FailoverTimeout.Milliseconds())
		if err = os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		sn := &Server{Addr: "127.0.0.1:" + strconv.Itoa(p), args: []string{conf, "--sentinel"}}
		if err = sn.Start(); !errors.Is(err, errPortTaken) {
			return sn, err
		}
	}
	return nil, err
}

// pollUntil calls f every 10 ms until it returns nil, and returns its
// last error if it has not by deadline.
func pollUntil(deadline time.Time, f func() error) error {
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond) // polling the servers' own progress
	}
}

// StartSentinelT starts a Sentinel setup for t, as [StartSentinel] does,
// in t's temporary directory, stopped when t ends. It skips or fails t as
// [Need] does when redis-server is not installed.
func StartSentinelT(t testing.TB, cfg SentinelConfig) *Sentinel {
	t.Helper()
	Need(t)
	g := &Group{dir: t.TempDir()}
	t.Cleanup(g.Stop)
	s, err := StartSentinel(g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Stop kills every server of s that runs: the Sentinels first.
func (s *Sentinel) Stop() {
	for _, sn := range s.sentinels {
		sn.Stop()
	}
	for _, r := range s.Replicas {
		r.Stop()
	}
	if s.Master != nil {
		s.Master.Stop()
	}
}
