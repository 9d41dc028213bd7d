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
	servers redisserver.Group // stopped by TestMain

	fleetOnce  sync.Once
	fleetAddrs []string // three regions, then the aggregate
	fleetErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	servers.Stop()
	os.Exit(code)
}

// fleet returns the addresses of the three regions' servers and the
// aggregate's.
func fleet(t testing.TB) (regions []string, aggregate string) {
	t.Helper()
	redisserver.Need(t)
	fleetOnce.Do(func() {
		for range 4 {
			srv, err := servers.Start()
			if err != nil {
				fleetErr = err
				return
			}
			fleetAddrs = append(fleetAddrs, srv.Addr)
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
