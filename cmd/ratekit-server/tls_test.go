package main

// envoyproxy/ratelimit's TestBasicTLSConfig (Redis over TLS, with and
// without a client certificate) and TestBasicAuthConfig's password, through
// the client -redis-* make, against redis-servers of the test's own.

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlserver"
	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/testpki"
	"github.com/ratekit/ratekit/internal/redisserver"
)

func TestParseTLS(t *testing.T) {
	env := map[string]string{
		"RUNTIME_ROOT":                         "/srv",
		"GRPC_SERVER_USE_TLS":                  "true",
		"GRPC_SERVER_TLS_CERT":                 "/tls/cert.pem",
		"GRPC_SERVER_TLS_KEY":                  "/tls/key.pem",
		"GRPC_CLIENT_TLS_CACERT":               "/tls/clients.pem",
		"GRPC_CLIENT_TLS_SAN":                  "envoy.internal",
		"REDIS_TLS":                            "true",
		"REDIS_TLS_CACERT":                     "/tls/redis-ca.pem",
		"REDIS_TLS_CLIENT_CERT":                "/tls/redis-client.pem",
		"REDIS_TLS_CLIENT_KEY":                 "/tls/redis-client-key.pem",
		"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true",
	}
	s, err := parse(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := *grpcTLS(s), (rlserver.TLS{CertFile: "/tls/cert.pem", KeyFile: "/tls/key.pem", ClientCAFile: "/tls/clients.pem", ClientSAN: "envoy.internal"}); got != want {
		t.Errorf("gRPC TLS %+v, want %+v", got, want)
	}
	if !s.redisTLS || s.redisCA != "/tls/redis-ca.pem" || s.redisCert != "/tls/redis-client.pem" || s.redisKey != "/tls/redis-client-key.pem" || !s.redisTLSSkipHostname {
		t.Errorf("Redis TLS: %+v", s)
	}
	// As in envoyproxy/ratelimit, the files alone do not turn TLS on.
	delete(env, "GRPC_SERVER_USE_TLS")
	if s, err = parse(nil, func(k string) string { return env[k] }, io.Discard); err != nil || grpcTLS(s) != nil {
		t.Errorf("without GRPC_SERVER_USE_TLS: %+v, %v", s, err)
	}
	for _, args := range [][]string{{"-grpc-tls", "-grpc-tls-cert", ""}, {"-redis-tls-client-key", ""}} {
		if _, err := parse(args, func(k string) string { return env[k] }, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// ping asks the client of s for PING.
func ping(t *testing.T, s settings) error {
	t.Helper()
	c, err := redisClient(s)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// startTLSRedis starts a redis-server with a TLS port too and returns the
// TLS port's address.
func startTLSRedis(t *testing.T, server testpki.Pair, ca *testpki.CA, authClients bool) string {
	t.Helper()
	redisserver.Need(t)
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	auth := "no"
	if authClients {
		auth = "yes"
	}
	redisserver.StartT(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", server.CertFile, "--tls-key-file", server.KeyFile,
		"--tls-ca-cert-file", ca.CertFile, "--tls-auth-clients", auth)
	return "127.0.0.1:" + strconv.Itoa(port)
}

func TestRedisTLS(t *testing.T) {
	ca := testpki.NewCA(t, "redis")
	addr := startTLSRedis(t, ca.Server("redis"), ca, false)
	base := settings{redisAddr: addr, redisType: "single", redisTLS: true, redisCA: ca.CertFile}
	if err := ping(t, base); err != nil {
		t.Errorf("over TLS: %v", err)
	}
	plain := base
	plain.redisTLS = false
	if err := ping(t, plain); err == nil {
		t.Error("a plaintext client was answered on the TLS port")
	}
	other := base
	other.redisCA = testpki.NewCA(t, "other").CertFile
	if err := ping(t, other); err == nil {
		t.Error("a certificate of another CA was trusted")
	}

	// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: a certificate for another name
	// passes when asked, the chain still checked.
	named := startTLSRedis(t, ca.ServerNamed("elsewhere", "redis.elsewhere.example"), ca, false)
	s := base
	s.redisAddr = named
	if err := ping(t, s); err == nil {
		t.Error("a certificate for another name was trusted")
	}
	s.redisTLSSkipHostname = true
	if err := ping(t, s); err != nil {
		t.Errorf("skipping the name: %v", err)
	}
	s.redisCA = other.redisCA
	if err := ping(t, s); err == nil {
		t.Error("skipping the name: a certificate of another CA was trusted")
	}
}

// WithClientCert: a redis-server requiring client certificates.
func TestRedisTLSClientCert(t *testing.T) {
	ca := testpki.NewCA(t, "redis")
	addr := startTLSRedis(t, ca.Server("redis"), ca, true)
	s := settings{redisAddr: addr, redisType: "single", redisTLS: true, redisCA: ca.CertFile}
	if err := ping(t, s); err == nil {
		t.Error("answered without a client certificate")
	}
	client := ca.Client("ratekit")
	s.redisCert, s.redisKey = client.CertFile, client.KeyFile
	if err := ping(t, s); err != nil {
		t.Errorf("with a client certificate: %v", err)
	}
}

// TestBasicAuthConfig's REDIS_AUTH, a password or user:password.
func TestRedisAuth(t *testing.T) {
	redisserver.Need(t)
	addr := redisserver.StartT(t)
	for _, cmd := range [][]string{{"ACL", "SETUSER", "rl", "on", ">secret", "~*", "+@all"}, {"CONFIG", "SET", "requirepass", "password123"}} {
		if _, err := redisserver.Do(addr, 5*time.Second, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		auth string
		ok   bool
	}{{"password123", true}, {"rl:secret", true}, {"", false}, {"wrong", false}, {"rl:wrong", false}} {
		err := ping(t, settings{redisAddr: addr, redisType: "single", redisAuth: tc.auth})
		if tc.ok != (err == nil) {
			t.Errorf("-redis-auth %q: %v", tc.auth, err)
		}
	}
}
