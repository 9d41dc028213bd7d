package benchmarks

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/internal/redisserver"
)

// TestGateway sets ratekit's gateway rate limit server (cmd/ratekit-server)
// beside envoyproxy/ratelimit, the reference server of Envoy's rate limit
// API, each a process of its own on loopback, asked by 32 callers through
// go-control-plane's generated gRPC client (one connection each), on one
// configuration: domain "bench", descriptor key "user", a fixed window of
// 100 requests per minute, over 1,000 values (caller g takes values g,
// g+32, g+64, ... modulo 1,000 in turn). Rows: envoyproxy/ratelimit on
// the redis-server TestMain started, ratekit-server on the same Redis,
// ratekit-server on memory, and the floor, this binary answering OK at
// once (the gRPC call alone, as PING is the Redis tables'). Both servers
// get their configuration from the same environment variables
// (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY, REDIS_URL,
// GRPC_PORT, ...) and run with their defaults otherwise:
// envoyproxy/ratelimit's local cache off (LOCAL_CACHE_SIZE_IN_BYTES=0),
// its pool of 10 Redis connections, no pipeline window, statistics to its
// log (USE_STATSD=false); ratekit's RateLimit headers on.
//
// Speed: rounds of the servers in turn, each a warm-up and then a
// timed run on fresh values (the round's own names), so that every run
// starts from the same state: every value's window empty, the first
// 100,000 decisions admitted, the rest denied until the minute turns.
// Reported: decisions/s, p50 and p99 of each call's latency at the
// client, the share admitted, and the CPU time, user and system, per
// decision of the server's process, of redis-server and of the callers
// (this process): on a machine they share, the steadier figure. Medians
// over the rounds.
//
// Exactness: domain "exact", the same limit per hour (so that the clock
// stands within one window: a run that crosses an hour is run again on
// fresh values), a burst of 3× the limit on every value from the 32
// callers at once. Each value must be admitted exactly the limit; each
// counter the server keeps in Redis is read after the burst:
// envoyproxy/ratelimit counts every request, denied ones too (INCRBY
// whatever the outcome, unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT),
// ratekit only those admitted. ratekit must admit exactly the limit and
// count exactly the limit.
//
// envoyproxy/ratelimit is the binary RATELIMIT_BIN names, else service_cmd
// in GOBIN or GOPATH/bin (run.sh GATEWAY_ONLY=1 installs it); without it
// its row is left out, with a message. ratekit-server is
// RATEKIT_SERVER_BIN, else built from this tree. With -short: one round of
// 2,000 calls on each server (after 500 to warm up), exactness on 20
// values. Tune with GATEWAY_ROUNDS (default 3), GATEWAY_DURATION (each
// timed run, default 5s) and GATEWAY_EXACT_VALUES (default 1,000). The
// table is logged and, with BENCH_REPORT_DIR set, written to gateway.md.
func TestGateway(t *testing.T) {
	rounds := envInt(t, "GATEWAY_ROUNDS", 3)
	dur := envDuration(t, "GATEWAY_DURATION", 5*time.Second)
	exactValues := envInt(t, "GATEWAY_EXACT_VALUES", gwValues)
	calls := 0 // a timed run's calls; 0: as many as dur allows
	if testing.Short() {
		rounds, calls, exactValues = 1, 2000, 20
	}
	dir := t.TempDir()
	root := writeGatewayConfig(t, dir)
	env := []string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp",
	}

	var servers []*gwServer
	if redisAddr == "" {
		t.Log("redis-server not installed: only ratekit-server on memory runs")
	} else if bin, why := envoyRatelimitBin(); bin == "" {
		t.Logf("envoyproxy/ratelimit left out: %s", why)
	} else {
		servers = append(servers, startGateway(t, "envoyproxy/ratelimit, Redis", bin, dir, true, append(env,
			"REDIS_URL="+redisAddr, "USE_STATSD=false"), "HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT"))
	}
	rk := buildRatekitServer(t, dir)
	if redisAddr != "" {
		servers = append(servers, startGateway(t, "ratekit-server, Redis", rk, dir, true, append(env, "REDIS_URL="+redisAddr)))
	}
	servers = append(servers, startGateway(t, "ratekit-server, memory", rk, dir, false, append(env, "REDIS_URL=")))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	servers = append(servers, startGateway(t, gwFloorName, self, dir, false, []string{gwFloorEnv + "=1"}))

	admin := adminClient(t)
	for round := range rounds {
		for j := range servers {
			s := servers[(j+round)%len(servers)] // each round starts with the next
			// A warm-up on values of its own: connections, pools, scripts.
			gwLoad(t, s, admin, "bench", gwValueNames(fmt.Sprintf("w%d-", round), gwValues), time.Second, calls/4)
			s.runs = append(s.runs, gwLoad(t, s, admin, "bench", gwValueNames(fmt.Sprintf("r%d-", round), gwValues), dur, calls))
		}
	}
	for i, s := range servers {
		if s.name == gwFloorName {
			s.exact = gwExactness{admitted: "—", counted: "—"}
			continue
		}
		s.exact = gwExact(t, s, admin, fmt.Sprintf("e%d-", i), exactValues)
	}

	var envoyRate, envoyP99, envoyCPU float64
	if len(servers) > 0 && strings.HasPrefix(servers[0].name, "envoy") {
		envoyRate, envoyP99, envoyCPU = servers[0].median(gwRun.rate), servers[0].median(gwRun.p99), servers[0].median(gwRun.cpu)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| server | decisions/s | × envoyproxy/ratelimit | p50 | p99 | admitted | server CPU µs per decision | Redis CPU µs per decision | the callers' CPU µs per decision | exactness: admitted per value (limit %d, %d sent) | counted per value in Redis |\n|---|---|---|---|---|---|---|---|---|---|---|\n", gwLimit, 3*gwLimit)
	var goal []string
	for _, s := range servers {
		rate, p50, p99 := s.median(gwRun.rate), s.median(gwRun.p50), s.median(gwRun.p99)
		x := "—"
		if envoyRate > 0 {
			x = fmt.Sprintf("%.2f×", rate/envoyRate)
		}
		fmt.Fprintf(&b, "| %s | %.0f/s | %s | %s | %s | %.1f %% | %s | %s | %s | %s | %s |\n", s.name, rate, x,
			time.Duration(p50).Round(time.Microsecond), time.Duration(p99).Round(time.Microsecond),
			100*s.median(gwRun.admittedShare), gwMicros(s.median(gwRun.server)), gwMicros(s.median(gwRun.redis)),
			gwMicros(s.median(gwRun.client)), s.exact.admitted, s.exact.counted)
		if s.name == gwFloorName {
			goal = append(goal, fmt.Sprintf("the gRPC floor, a server that decides nothing: %s envoyproxy/ratelimit's decisions/s, its CPU per call %s µs: the gRPC call's own cost, before any decision", x, gwMicros(s.median(gwRun.cpu))))
		}
		if strings.HasPrefix(s.name, "ratekit") && envoyRate == 0 {
			goal = append(goal, s.name+": against envoyproxy/ratelimit's decisions/s and p99: not measured")
		}
		if strings.HasPrefix(s.name, "ratekit") && envoyRate > 0 {
			want := 2.0
			if !s.redis {
				want = 5
			}
			goal = append(goal, fmt.Sprintf("%s: %.2f× envoyproxy/ratelimit's decisions/s (goal ≥ %.0f×): %s; p99 %v against %v (goal lower): %s; per CPU second of server and Redis, %.2f× envoyproxy/ratelimit's decisions",
				s.name, rate/envoyRate, want, gwMet(rate >= want*envoyRate), time.Duration(p99).Round(time.Microsecond),
				time.Duration(envoyP99).Round(time.Microsecond), gwMet(p99 < envoyP99), envoyCPU/s.median(gwRun.cpu)))
		}
	}
	for _, s := range servers {
		if strings.HasPrefix(s.name, "ratekit") {
			goal = append(goal, fmt.Sprintf("%s: exactness, admitted %s, counted %s per value (goal: exactly %d each)", s.name, s.exact.admitted, s.exact.counted, gwLimit))
		}
	}
	fmt.Fprintf(&b, "\n")
	for _, g := range goal {
		fmt.Fprintf(&b, "- %s\n", g)
	}
	each := dur.String()
	if calls > 0 {
		each = strconv.Itoa(calls) + " calls"
	}
	t.Logf("gateway servers, %d callers, medians of %d rounds of %s:\n%s", gwCallers, rounds, each, b.String())
	if dir := os.Getenv("BENCH_REPORT_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "gateway.md"), []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// The floor: this test binary, started again with gwFloorEnv set, serving
// ShouldRateLimit on GRPC_HOST:GRPC_PORT by answering OK to every request
// at once, deciding nothing: the cost of the gRPC call alone, client and
// server, as PING is the floor of the Redis tables.
const (
	gwFloorEnv  = "RATEKIT_BENCH_GATEWAY_FLOOR"
	gwFloorName = "gRPC floor: OK, no decision"
)

// serveGatewayFloor serves the floor until SIGTERM or SIGINT.
func serveGatewayFloor() error {
	lis, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("GRPC_HOST"), os.Getenv("GRPC_PORT")))
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(g, gwFloor{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; g.GracefulStop() }()
	return g.Serve(lis)
}

// gwFloor answers every request OK, a status per descriptor.
type gwFloor struct {
	pb.UnimplementedRateLimitServiceServer
}

func (gwFloor) ShouldRateLimit(_ context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	r := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		r.Statuses = append(r.Statuses, &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK})
	}
	return r, nil
}

// gwMicros formats µs, "—" for NaN.
func gwMicros(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.1f", v)
}

// gwMet says whether a goal was met.
func gwMet(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// The benchmark's configuration: gwLimit requests per minute (per hour in
// the exactness domain) for each of gwValues values of key "user".
const (
	gwLimit   = 100
	gwValues  = 1000
	gwCallers = 32
)

// writeGatewayConfig writes the configuration both servers read, in
// envoyproxy/ratelimit's layout (RUNTIME_ROOT/ratelimit/config/*.yaml), and
// returns its root.
func writeGatewayConfig(t *testing.T, dir string) string {
	root := filepath.Join(dir, "runtime")
	cfg := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, unit := range map[string]string{"bench": "minute", "exact": "hour"} {
		yaml := fmt.Sprintf("domain: %s\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: %s\n      requests_per_unit: %d\n", name, unit, gwLimit)
		if err := os.WriteFile(filepath.Join(cfg, name+".yaml"), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// envoyRatelimitBin returns the envoyproxy/ratelimit binary to run, or ""
// and why there is none.
func envoyRatelimitBin() (bin, why string) {
	if bin = os.Getenv("RATELIMIT_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Sprintf("RATELIMIT_BIN: %v", err)
		}
		return bin, ""
	}
	gobin, _ := exec.Command("go", "env", "GOBIN").Output()
	dir := strings.TrimSpace(string(gobin))
	if dir == "" {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		dir = filepath.Join(strings.SplitN(strings.TrimSpace(string(gopath)), string(os.PathListSeparator), 2)[0], "bin")
	}
	bin = filepath.Join(dir, "service_cmd")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Sprintf("no %s and no RATELIMIT_BIN (benchmarks/run.sh GATEWAY_ONLY=1 installs it: go install %s)", bin, envoyRatelimitModule)
	}
	return bin, ""
}

// envoyRatelimitModule is the envoyproxy/ratelimit the benchmark is set
// against, as run.sh installs it.
const envoyRatelimitModule = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

// buildRatekitServer returns the ratekit-server to run: RATEKIT_SERVER_BIN
// (run.sh builds it at the start, with the test binary), else
// cmd/ratekit-server built from this tree, in the repository's workspace,
// into dir.
func buildRatekitServer(t *testing.T, dir string) string {
	if bin := os.Getenv("RATEKIT_SERVER_BIN"); bin != "" {
		return bin
	}
	src, err := filepath.Abs(filepath.Join("..", "cmd", "ratekit-server"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ratekit-server")
	cmd := exec.Command("go", "build", "-C", src, "-o", bin, ".")
	cmd.Env = append(os.Environ(), "GOWORK=") // the repository's go.work, not this module's
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of cmd/ratekit-server: %v\n%s", err, out)
	}
	return bin
}

// A gwServer is a rate limit server process the benchmark started, with
// a client of its own per caller.
type gwServer struct {
	name    string
	redis   bool // it counts in Redis
	pid     int
	clients []pb.RateLimitServiceClient
	runs    []gwRun
	exact   gwExactness
}

// median returns the median over s's runs of f.
func (s *gwServer) median(f func(gwRun) float64) float64 {
	var v []float64
	for _, r := range s.runs {
		v = append(v, f(r))
	}
	if len(v) == 0 {
		return 0
	}
	return median(v)
}

// startGateway starts bin with env and free loopback ports for GRPC_PORT
// and for each of ports (an address variable ending in HOST is given
// 127.0.0.1, a port one a free port), waits until it answers, and
// connects gwCallers clients; all are stopped when t ends.
func startGateway(t *testing.T, name, bin, dir string, inRedis bool, env []string, ports ...string) *gwServer {
	var addr string
	var pid int
	var err error
	for range 5 { // a port taken between choosing and binding it: again
		env := slices.Clone(env)
		var grpcPort int
		if grpcPort, err = redisserver.FreePort(); err != nil {
			t.Fatal(err)
		}
		addr = "127.0.0.1:" + strconv.Itoa(grpcPort)
		env = append(env, "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort))
		for _, p := range ports {
			if strings.HasSuffix(p, "HOST") {
				env = append(env, p+"=127.0.0.1")
				continue
			}
			n, err := redisserver.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			env = append(env, p+"="+strconv.Itoa(n))
		}
		if pid, err = startProcess(t, name, bin, dir, env, addr); err == nil || !errors.Is(err, errGatewayPortTaken) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &gwServer{name: name, redis: inRedis, pid: pid}
	for range gwCallers {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		s.clients = append(s.clients, pb.NewRateLimitServiceClient(conn))
	}
	return s
}

var errGatewayPortTaken = errors.New("port taken")

// startProcess starts bin, its output in a log file in dir, stopped (SIGTERM,
// then SIGKILL) when t ends, and waits until it answers ShouldRateLimit at
// addr.
func startProcess(t *testing.T, name, bin, dir string, env []string, addr string) (pid int, err error) {
	logPath := filepath.Join(dir, strings.NewReplacer("/", "-", ",", "", " ", "-").Replace(name)+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		return 0, err
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	for deadline := time.Now().Add(60 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = c.ShouldRateLimit(ctx, gwRequest("bench", "ready"), grpc.WaitForReady(true))
		cancel()
		if err == nil {
			t.Cleanup(stop)
			return cmd.Process.Pid, nil
		}
		select {
		case <-done:
			out, _ := os.ReadFile(logPath)
			if strings.Contains(strings.ToLower(string(out)), "address already in use") {
				return 0, errGatewayPortTaken
			}
			return 0, fmt.Errorf("%s exited: %v\n%s", name, cmd.ProcessState, out)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			out, _ := os.ReadFile(logPath)
			return 0, fmt.Errorf("%s did not answer on %s: %v\n%s", name, addr, err, out)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the listener and the configuration
	}
}

// gwRequest is a request on one descriptor, user=value, of domain.
func gwRequest(domain, value string) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, HitsAddend: 1, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: value}}},
	}}
}

// gwValueNames returns n descriptor values, prefix and a four-digit index.
func gwValueNames(prefix string, n int) []string {
	v := make([]string, n)
	for i := range v {
		v[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return v
}

// A gwRun is one timed run of the callers on a server.
type gwRun struct {
	calls, admitted int
	elapsed         time.Duration
	lat             []time.Duration // sorted
	// serverCPU and redisCPU are the CPU time, user and system, the
	// server's process and redis-server used per decision, in µs; NaN
	// where not measured.
	serverCPU, redisCPU float64
	// clientCPU is the CPU time this process, the callers, used per
	// decision, in µs.
	clientCPU float64
}

func (r gwRun) rate() float64          { return float64(r.calls) / r.elapsed.Seconds() }
func (r gwRun) p50() float64           { return float64(r.lat[len(r.lat)/2]) }
func (r gwRun) p99() float64           { return float64(r.lat[len(r.lat)*99/100]) }
func (r gwRun) admittedShare() float64 { return float64(r.admitted) / float64(r.calls) }
func (r gwRun) server() float64        { return r.serverCPU }
func (r gwRun) redis() float64         { return r.redisCPU }
func (r gwRun) client() float64        { return r.clientCPU }

// cpu returns the CPU time per decision of the server and of its Redis.
func (r gwRun) cpu() float64 {
	if math.IsNaN(r.redisCPU) {
		return r.serverCPU
	}
	return r.serverCPU + r.redisCPU
}

// gwLoad runs gwCallers callers on s for dur, or, if calls > 0, until
// they made that many calls between them; caller g asks for values g,
// g+gwCallers, ... in turn, each a request of its own.
func gwLoad(t *testing.T, s *gwServer, admin *redis.Client, domain string, values []string, dur time.Duration, calls int) gwRun {
	cpu0, self0, redis0 := processCPU(s.pid), processCPU(os.Getpid()), math.NaN()
	if s.redis {
		redis0 = serverCPU(t, admin)
	}
	var wg sync.WaitGroup
	var made, admitted atomic.Int64
	lats := make([][]time.Duration, gwCallers)
	start := time.Now()
	for g := range gwCallers {
		reqs := make([]*pb.RateLimitRequest, 0, len(values)/gwCallers+1)
		for i := g % len(values); len(reqs) == 0 || i != g%len(values); i = (i + gwCallers) % len(values) {
			reqs = append(reqs, gwRequest(domain, values[i]))
		}
		c := s.clients[g]
		wg.Go(func() {
			lat := make([]time.Duration, 0, 1<<14)
			ok := int64(0)
			defer func() { admitted.Add(ok) }()
			for i := 0; ; i = (i + 1) % len(reqs) {
				if calls > 0 && made.Add(1) > int64(calls) || calls == 0 && time.Since(start) >= dur {
					break
				}
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(context.Background(), reqs[i])
				lat = append(lat, time.Since(t0))
				if err != nil {
					t.Errorf("%s: %v", s.name, err)
					return
				}
				if resp.GetOverallCode() == pb.RateLimitResponse_OK {
					ok++
				}
			}
			lats[g] = lat
		})
	}
	wg.Wait()
	r := gwRun{elapsed: time.Since(start), admitted: int(admitted.Load())}
	for _, l := range lats {
		r.lat = append(r.lat, l...)
	}
	if len(r.lat) == 0 {
		t.Fatalf("%s: no calls made", s.name)
	}
	slices.Sort(r.lat)
	r.calls = len(r.lat)
	r.serverCPU, r.redisCPU = (processCPU(s.pid)-cpu0)*1e6/float64(r.calls), math.NaN()
	r.clientCPU = (processCPU(os.Getpid()) - self0) * 1e6 / float64(r.calls)
	if s.redis {
		r.redisCPU = (serverCPU(t, admin) - redis0) * 1e6 / float64(r.calls)
	}
	return r
}

// processCPU returns the CPU time, user and system, process pid has used,
// in seconds (/proc/pid/stat), or NaN where that cannot be read.
func processCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	// The fields after the command's name, which is in parentheses:
	// state is field 3, utime 14, stime 15.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return math.NaN()
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return math.NaN()
	}
	return (utime + stime) / clockTicks()
}

// clockTicks returns the clock ticks per second /proc counts in
// (getconf CLK_TCK; 100, Linux's USER_HZ, if getconf fails).
var clockTicks = sync.OnceValue(func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if n, err2 := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && err2 == nil && n > 0 {
		return n
	}
	return 100
})

// gwExactness is the exactness of one server: the least and the most
// admitted and counted per value, as "a" or "a–b".
type gwExactness struct {
	admitted, counted string
}

// gwExact sends 3 × gwLimit requests on each of n values of the exact
// domain (hour windows) from gwCallers callers at once, request i on value
// i mod n, and returns what each value was admitted and, on Redis, what
// the server counted for it. A burst that crosses an hour is run again on
// new values. ratekit-server must admit and count exactly gwLimit per
// value.
func gwExact(t *testing.T, s *gwServer, admin *redis.Client, prefix string, n int) gwExactness {
	for attempt := 0; ; attempt++ {
		values := gwValueNames(fmt.Sprintf("%sa%d-", prefix, attempt), n)
		hour := time.Now().Truncate(time.Hour)
		admitted := make([]atomic.Int64, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		total := int64(3 * gwLimit * n)
		for g := range gwCallers {
			c := s.clients[g]
			wg.Go(func() {
				for i := next.Add(1) - 1; i < total; i = next.Add(1) - 1 {
					resp, err := c.ShouldRateLimit(context.Background(), gwRequest("exact", values[i%int64(n)]))
					if err != nil {
						t.Errorf("%s: %v", s.name, err)
						return
					}
					if resp.GetOverallCode() == pb.RateLimitResponse_OK {
						admitted[i%int64(n)].Add(1)
					}
				}
			})
		}
		wg.Wait()
		if !time.Now().Truncate(time.Hour).Equal(hour) && attempt < 2 {
			t.Logf("%s: the burst crossed an hour; again on new values", s.name)
			continue
		}
		adm := make([]int64, n)
		for i := range adm {
			adm[i] = admitted[i].Load()
		}
		e := gwExactness{admitted: span(adm), counted: "— (memory)"}
		if s.redis {
			counts := redisCounts(t, admin, regexp.MustCompile(regexp.QuoteMeta(prefix)+fmt.Sprintf("a%d-", attempt)+`(\d{4})`), n)
			e.counted = span(counts)
			if strings.HasPrefix(s.name, "ratekit") && slices.ContainsFunc(counts, func(c int64) bool { return c != gwLimit }) {
				t.Errorf("%s: counted %s per value in Redis; want exactly %d", s.name, e.counted, gwLimit)
			}
		}
		if strings.HasPrefix(s.name, "ratekit") && slices.ContainsFunc(adm, func(a int64) bool { return a != gwLimit }) {
			t.Errorf("%s: admitted %s per value; want exactly %d", s.name, e.admitted, gwLimit)
		}
		return e
	}
}

// span returns "a" if every v is a, else "min–max".
func span(v []int64) string {
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi {
		return strconv.FormatInt(lo, 10)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// adminClient returns a client of the benchmark's redis-server, or nil
// without one.
func adminClient(t *testing.T) *redis.Client {
	if redisAddr == "" {
		return nil
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { c.Close() })
	return c
}

// redisCounts returns, for each of n values, the count of the Redis key
// whose name holds the value (value matches its index in the key's name):
// an integer (envoyproxy/ratelimit's INCRBY) or redisstore's fixed window
// state, the window's index and then its count as big-endian int64s.
func redisCounts(t *testing.T, admin *redis.Client, value *regexp.Regexp, n int) []int64 {
	ctx := context.Background()
	counts := make([]int64, n)
	iter := admin.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		m := value.FindStringSubmatch(key)
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		v, err := admin.Get(ctx, key).Bytes()
		if err != nil {
			t.Fatalf("GET %q: %v", key, err)
		}
		if c, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			counts[i] += c
		} else if len(v) >= 16 {
			counts[i] += int64(binary.BigEndian.Uint64(v[8:16]))
		} else {
			t.Fatalf("key %q: a value of neither form: %q", key, v)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return counts
}
