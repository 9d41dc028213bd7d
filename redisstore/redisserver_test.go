package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests start their own redis-server processes on free loopback ports,
// in a temporary directory, with persistence off: they never touch another
// Redis. One single node and one 3-master Cluster are shared by the
// package's tests (each test uses its own key prefix) and stopped by
// TestMain; tests that stop and restart Redis start their own.

var (
	tmpDir    string
	serversMu sync.Mutex
	servers   []*redisServer // stopped by TestMain

	singleOnce sync.Once
	singleAddr string
	singleErr  error

	clusterOnce  sync.Once
	clusterAddrs []string
	clusterErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	serversMu.Lock()
	for _, s := range servers {
		s.stop()
	}
	serversMu.Unlock()
	if tmpDir != "" {
		os.RemoveAll(tmpDir)
	}
	os.Exit(code)
}

// needRedis skips t when redis-server or redis-cli is not installed, and
// fails it instead when the CI environment variable is set.
func needRedis(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			msg := fmt.Sprintf("%s not found in PATH: install Redis (Debian: apt-get install redis-server) to run the Redis tests", bin)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// redisServer is one redis-server process started by the tests.
type redisServer struct {
	addr string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func testDir() (string, error) {
	serversMu.Lock()
	defer serversMu.Unlock()
	if tmpDir == "" {
		d, err := os.MkdirTemp("", "redisstore-test-")
		if err != nil {
			return "", err
		}
		tmpDir = d
	}
	return os.MkdirTemp(tmpDir, "node-")
}

// startServer starts redis-server on a free loopback port, with extra
// configuration, and waits until it answers PING.
func startServer(extra ...string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := testDir()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--protected-mode", "yes",
	}, extra...)
	s := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port), args: args}
	serversMu.Lock()
	servers = append(servers, s)
	serversMu.Unlock()
	return s, s.start()
}

// start runs the server (again) on its address.
func (s *redisServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command("redis-server", s.args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			s.cmd = nil
			return fmt.Errorf("redis-server on %s did not answer PING: %v\n%s", s.addr, err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop kills the server, if it runs, and waits for it to exit.
func (s *redisServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// singleNode returns the address of the shared single-node server.
func singleNode(t testing.TB) string {
	t.Helper()
	needRedis(t)
	singleOnce.Do(func() {
		var s *redisServer
		s, singleErr = startServer()
		if s != nil {
			singleAddr = s.addr
		}
	})
	if singleErr != nil {
		t.Fatal(singleErr)
	}
	return singleAddr
}

// cluster returns the addresses of the shared 3-master Cluster.
func cluster(t testing.TB) []string {
	t.Helper()
	needRedis(t)
	clusterOnce.Do(func() { clusterAddrs, clusterErr = startCluster() })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return clusterAddrs
}

func startCluster() ([]string, error) {
	var addrs []string
	for range 3 {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := testDir()
		if err != nil {
			return nil, err
		}
		s, err := startServer("--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "2000")
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, s.addr)
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				return nil, fmt.Errorf("cluster node %s not ok: %v\n%s", addr, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}
	return addrs, nil
}

// newClient returns a client of addr with the settings the package
// documentation recommends, closed when t ends.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// newClusterClient returns a Cluster client with the recommended settings.
func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 addrs,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

var prefixSeq struct {
	sync.Mutex
	n int
}

// uniquePrefix returns a key prefix no other test or subtest uses.
func uniquePrefix(name string) string {
	prefixSeq.Lock()
	defer prefixSeq.Unlock()
	prefixSeq.n++
	return fmt.Sprintf("t%d-%s", prefixSeq.n, strings.NewReplacer("/", "-", "{", "", "}", "").Replace(name))
}
