package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlconfig"
	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlservice"
)

func TestParseEnvironment(t *testing.T) {
	env := map[string]string{
		"RUNTIME_ROOT":                  "/srv/runtime_data/current",
		"RUNTIME_SUBDIRECTORY":          "ratelimit",
		"GRPC_PORT":                     "9000",
		"MERGE_DOMAIN_CONFIG":           "true",
		"LOG_LEVEL":                     "debug",
		"GRPC_MAX_CONNECTION_AGE":       "1h",
		"GRPC_MAX_CONNECTION_AGE_GRACE": "5m",
		"REDIS_SOCKET_TYPE":             "tcp",
		"REDIS_URL":                     "redis:6379",
		"USE_PROMETHEUS":                "true",
		"OTEL_EXPORTER_OTLP_ENDPOINT":   "http://collector:4318",
	}
	s, err := parse(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := settings{
		config:         filepath.Join("/srv/runtime_data/current", "ratelimit", "config"),
		grpcAddr:       "0.0.0.0:9000",
		redisAddr:      "redis:6379",
		redisType:      "single",
		metricsAddr:    ":9090",
		metricsPath:    "/metrics",
		otlp:           "http://collector:4318",
		otlpFromEnv:    true,
		nearLimitRatio: 0.8,
		logLevel:       "debug",
		merge:          true,
		drain:          10 * time.Second,
		maxAge:         time.Hour,
		maxAgeGrace:    5 * time.Minute,
	}
	if s != want {
		t.Errorf("got %+v\nwant %+v", s, want)
	}
	// Flags beat the environment.
	s, err = parse([]string{"-config", "x.yaml", "-grpc-addr", "127.0.0.1:1", "-redis-addr", "", "-merge=false"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.config != "x.yaml" || s.grpcAddr != "127.0.0.1:1" || s.redisAddr != "" || s.merge {
		t.Errorf("flags: %+v", s)
	}
	s, err = parse([]string{"-otlp-endpoint", "http://otel:4318/v1/metrics"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil || s.otlp != "http://otel:4318/v1/metrics" || s.otlpFromEnv {
		t.Errorf("-otlp-endpoint: %+v, %v", s, err)
	}
	// The exporter dials nothing until its first export.
	for _, s := range []settings{s, {otlp: "http://collector:4318", otlpFromEnv: true}} {
		mp, err := otlpMeterProvider(s)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		mp.Shutdown(ctx)
		cancel()
	}
	env = map[string]string{"GRPC_UDS": "/run/rl.sock"}
	if s, err = parse([]string{"-config", "c"}, func(k string) string { return env[k] }, io.Discard); err != nil || s.grpcAddr != "unix:/run/rl.sock" {
		t.Errorf("GRPC_UDS: %+v %v", s, err)
	}
	if _, err := parse(nil, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("no configuration: no error")
	}
	env = map[string]string{"MERGE_DOMAIN_CONFIG": "yes please"}
	if _, err := parse([]string{"-config", "c"}, func(k string) string { return env[k] }, io.Discard); err == nil {
		t.Error("MERGE_DOMAIN_CONFIG=yes please: no error")
	}
}

// The example configuration loads, and its login limits are decided
// together.
func TestExampleConfig(t *testing.T) {
	c, err := rlconfig.Load("example.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	l, err := rlservice.New(c, rlservice.Options{})
	if err != nil {
		t.Fatal(err)
	}
	desc := func(kv ...string) *rlv3.RateLimitDescriptor {
		d := &rlv3.RateLimitDescriptor{}
		for i := 0; i < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
		desc("path", "/login", "user", "ada@example.com"),
		desc("path", "/login", "remote_address", "192.0.2.1"),
		desc("remote_address", "192.0.2.1"),
	}}
	for i := range 6 {
		resp, err := l.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		want := pb.RateLimitResponse_OK
		if i == 5 {
			want = pb.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != want {
			t.Fatalf("login %d: %v, want %v", i+1, resp.OverallCode, want)
		}
		if i == 5 && resp.Statuses[1].LimitRemaining != 15 {
			t.Errorf("login 6: per-ip remaining %d, want 15 (the denied attempt counted nowhere)", resp.Statuses[1].LimitRemaining)
		}
	}
}
