package main

import (
	"io"
	"path/filepath"
	"testing"
	"time"
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
	}
	s, err := parse(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := settings{
		config:      filepath.Join("/srv/runtime_data/current", "ratelimit", "config"),
		grpcAddr:    "0.0.0.0:9000",
		redisAddr:   "redis:6379",
		logLevel:    "debug",
		merge:       true,
		drain:       10 * time.Second,
		maxAge:      time.Hour,
		maxAgeGrace: 5 * time.Minute,
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
