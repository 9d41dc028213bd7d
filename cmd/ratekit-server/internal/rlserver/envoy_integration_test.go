package rlserver

// envoyproxy/ratelimit's integration cases (test/integration in its
// repository: testBasicBaseConfig, testConfigReload, testShareThreshold),
// run against this server with its configuration files, over a loopback
// socket with go-control-plane's generated client. The expected responses
// are theirs, except where this server differs by design; each such place
// says so (docs/server.md lists them).

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlservice"
	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/testpki"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redisserver"
	"github.com/redis/go-redis/v9"
)

// envoyRequest is envoyproxy/ratelimit's common.NewRateLimitRequest.
func envoyRequest(domain string, descriptors [][][2]string, hits uint32) *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descriptors {
		desc := &rlv3.RateLimitDescriptor{}
		for _, e := range d {
			desc.Entries = append(desc.Entries, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		r.Descriptors = append(r.Descriptors, desc)
	}
	return r
}

func status(code pb.RateLimitResponse_Code, rpu uint32, unit pb.RateLimitResponse_RateLimit_Unit, remaining uint32, reset time.Duration) *pb.RateLimitResponse_DescriptorStatus {
	return &pb.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &pb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: durationpb.New(reset),
	}
}

// integrationServer serves dir on loopback, its clock at 00:00:30 of a
// day, and returns the server, a client, the clock and a stop function.
func integrationServer(t *testing.T, dir string) (*Server, pb.RateLimitServiceClient, *core.ManualClock, func()) {
	t.Helper()
	clk := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC))
	srv, err := New(Options{
		Config:  dir,
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Service: rlservice.Options{Clock: clk, NoHeaders: true, Redis: integrationRedis, RedisPrefix: "test:" + t.Name()},
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return srv, pb.NewRateLimitServiceClient(conn), clk, func() {
		cancel()
		<-done
		conn.Close()
	}
}

func assertResponse(t *testing.T, c pb.RateLimitServiceClient, req *pb.RateLimitRequest, want *pb.RateLimitResponse) {
	t.Helper()
	got, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("ShouldRateLimit(%v):\n got %v\nwant %v", req, got, want)
	}
}

const (
	second = pb.RateLimitResponse_RateLimit_SECOND
	minute = pb.RateLimitResponse_RateLimit_MINUTE
	hour   = pb.RateLimitResponse_RateLimit_HOUR
	okCode = pb.RateLimitResponse_OK
	overLL = pb.RateLimitResponse_OVER_LIMIT
)

// testBasicBaseConfig.
func TestEnvoyBasicConfig(t *testing.T) {
	_, c, clk, stop := integrationServer(t, filepath.Join("testdata", "envoy-integration", "config"))
	defer stop()

	// An unknown domain: OK, no limit.
	assertResponse(t, c, envoyRequest("foo", [][][2]string{{{"hello", "world"}}}, 1),
		&pb.RateLimitResponse{OverallCode: okCode, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: okCode}}})

	// 50 per second: 49 left, the second ends in 1s.
	assertResponse(t, c, envoyRequest("basic", [][][2]string{{{"key1", "foo"}}}, 1),
		&pb.RateLimitResponse{OverallCode: okCode, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status(okCode, 50, second, 49, time.Second)}})

	// Over a limit of 20 per minute, 30s before the minute ends.
	for i := range 25 {
		code, remaining, reset := okCode, uint32(20-(i+1)), 30*time.Second
		if i >= 20 {
			code, remaining = overLL, 0
		}
		assertResponse(t, c, envoyRequest("another", [][][2]string{{{"key2", "random1"}}}, 1),
			&pb.RateLimitResponse{OverallCode: code, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status(code, 20, minute, remaining, reset)}})
	}

	// Two keys of one domain, 20 per minute and 10 per hour.
	for i := range 15 {
		code := okCode
		remaining1, remaining2 := uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 {
			code, remaining2 = overLL, 0
			// By design: the request is denied, so key2 counts nothing
			// (envoyproxy/ratelimit's default counts it, leaving 20-(i+1);
			// its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT mode expects 10,
			// as here).
			remaining1 = 10
		}
		assertResponse(t, c, envoyRequest("another", [][][2]string{{{"key2", "random2"}}, {{"key3", "random2"}}}, 1),
			&pb.RateLimitResponse{OverallCode: code, Statuses: []*pb.RateLimitResponse_DescriptorStatus{
				status(okCode, 20, minute, remaining1, 30*time.Second),
				status(code, 10, hour, remaining2, 59*time.Minute+30*time.Second),
			}})
	}

	// DurationUntilReset ticks down.
	resp1, err := c.ShouldRateLimit(context.Background(), envoyRequest("another", [][][2]string{{{"key4", "durTest"}}}, 1))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	resp2, err := c.ShouldRateLimit(context.Background(), envoyRequest("another", [][][2]string{{{"key4", "durTest"}}}, 1))
	if err != nil {
		t.Fatal(err)
	}
	if d1, d2 := resp1.Statuses[0].DurationUntilReset.AsDuration(), resp2.Statuses[0].DurationUntilReset.AsDuration(); d2 != d1-2*time.Second {
		t.Errorf("DurationUntilReset %v then %v, 2s later; want 2s less", d1, d2)
	}
}

// testConfigReload: a file added to the directory adds its domain; its
// removal removes it.
func TestEnvoyConfigReload(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"basic.yaml", "another.yaml", "share_threshold.yaml"} {
		copyFile(t, filepath.Join("testdata", "envoy-integration", "config", f), filepath.Join(dir, f))
	}
	srv, c, _, stop := integrationServer(t, dir)
	defer stop()
	block := envoyRequest("reload", [][][2]string{{{"block", "foo"}}}, 1)
	assertResponse(t, c, block, &pb.RateLimitResponse{OverallCode: okCode, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: okCode}}})

	copyFile(t, filepath.Join("testdata", "envoy-integration", "reload.yaml"), filepath.Join(dir, "reload.yaml"))
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	assertResponse(t, c, envoyRequest("reload", [][][2]string{{{"key1", "foo"}}}, 1),
		&pb.RateLimitResponse{OverallCode: okCode, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status(okCode, 50, second, 49, time.Second)}})
	// requests_per_unit 0 refuses every request.
	assertResponse(t, c, block, &pb.RateLimitResponse{OverallCode: overLL, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status(overLL, 0, second, 0, time.Second)}})

	if err := os.Remove(filepath.Join(dir, "reload.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	assertResponse(t, c, block, &pb.RateLimitResponse{OverallCode: okCode, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: okCode}}})
}

// testShareThreshold.
func TestEnvoyShareThreshold(t *testing.T) {
	_, c, _, stop := integrationServer(t, filepath.Join("testdata", "envoy-integration", "config"))
	defer stop()
	const domain = "share-threshold-test"
	reset := 59*time.Minute + 30*time.Second
	for i := range 10 {
		assertResponse(t, c, envoyRequest(domain, [][][2]string{{{"files", "files/a.pdf"}}}, 1),
			&pb.RateLimitResponse{OverallCode: okCode, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status(okCode, 10, hour, uint32(9-i), reset)}})
	}
	// files/b.csv shares files/*'s threshold: over.
	assertResponse(t, c, envoyRequest(domain, [][][2]string{{{"files", "files/b.csv"}}}, 1),
		&pb.RateLimitResponse{OverallCode: overLL, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status(overLL, 10, hour, 0, reset)}})
	// Without share_threshold each value has its own.
	for i := range 10 {
		assertResponse(t, c, envoyRequest(domain, [][][2]string{{{"files_no_share", fmt.Sprintf("files_no_share/%d", i)}}}, 1),
			&pb.RateLimitResponse{OverallCode: okCode, Statuses: []*pb.RateLimitResponse_DescriptorStatus{status(okCode, 10, hour, 9, reset)}})
	}
}

// integrationRedis, when set, keeps integrationServer's counts in Redis.
var integrationRedis redis.UniversalClient

// The integration cases on a redis-server of the test's own.
func TestEnvoyRedis(t *testing.T) {
	redisserver.Need(t)
	c := redis.NewClient(&redis.Options{Addr: redisserver.StartT(t)})
	defer c.Close()
	runOnRedis(t, c)
}

// The integration cases through Sentinel: a master and the Sentinel
// watching it, the client asking the Sentinel for the master.
func TestEnvoySentinel(t *testing.T) {
	s := redisserver.StartSentinelT(t, redisserver.SentinelConfig{})
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.Addrs, MaxRetries: -1})
	defer c.Close()
	runOnRedis(t, c)
}

// The integration cases on a Redis Cluster of three masters: a request's
// descriptors in different slots are decided slot by slot.
func TestEnvoyCluster(t *testing.T) {
	cl := redisserver.StartClusterT(t, redisserver.ClusterConfig{Masters: 3})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1})
	defer c.Close()
	runOnRedis(t, c)
}

// redisPassword is the auth tests' password (envoyproxy/ratelimit's
// REDIS_AUTH there; -redis-auth here).
const redisPassword = "password123"

// requirePass makes the Redis servers at addrs require redisPassword, and
// checks that a client without it is refused.
func requirePass(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		if _, err := redisserver.Do(a, 5*time.Second, "CONFIG", "SET", "requirepass", redisPassword); err != nil {
			t.Fatal(err)
		}
		if err := redisserver.Ping(a, 5*time.Second); err == nil {
			t.Fatalf("%s answers PING without the password", a)
		}
	}
}

// TestBasicAuthConfig: the cases on a redis-server requiring a password.
func TestEnvoyRedisAuth(t *testing.T) {
	redisserver.Need(t)
	addr := redisserver.StartT(t)
	requirePass(t, addr)
	c := redis.NewClient(&redis.Options{Addr: addr, Password: redisPassword})
	defer c.Close()
	runOnRedis(t, c)
}

// TestBasicAuthConfigWithRedisSentinel: the master requires the password;
// the Sentinel, told it (auth-pass), does not.
func TestEnvoySentinelAuth(t *testing.T) {
	s := redisserver.StartSentinelT(t, redisserver.SentinelConfig{})
	for _, a := range s.Addrs {
		if _, err := redisserver.Do(a, 5*time.Second, "SENTINEL", "SET", s.Name, "auth-pass", redisPassword); err != nil {
			t.Fatal(err)
		}
	}
	requirePass(t, s.Master.Addr)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.Addrs, Password: redisPassword, MaxRetries: -1})
	defer c.Close()
	runOnRedis(t, c)
}

// TestBasicAuthConfigWithRedisCluster: every node requires the password.
func TestEnvoyClusterAuth(t *testing.T) {
	cl := redisserver.StartClusterT(t, redisserver.ClusterConfig{Masters: 3})
	requirePass(t, cl.Addrs...)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, Password: redisPassword, MaxRetries: -1})
	defer c.Close()
	runOnRedis(t, c)
}

// TestBasicTLSConfig (testBasicConfigAuthTLS): the cases on a redis-server
// over TLS, requiring a password.
func TestEnvoyRedisTLS(t *testing.T) {
	redisserver.Need(t)
	ca := testpki.NewCA(t, "redis")
	p := ca.Server("redis")
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	plain := redisserver.StartT(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", p.CertFile, "--tls-key-file", p.KeyFile,
		"--tls-ca-cert-file", ca.CertFile, "--tls-auth-clients", "no")
	requirePass(t, plain)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), Password: redisPassword,
		TLSConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}})
	defer c.Close()
	runOnRedis(t, c)
}

// runOnRedis runs the integration cases with their counts in c.
func runOnRedis(t *testing.T, c redis.UniversalClient) {
	integrationRedis = c
	defer func() { integrationRedis = nil }()
	t.Run("BasicConfig", TestEnvoyBasicConfig)
	t.Run("ConfigReload", TestEnvoyConfigReload)
	t.Run("ShareThreshold", TestEnvoyShareThreshold)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
