package region

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests start their own redis-server processes on free loopback ports,
// with persistence off, as redisstore's tests do: three regions and one
// aggregate, shared by the package's tests (each test uses its own key
// prefix) and stopped by TestMain.

var (
	serversMu sync.Mutex
	servers   []*exec.Cmd
	tmpDir    string

	fleetOnce  sync.Once
	fleetAddrs []string // three regions, then the aggregate
	fleetErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	serversMu.Lock()
	for _, c := range servers {
		c.Process.Kill()
		c.Wait()
	}
	serversMu.Unlock()
	if tmpDir != "" {
		os.RemoveAll(tmpDir)
	}
	os.Exit(code)
}

// needRedis skips t when redis-server is not installed, and fails it
// instead when the CI environment variable is set.
func needRedis(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg := "redis-server not found in PATH: install Redis (Debian: apt-get install redis-server) to run the Redis tests"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// startServer starts redis-server on a free loopback port and waits until
// it answers PING.
func startServer() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	serversMu.Lock()
	if tmpDir == "" {
		if tmpDir, err = os.MkdirTemp("", "region-test-"); err != nil {
			serversMu.Unlock()
			return "", err
		}
	}
	dir, err := os.MkdirTemp(tmpDir, "node-")
	serversMu.Unlock()
	if err != nil {
		return "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "yes")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start redis-server: %w", err)
	}
	serversMu.Lock()
	servers = append(servers, cmd)
	serversMu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("redis-server on %s did not answer PING: %v\n%s", addr, err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fleet returns the addresses of the three regions' servers and the
// aggregate's.
func fleet(t testing.TB) (regions []string, aggregate string) {
	t.Helper()
	needRedis(t)
	fleetOnce.Do(func() {
		for range 4 {
			addr, err := startServer()
			if err != nil {
				fleetErr = err
				return
			}
			fleetAddrs = append(fleetAddrs, addr)
		}
	})
	if fleetErr != nil {
		t.Fatal(fleetErr)
	}
	return fleetAddrs[:3], fleetAddrs[3]
}

// newClient returns a client of addr with the settings redisstore
// recommends, closed when t ends.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

var prefixSeq struct {
	sync.Mutex
	n int
}

// uniquePrefix returns a key prefix no other test uses.
func uniquePrefix(t testing.TB) string {
	prefixSeq.Lock()
	defer prefixSeq.Unlock()
	prefixSeq.n++
	return fmt.Sprintf("t%d-%d", prefixSeq.n, time.Now().UnixNano())
}
