package benchmarks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	uluredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// TestServerRate measures the server's side: the decisions per second one
// Redis core sustains for each library's script, with no client library in
// the way. Each library makes one decision, on key "KEY", through a client
// whose hook records the EVALSHA it sends; then redis-benchmark sends that
// command from 16 connections, 16 pipelined each (-P 16), with the key
// replaced by one of 1e6 random ones, 200,000 decisions (so 12,500 calls
// of a batch script of 16), on an empty keyspace
// (FLUSHALL; the scripts stay loaded). Nine rounds, the commands
// interleaved, each round starting one further, so that noise and order
// hit them alike; the median is
// reported with the median usec_per_call of INFO commandstats (Redis CPU
// time per call, the command alone) and the server process's CPU time per
// decision (INFO cpu, reading and replying included). PING and INCR are
// the floor. The table is logged and, with BENCH_REPORT_DIR set (run.sh),
// written to serverrate.md.
func TestServerRate(t *testing.T) {
	needRedis(t)
	if testing.Short() {
		t.Skip("about two minutes of redis-benchmark")
	}
	bench, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Skip("redis-benchmark not installed")
	}
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer admin.Close()
	scripts := recordScripts(t, redisAddr)

	rate := regexp.MustCompile(`([0-9.]+) requests per second`)
	const rounds = 9
	rates := make([][]float64, len(scripts))
	usecs := make([][]float64, len(scripts))
	cpus := make([][]float64, len(scripts)) // process CPU µs per decision
	for round := range rounds {
		for j := range scripts {
			i := (j + round) % len(scripts) // each round starts with the next
			s := scripts[i]
			// Every command starts on an empty keyspace: one run after
			// another would otherwise find it fuller.
			admin.FlushAll(ctx)
			admin.ConfigResetStat(ctx)
			cpu0 := serverCPU(t, admin)
			host, port, _ := strings.Cut(redisAddr, ":")
			out, err := exec.Command(bench, append([]string{"-h", host, "-p", port, "-c", "16", "-P", "16",
				"-n", strconv.Itoa(200000 / s.per), "-r", "1000000", "-q"}, s.args...)...).CombinedOutput()
			m := rate.FindAllSubmatch(out, -1)
			if err != nil || m == nil {
				t.Fatalf("%s: redis-benchmark: %v\n%s", s.name, err, out)
			}
			v, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
			rates[i] = append(rates[i], v*float64(s.per))
			cpus[i] = append(cpus[i], (serverCPU(t, admin)-cpu0)*1e6/float64(200000/s.per*s.per))
			usecs[i] = append(usecs[i], usecPerCall(t, admin, strings.ToLower(s.args[0])))
		}
	}
	var ref float64
	for i, s := range scripts {
		if strings.HasPrefix(s.name, "redis_rate") {
			ref = median(rates[i])
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| script | decisions/s, one Redis core | × redis_rate | Redis CPU µs per call | per decision | Redis process CPU µs per decision |\n|---|---|---|---|---|---|\n")
	for i, s := range scripts {
		fmt.Fprintf(&b, "| %s | %.0f/s | %.2f× | %.2f | %.2f | %.2f |\n", s.name, median(rates[i]), median(rates[i])/ref, median(usecs[i]), median(usecs[i])/float64(s.per), median(cpus[i]))
	}
	t.Logf("server side, medians of %d rounds:\n%s", rounds, b.String())
	if dir := os.Getenv("BENCH_REPORT_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "serverrate.md"), []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// script is a command that makes per decisions: a library's one call.
type script struct {
	name string
	args []string
	per  int // decisions per call: 1, or a batch script's keys
}

// recordScripts returns the command each library sends to the Redis at
// addr for a decision on a random key ("__rand_int__", as redis-benchmark
// replaces it), and ratekit's batch scripts for batchKeys decisions, the
// PING and INCR floors last.
func recordScripts(t *testing.T, addr string) []script {
	ctx := context.Background()
	hook := &evalRecorder{}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	c.AddHook(hook)
	var scripts []script
	record := func(name string, decide func() error) {
		hook.reset()
		if err := decide(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		args := hook.args()
		if args == nil {
			t.Fatalf("%s: no EVALSHA sent", name)
		}
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "KEY", "__rand_int__")
		}
		scripts = append(scripts, script{name, args, 1})
	}
	for _, a := range core.Algorithms() {
		p := open
		p.Algorithm = a
		if a == core.SlidingLog {
			p.Limit, p.Window = 1_000_000, 1e9
		}
		l, err := redisstore.New(c, p, redisstore.WithPrefix("srv"), redisstore.WithBatching(1))
		if err != nil {
			t.Fatal(err)
		}
		record("ratekit "+a.String(), func() error { _, err := l.Allow(ctx, "KEY"); return err })
	}
	// Each batch script: the one call that a batching limiter sends for
	// batchKeys decisions on distinct keys of one node, caught by a hook
	// from 32 goroutines deciding until a batch of that size goes.
	for _, a := range core.Algorithms() {
		p := open
		p.Algorithm = a
		if a == core.SlidingLog {
			p.Limit, p.Window = 1_000_000, 1e9
		}
		bc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 64})
		rec := &batchRecorder{keys: batchKeys}
		bc.AddHook(rec)
		l, err := redisstore.New(bc, p, redisstore.WithPrefix("srvb"), redisstore.WithBatching(batchKeys))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for i := 0; i < 20000 && rec.args() == nil; i++ {
					if _, err := l.Allow(ctx, "KEY"+strconv.Itoa(g)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		bc.Close()
		args := rec.args()
		if args == nil {
			t.Fatalf("%v: no batch of %d decisions sent", a, batchKeys)
		}
		key := regexp.MustCompile(`KEY[0-9]+`)
		for i := range args {
			args[i] = key.ReplaceAllString(args[i], "__rand_int__")
		}
		scripts = append(scripts, script{fmt.Sprintf("ratekit %v, batch of %d", a, batchKeys), args, batchKeys})
	}
	rr := redis_rate.NewLimiter(c)
	lim := redis_rate.Limit{Rate: int(open.Limit), Period: open.Window, Burst: int(open.Limit)}
	record("redis_rate (GCRA)", func() error { _, err := rr.Allow(ctx, "srv-rr:KEY", lim); return err })
	store, err := uluredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "srv-ul"})
	if err != nil {
		t.Fatal(err)
	}
	ul := ulule.New(store, ulule.Rate{Period: open.Window, Limit: open.Limit})
	record("ulule (INCRBY script)", func() error { _, err := ul.Get(ctx, "KEY"); return err })
	scripts = append(scripts,
		script{"PING (floor)", []string{"PING"}, 1},
		script{"INCR (floor)", []string{"INCR", "srv-incr:__rand_int__"}, 1})

	return scripts
}

// batchKeys is the size of the batches TestServerRate measures: about
// what 32 goroutines on one limiter send (two calls in flight, the rest
// queued).
const batchKeys = 16

// batchRecorder is a go-redis hook that keeps the arguments of the first
// EVALSHA with keys keys a client sent in a pipeline (a batch script's
// call), as strings.
type batchRecorder struct {
	keys int
	mu   sync.Mutex
	last []string
}

func (h *batchRecorder) args() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.last)
}

func (h *batchRecorder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *batchRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *batchRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			a := cmd.Args()
			if cmd.Name() != "evalsha" && cmd.Name() != "fcall" || len(a) < 3 || fmt.Sprint(a[2]) != strconv.Itoa(h.keys) {
				continue
			}
			args := make([]string, len(a))
			for i, v := range a {
				args[i] = fmt.Sprint(v)
			}
			h.mu.Lock()
			if h.last == nil {
				h.last = args
			}
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// serverCPU returns the CPU time the Redis server has used, user and
// system, in seconds (INFO cpu): unlike commandstats, it counts reading
// commands and writing replies, which a call costs whatever it runs.
func serverCPU(t *testing.T, admin *redis.Client) float64 {
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// usecPerCall returns INFO commandstats' usec_per_call of cmd.
func usecPerCall(t *testing.T, admin *redis.Client, cmd string) float64 {
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if _, rest, ok := strings.Cut(strings.TrimSpace(line), "cmdstat_"+cmd+":"); ok {
			_, v, _ := strings.Cut(rest, "usec_per_call=")
			v, _, _ = strings.Cut(v, ",")
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// evalRecorder is a go-redis hook that keeps the arguments of the last
// EVALSHA (or FCALL) a client sent, as strings.
type evalRecorder struct {
	mu   sync.Mutex
	last []string
}

func (h *evalRecorder) reset() { h.mu.Lock(); h.last = nil; h.mu.Unlock() }

func (h *evalRecorder) args() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.last)
}

func (h *evalRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *evalRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "fcall" {
			args := make([]string, len(cmd.Args()))
			for i, a := range cmd.Args() {
				args[i] = fmt.Sprint(a)
			}
			h.mu.Lock()
			h.last = args
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *evalRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
