package benchmarks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestCallgrind counts the instructions a Redis server runs per decision
// for each command of TestServerRate, without the noise of a shared
// machine's timing: start a redis-server under callgrind, with
// instrumentation on, and point the test at it,
//
//	valgrind --tool=callgrind --callgrind-out-file=/tmp/cg/out.%p \
//		redis-server --port 7391 --save '' --appendonly no &
//	CALLGRIND_ADDR=127.0.0.1:7391 CALLGRIND_PID=$! CALLGRIND_OUT=/tmp/cg \
//		go test -run TestCallgrind -v .
//
// Each command is sent by redis-benchmark (one connection, 16 pipelined,
// random keys among 1e6 on an empty keyspace) twice, 2,000 and 6,000
// calls, each between a zeroing and a dump of callgrind's counters; the
// slope between the two is the instructions per call, reading and replying
// included, the fixed costs of a run cancelled out.
func TestCallgrind(t *testing.T) {
	addr, pid, dir := os.Getenv("CALLGRIND_ADDR"), os.Getenv("CALLGRIND_PID"), os.Getenv("CALLGRIND_OUT")
	if addr == "" || pid == "" || dir == "" {
		t.Skip("CALLGRIND_ADDR, CALLGRIND_PID and CALLGRIND_OUT name a redis-server under callgrind")
	}
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	scripts := recordScripts(t, addr)
	host, port, _ := strings.Cut(addr, ":")
	count := func(s script, n int) int64 {
		admin.FlushAll(ctx)
		if out, err := exec.Command("callgrind_control", "-z", pid).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control -z: %v\n%s", err, out)
		}
		out, err := exec.Command("redis-benchmark", append([]string{"-h", host, "-p", port, "-c", "1", "-P", "16",
			"-n", strconv.Itoa(n), "-r", "1000000", "-q"}, s.args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: redis-benchmark: %v\n%s", s.name, err, out)
		}
		if out, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control -d: %v\n%s", err, out)
		}
		// The newest dump holds the counts since the zeroing.
		files, _ := filepath.Glob(filepath.Join(dir, "*"+pid+".*"))
		var newest string
		var at int64
		for _, f := range files {
			if st, err := os.Stat(f); err == nil && st.ModTime().UnixNano() >= at {
				newest, at = f, st.ModTime().UnixNano()
			}
		}
		data, err := os.ReadFile(newest)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "summary: "); ok {
				total, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				return total
			}
		}
		t.Fatalf("%s: no summary", newest)
		return 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| script | instructions per call | per decision |\n|---|---|---|\n")
	for _, s := range scripts {
		lo, hi := count(s, 2000), count(s, 6000)
		per := float64(hi-lo) / 4000
		fmt.Fprintf(&b, "| %s | %.0f | %.0f |\n", s.name, per, per/float64(s.per))
	}
	t.Logf("redis-server instructions (callgrind):\n%s", b.String())
}
