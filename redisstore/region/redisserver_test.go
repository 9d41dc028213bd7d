package region

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redisserver"
)

// The tests start their own redis-server processes on free loopback ports,
// with persistence off, as redisstore's tests do: three regions and one
// aggregate, shared by the package's tests (each test uses its own key
// prefix) and stopped by TestMain.

var (
	serversMu sync.Mutex
	servers   []*redisserver.Server // stopped by TestMain
	tmpDir    string

	fleetOnce  sync.Once
	fleetAddrs []string // three regions, then the aggregate
	fleetErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	serversMu.Lock()
	for _, s := range servers {
		s.Stop()
	}
	serversMu.Unlock()
	if tmpDir != "" {
		os.RemoveAll(tmpDir)
	}
	os.Exit(code)
}

// startServer starts a redis-server of the package's on a free loopback
// port, stopped by TestMain.
func startServer() (string, error) {
	serversMu.Lock()
	defer serversMu.Unlock()
	if tmpDir == "" {
		d, err := os.MkdirTemp("", "region-test-")
		if err != nil {
			return "", err
		}
		tmpDir = d
	}
	dir, err := os.MkdirTemp(tmpDir, "node-")
	if err != nil {
		return "", err
	}
	srv, err := redisserver.Start(dir)
	if err != nil {
		return "", err
	}
	servers = append(servers, srv)
	return srv.Addr, nil
}

// fleet returns the addresses of the three regions' servers and the
// aggregate's.
func fleet(t testing.TB) (regions []string, aggregate string) {
	t.Helper()
	redisserver.Need(t)
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
