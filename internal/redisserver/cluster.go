package redisserver

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterConfig describes the Redis Cluster that [StartCluster] starts.
type ClusterConfig struct {
	// Masters is the number of masters, which redis-cli gives equal
	// shares of the 16384 slots; zero means 3, redis-cli's minimum.
	Masters int
	// ReplicasPerMaster is the number of replicas of each master.
	ReplicasPerMaster int
	// NodeTimeout is every node's cluster-node-timeout, to the
	// millisecond: how long a master is unreachable before the others
	// mark it failed and one of its replicas is promoted. Zero means
	// Redis's default, 15 s.
	NodeTimeout time.Duration
	// ReadyWithin bounds the wait, once redis-cli has created the
	// Cluster, until every node is ready (see [StartCluster]); zero means
	// 30 s.
	ReadyWithin time.Duration
	// Extra is more configuration for every node, as for [Start].
	Extra []string
}

// FailoverConfig is the Cluster the failover tests kill a master of: three
// masters with one replica each, a node timeout of 2 s (a replica is
// promoted a few seconds after its master dies) and 30 s to get ready.
func FailoverConfig() ClusterConfig {
	return ClusterConfig{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second, ReadyWithin: 30 * time.Second}
}

// Cluster is a Redis Cluster on redis-servers of a [Group], started by
// [StartCluster]. Its methods are safe for concurrent use. Those that ask
// the Cluster (CLUSTER NODES, CLUSTER INFO) speak RESP to its nodes
// directly, each request on a connection of its own and within a bound.
type Cluster struct {
	// Addrs holds every node's address, "127.0.0.1:port", in the order the
	// nodes were started; which are masters is for [Cluster.Masters] to
	// say.
	Addrs   []string
	servers map[string]*Server // by address
}

// StartCluster starts the Cluster cfg describes on new servers of g, each
// with persistence off, a cluster bus port of its own and its nodes.conf
// in its own directory; joins them with redis-cli --cluster create, which
// must be installed (see [Need]); and waits, at most cfg.ReadyWithin,
// until every node says cluster_state:ok, knows every node, and, if a
// replica, has its link to its master up. On error it stops the servers
// it started; otherwise they run until [Cluster.Stop] or g's Stop.
func StartCluster(g *Group, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Masters == 0 {
		cfg.Masters = 3
	}
	if cfg.ReadyWithin == 0 {
		cfg.ReadyWithin = 30 * time.Second
	}
	if msg := Missing("redis-server", "redis-cli"); msg != "" {
		return nil, errors.New("redisserver: " + msg)
	}
	c := &Cluster{servers: make(map[string]*Server)}
	started := false
	defer func() {
		if !started {
			c.Stop()
		}
	}()
	for range cfg.Masters * (1 + cfg.ReplicasPerMaster) {
		dir, err := g.Dir()
		if err != nil {
			return nil, err
		}
		s, err := g.startIn(dir, func() ([]string, error) {
			bus, err := FreePort() // chosen again with the port when either was taken
			if err != nil {
				return nil, err
			}
			args := []string{"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-port", strconv.Itoa(bus)}
			if cfg.NodeTimeout > 0 {
				args = append(args, "--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10))
			}
			return append(args, cfg.Extra...), nil
		})
		if err != nil {
			return nil, err
		}
		c.Addrs = append(c.Addrs, s.Addr)
		c.servers[s.Addr] = s
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, c.Addrs...),
		"--cluster-replicas", strconv.Itoa(cfg.ReplicasPerMaster), "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redisserver: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitReady(cfg.ReadyWithin); err != nil {
		return nil, err
	}
	started = true
	return c, nil
}

// StartClusterT starts a Cluster for t, as [StartCluster] does, in t's
// temporary directory, stopped when t ends. It skips or fails t as [Need]
// does when redis-server or redis-cli is not installed.
func StartClusterT(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	Need(t, "redis-server", "redis-cli")
	g := &Group{dir: t.TempDir()}
	t.Cleanup(g.Stop)
	c, err := StartCluster(g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitReady waits, at most within, until every node says
// cluster_state:ok, knows every node, and, if a replica, has its link to
// its master up. It polls every 20 ms.
func (c *Cluster) waitReady(within time.Duration) error {
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for _, addr := range c.Addrs {
		n := &client{addr: addr, dialTimeout: 5 * time.Second, timeout: 3 * time.Second}
		for {
			err := n.ready(ctx, len(c.Addrs))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				n.close()
				return fmt.Errorf("redisserver: cluster node %s not ready: %v", addr, err)
			}
			time.Sleep(20 * time.Millisecond) // polling the cluster's own progress
		}
		n.close()
	}
	return nil
}

// ready returns nil once n's node says cluster_state:ok, knows nodes
// nodes, and, if a replica, has its link to its master up.
func (n *client) ready(ctx context.Context, nodes int) error {
	info, err := n.do(ctx, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", nodes)) {
		return fmt.Errorf("cluster info:\n%s", info)
	}
	repl, err := n.do(ctx, "INFO", "replication")
	if err != nil {
		return err
	}
	if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
		return fmt.Errorf("replica not in sync:\n%s", repl)
	}
	return nil
}

// Server returns the node at addr, or nil if addr is not one of c's.
func (c *Cluster) Server(addr string) *Server { return c.servers[addr] }

// Kill kills the node at addr (SIGKILL, as [Server.Stop] does) and waits
// for it to exit; the others see it fail after the node timeout.
func (c *Cluster) Kill(addr string) error {
	s := c.servers[addr]
	if s == nil {
		return fmt.Errorf("redisserver: %s is no node of the cluster %v", addr, c.Addrs)
	}
	s.Stop()
	return nil
}

// Stop kills every node of c that runs.
func (c *Cluster) Stop() {
	for _, s := range c.servers {
		s.Stop()
	}
}

// Node is a Cluster node as one line of CLUSTER NODES shows it.
type Node struct {
	ID string
	// Addr is "127.0.0.1:port", without the cluster bus port.
	Addr string
	// Flags are "myself", "master", "slave", "fail?", "fail"… (see [Node.Has]).
	Flags []string
	// MasterID is a replica's master's ID; "" for a master.
	MasterID string
	// Slots are the slots a master serves, in ranges.
	Slots []SlotRange
}

// SlotRange is the slots From to To, both included.
type SlotRange struct{ From, To int }

// Has reports whether n has flag.
func (n Node) Has(flag string) bool { return slices.Contains(n.Flags, flag) }

// failing reports whether n is failed or suspected so.
func (n Node) failing() bool { return n.Has("fail") || n.Has("fail?") }

// Serves reports whether n serves slot.
func (n Node) Serves(slot int) bool {
	for _, r := range n.Slots {
		if r.From <= slot && slot <= r.To {
			return true
		}
	}
	return false
}

// parseNodes parses a CLUSTER NODES reply. Slots being imported or
// migrated ("[slot->-id]") are left out.
func parseNodes(text string) ([]Node, error) {
	var nodes []Node
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("redisserver: CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := Node{ID: f[0], Addr: addr, Flags: strings.Split(f[2], ",")}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			from, to, isRange := strings.Cut(s, "-")
			if !isRange {
				to = from
			}
			a, err1 := strconv.Atoi(from)
			b, err2 := strconv.Atoi(to)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("redisserver: CLUSTER NODES line %q: slots %q", line, s)
			}
			n.Slots = append(n.Slots, SlotRange{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// Nodes returns every node as the first of c's nodes that answers sees
// them, in its CLUSTER NODES order.
func (c *Cluster) Nodes() ([]Node, error) {
	var errs []error
	for _, addr := range c.Addrs {
		nodes, err := nodesAt(addr)
		if err == nil {
			return nodes, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("redisserver: no cluster node answered CLUSTER NODES: %w", errors.Join(errs...))
}

// nodesAt returns every node as the node at addr sees them.
func nodesAt(addr string) ([]Node, error) {
	out, err := Do(addr, 3*time.Second, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	return parseNodes(out)
}

// Masters returns the masters not failed, as [Cluster.Nodes] sees them,
// in the order of their first slots (those with none last).
func (c *Cluster) Masters() ([]Node, error) {
	nodes, err := c.Nodes()
	if err != nil {
		return nil, err
	}
	var masters []Node
	for _, n := range nodes {
		if n.Has("master") && !n.Has("fail") {
			masters = append(masters, n)
		}
	}
	first := func(n Node) int {
		if len(n.Slots) == 0 {
			return Slots
		}
		return n.Slots[0].From
	}
	slices.SortStableFunc(masters, func(a, b Node) int { return first(a) - first(b) })
	return masters, nil
}

// MasterOf returns the address of the master serving slot (see
// [KeySlot]), as [Cluster.Nodes] sees it.
func (c *Cluster) MasterOf(slot int) (string, error) {
	masters, err := c.Masters()
	if err != nil {
		return "", err
	}
	for _, m := range masters {
		if m.Serves(slot) {
			return m.Addr, nil
		}
	}
	return "", fmt.Errorf("redisserver: no master serves slot %d", slot)
}

// ReplicaOf returns the address of a replica of the master at addr, as
// that master sees its nodes.
func (c *Cluster) ReplicaOf(addr string) (string, error) {
	nodes, err := nodesAt(addr)
	if err != nil {
		return "", err
	}
	var id string
	for _, n := range nodes {
		if n.Addr == addr {
			id = n.ID
		}
	}
	for _, n := range nodes {
		if id != "" && n.MasterID == id {
			return n.Addr, nil
		}
	}
	return "", fmt.Errorf("redisserver: no replica of %s in %v", addr, nodes)
}

// WaitPromoted waits, at most within and while ctx lasts, until every node
// but dead says cluster_state:ok and sees replica as a master, not failed
// nor suspected so, and returns when it saw it. It polls every 10 ms; each
// node has 100 ms to accept a connection and 500 ms to answer, else it is
// taken as not agreeing yet.
func (c *Cluster) WaitPromoted(ctx context.Context, dead, replica string, within time.Duration) (time.Time, error) {
	var clients []*client
	for _, addr := range c.Addrs {
		if addr != dead {
			clients = append(clients, &client{addr: addr, dialTimeout: 100 * time.Millisecond, timeout: 500 * time.Millisecond})
		}
	}
	defer func() {
		for _, n := range clients {
			n.close()
		}
	}()
	promoted := func() bool {
		for _, n := range clients {
			info, err := n.do(ctx, "CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
			out, err := n.do(ctx, "CLUSTER", "NODES")
			if err != nil {
				return false
			}
			nodes, err := parseNodes(out)
			if err != nil {
				return false
			}
			for _, nd := range nodes {
				if nd.Addr == replica && (!nd.Has("master") || nd.failing()) {
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
			return time.Time{}, fmt.Errorf("redisserver: replica %s not promoted within %v of the death of %s", replica, within, dead)
		}
		t := time.NewTimer(10 * time.Millisecond) // polling the cluster's own failover
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return time.Time{}, ctx.Err()
		}
	}
}

// client asks one node, on a connection it keeps until an error. It is
// for one goroutine.
type client struct {
	addr                 string
	dialTimeout, timeout time.Duration
	c                    *conn
}

// do sends a command and reads its reply (see [Do]) within n's timeout,
// or ctx's deadline if sooner, dialing first if needed.
func (n *client) do(ctx context.Context, args ...string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	deadline := time.Now().Add(n.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if n.c == nil {
		c, err := dial(n.addr, n.dialTimeout)
		if err != nil {
			return "", err
		}
		n.c = c
	}
	reply, err := n.c.do(deadline, args...)
	if err != nil && !errors.Is(err, ErrNil) {
		n.close() // its state is unknown: the next request dials again
	}
	return reply, err
}

func (n *client) close() {
	if n.c != nil {
		n.c.Close()
		n.c = nil
	}
}

// Slots is the number of a Cluster's hash slots.
const Slots = 16384

// KeySlot returns the hash slot of key, as CLUSTER KEYSLOT does: CRC16 of
// the key, or of its hash tag (what is between its first "{" and the next
// "}", if not empty), modulo [Slots].
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16 // CRC16-CCITT (XMODEM): polynomial 0x1021, initial 0
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}
