package redisstore

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redisserver"
)

// The tests start their own redis-server processes on free loopback ports,
// in a temporary directory, with persistence off: they never touch another
// Redis. One single node and one 3-master Cluster are shared by the
// package's tests (each test uses its own key prefix) and stopped by
// TestMain; tests that stop and restart Redis start their own.

var (
	servers redisserver.Group // stopped by TestMain

	singleOnce sync.Once
	singleAddr string
	singleErr  error

	clusterOnce  sync.Once
	clusterAddrs []string
	clusterErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	servers.Stop()
	os.Exit(code)
}

// needRedis skips t when redis-server or redis-cli is not installed, and
// fails it instead when the CI environment variable is set.
func needRedis(t testing.TB) {
	t.Helper()
	redisserver.Need(t, "redis-server", "redis-cli")
}

// singleNode returns the address of the shared single-node server.
func singleNode(t testing.TB) string {
	t.Helper()
	needRedis(t)
	singleOnce.Do(func() {
		var s *redisserver.Server
		s, singleErr = servers.Start()
		if s != nil {
			singleAddr = s.Addr
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
	clusterOnce.Do(func() {
		var c *redisserver.Cluster
		c, clusterErr = redisserver.StartCluster(&servers, redisserver.ClusterConfig{
			Masters:     3,
			NodeTimeout: 2 * time.Second,
			ReadyWithin: 20 * time.Second,
		})
		if c != nil {
			clusterAddrs = c.Addrs
		}
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return clusterAddrs
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
