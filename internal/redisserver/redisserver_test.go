package redisserver

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":             0x31c3, // the CRC16 check value
		"foo":                   12182,
		"{user1000}.following":  KeySlot("user1000"),
		"foo{{bar}}zap":         KeySlot("{bar"),
		"foo{bar}{zap}":         KeySlot("bar"),
		"{user1000}.followers}": KeySlot("user1000"),
	} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if KeySlot("foo{}{bar}") == KeySlot("bar") {
		t.Error("an empty hash tag is no tag: the whole key is hashed")
	}
}

func TestParseNodes(t *testing.T) {
	const out = `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,hostname4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002,hostname2 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003,hostname3 master - 0 1426238318243 3 connected 10923-16383 [93->-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001,hostname1 myself,master,fail? - 0 0 1 connected 0-5460 16383
`
	nodes, err := parseNodes(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 4 {
		t.Fatalf("%d nodes: %+v", len(nodes), nodes)
	}
	r, m := nodes[0], nodes[3]
	if r.Addr != "127.0.0.1:30004" || r.MasterID != m.ID || !r.Has("slave") || r.Slots != nil {
		t.Errorf("replica %+v", r)
	}
	if m.Addr != "127.0.0.1:30001" || m.MasterID != "" || !m.Has("myself") || !m.failing() || m.Has("fail") ||
		!slices.Equal(m.Slots, []SlotRange{{0, 5460}, {16383, 16383}}) {
		t.Errorf("master %+v", m)
	}
	if !m.Serves(0) || !m.Serves(5460) || m.Serves(5461) || !nodes[1].Serves(5461) {
		t.Error("Serves")
	}
	if got := nodes[2].Slots; !slices.Equal(got, []SlotRange{{10923, 16383}}) {
		t.Errorf("slots %v: a slot in migration is left out", got)
	}
	if _, err := parseNodes("abc 127.0.0.1:1@2 master"); err == nil {
		t.Error("a short line parsed")
	}
}

func TestDo(t *testing.T) {
	addr := StartT(t)
	for _, tc := range []struct {
		args []string
		want string
		err  error
	}{
		{[]string{"SET", "k", "a\r\nb"}, "OK", nil},
		{[]string{"GET", "k"}, "a\r\nb", nil},
		{[]string{"GET", "missing"}, "", ErrNil},
		{[]string{"INCR", "n"}, "1", nil},
	} {
		got, err := Do(addr, time.Second, tc.args...)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%q: %q, %v; want %q, %v", tc.args, got, err, tc.want, tc.err)
		}
	}
	if _, err := Do(addr, time.Second, "INCR", "k"); err == nil {
		t.Error("INCR of a string: no error")
	}
	if _, err := Do(addr, time.Second, "KEYS", "*"); err == nil {
		t.Error("an array reply read")
	}
	if err := Ping(addr, time.Second); err != nil {
		t.Error(err)
	}
}

// TestCluster starts 3 masters with a replica each, kills the master of a
// slot and waits for its replica to take the slot.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a Cluster of 6 nodes and a failover")
	}
	c := StartClusterT(t, ClusterConfig{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: time.Second})
	if len(c.Addrs) != 6 {
		t.Fatalf("%d nodes", len(c.Addrs))
	}
	masters, err := c.Masters()
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	for _, m := range masters {
		for _, r := range m.Slots {
			if r.From != next {
				t.Fatalf("masters %+v: slot %d not served", masters, next)
			}
			next = r.To + 1
		}
	}
	if len(masters) != 3 || next != Slots {
		t.Fatalf("masters %+v", masters)
	}
	slot := KeySlot("{k}")
	owner, err := c.MasterOf(slot)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Do(owner, time.Second, "CLUSTER", "KEYSLOT", "{k}"); err != nil || got != strconv.Itoa(slot) {
		t.Fatalf("CLUSTER KEYSLOT {k} = %q, %v; want %d", got, err, slot)
	}
	replica, err := c.ReplicaOf(owner)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(owner); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill("127.0.0.1:1"); err == nil {
		t.Error("killed a node not of the cluster")
	}
	if _, err := c.WaitPromoted(context.Background(), owner, replica, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if got, err := c.MasterOf(slot); err != nil || got != replica {
		t.Errorf("slot %d served by %q (%v), want the promoted replica %s", slot, got, err, replica)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.WaitPromoted(ctx, replica, owner, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitPromoted after its context's end: %v", err)
	}
}

// A port taken between choosing and binding it is chosen again: here the
// first attempt's Cluster bus port is held by a listener of the test.
func TestStartPortTaken(t *testing.T) {
	Need(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	attempts := 0
	s, err := startWith(dir, func() ([]string, error) {
		attempts++
		bus := taken
		if attempts > 1 {
			if bus, err = FreePort(); err != nil {
				return nil, err
			}
		}
		return []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(bus)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if attempts != 2 {
		t.Errorf("%d attempts, want 2: the first finds its bus port taken", attempts)
	}
	if err := Ping(s.Addr, time.Second); err != nil {
		t.Error(err)
	}
}

func TestSentinel(t *testing.T) {
	s := StartSentinelT(t, SentinelConfig{Replicas: 1, Sentinels: 2})
	if len(s.Addrs) != 2 || len(s.Replicas) != 1 {
		t.Fatalf("%d Sentinels and %d replicas, want 2 and 1", len(s.Addrs), len(s.Replicas))
	}
	info, err := Do(s.Addrs[1], time.Second, "INFO", "sentinel")
	if err != nil || !strings.Contains(info, "address="+s.Master.Addr) {
		t.Fatalf("INFO sentinel: %q, %v; want the master %s", info, err, s.Master.Addr)
	}
	s.Stop()
	if err := Ping(s.Addrs[0], 200*time.Millisecond); err == nil {
		t.Error("a Sentinel answers after Stop")
	}
}
