package rlserver

// envoyproxy/ratelimit's Test_mTLS and TestReloadGRPCServerCerts: the gRPC
// server over TLS, requiring client certificates, and its certificate read
// again from its files; the certificates are made by a test CA.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/testpki"
)

// tlsServer serves the integration configuration over TLS and returns the
// server, its address and a stop function.
func tlsServer(t *testing.T, o TLS) (*Server, string, func()) {
	t.Helper()
	srv, err := New(Options{
		Config:   filepath.Join("testdata", "envoy-integration", "config"),
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Debounce: time.Millisecond,
		TLS:      &o,
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
	return srv, lis.Addr().String(), func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}

// tlsCall makes one ShouldRateLimit call on a new connection with creds.
func tlsCall(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, envoyRequest("basic", [][][2]string{{{"key1", "foo"}}}, 1))
	return err
}

func clientTLS(roots *x509.CertPool, certs ...tls.Certificate) credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: certs})
}

func TestTLS(t *testing.T) {
	ca := testpki.NewCA(t, "server")
	p := ca.Server("server")
	_, addr, stop := tlsServer(t, TLS{CertFile: p.CertFile, KeyFile: p.KeyFile})
	defer stop()
	if err := tlsCall(t, addr, clientTLS(ca.Pool)); err != nil {
		t.Errorf("over TLS: %v", err)
	}
	if err := tlsCall(t, addr, insecure.NewCredentials()); err == nil {
		t.Error("a plaintext client was served")
	}
	if err := tlsCall(t, addr, clientTLS(testpki.NewCA(t, "other").Pool)); err == nil {
		t.Error("a client trusting another CA was served")
	}
}

// Test_mTLS: GRPC_CLIENT_TLS_CACERT requires a client certificate of that
// CA, GRPC_CLIENT_TLS_SAN one with that name.
func TestMTLS(t *testing.T) {
	serverCA, clientCA := testpki.NewCA(t, "server"), testpki.NewCA(t, "client")
	p := serverCA.Server("server")
	_, addr, stop := tlsServer(t, TLS{CertFile: p.CertFile, KeyFile: p.KeyFile, ClientCAFile: clientCA.CertFile, ClientSAN: "localhost"})
	defer stop()
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"client cert", clientTLS(serverCA.Pool, clientCA.Client("good", "localhost").TLS), true},
		{"no client cert", clientTLS(serverCA.Pool), false},
		{"another CA's cert", clientTLS(serverCA.Pool, testpki.NewCA(t, "other").Client("other", "localhost").TLS), false},
		{"another SAN", clientTLS(serverCA.Pool, clientCA.Client("elsewhere", "elsewhere.example").TLS), false},
		{"a server cert", clientTLS(serverCA.Pool, clientCA.Server("notclient").TLS), false},
	} {
		err := tlsCall(t, addr, tc.creds)
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok && err == nil {
			t.Errorf("%s: served", tc.name)
		}
	}
}

// handshake reports whether a TLS handshake trusting roots succeeds.
func handshake(addr string, roots *x509.CertPool) error {
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err == nil {
		c.Close()
	}
	return err
}

// install puts p's files at cert and key, by renames as
// TestReloadGRPCServerCerts does.
func install(t *testing.T, p testpki.Pair, cert, key string) {
	t.Helper()
	for from, to := range map[string]string{p.CertFile: cert, p.KeyFile: key} {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(filepath.Dir(to), ".tmp-"+filepath.Base(to))
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, to); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReloadGRPCServerCerts: a new certificate in the files is served to
// new connections after SIGHUP's ReloadTLS or on the files' change;
// connections already made go on; a bad certificate changes nothing.
func TestReloadTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca1, ca2, ca3 := testpki.NewCA(t, "one"), testpki.NewCA(t, "two"), testpki.NewCA(t, "three")
	install(t, ca1.Server("s1"), cert, key)
	srv, addr, stop := tlsServer(t, TLS{CertFile: cert, KeyFile: key})
	defer stop()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(clientTLS(ca1.Pool)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	old := pb.NewRateLimitServiceClient(conn)
	oldCall := func() error {
		_, err := old.ShouldRateLimit(context.Background(), envoyRequest("basic", [][][2]string{{{"key1", "foo"}}}, 1))
		return err
	}
	if err := oldCall(); err != nil {
		t.Fatal(err)
	}
	if err := handshake(addr, ca1.Pool); err != nil {
		t.Errorf("initial certificate: %v", err)
	}
	if err := handshake(addr, ca2.Pool); err == nil {
		t.Error("the new CA is trusted before the reload")
	}

	// SIGHUP.
	install(t, ca2.Server("s2"), cert, key)
	if err := srv.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if err := handshake(addr, ca2.Pool); err != nil {
		t.Errorf("after the reload, the new certificate: %v", err)
	}
	if err := handshake(addr, ca1.Pool); err == nil {
		t.Error("after the reload, the old certificate is still served")
	}
	if err := oldCall(); err != nil {
		t.Errorf("the connection made before the reload: %v", err)
	}

	// A bad certificate: a key of another pair, then no PEM at all.
	install(t, ca3.Server("s3"), cert, filepath.Join(dir, "unused.key"))
	if err := srv.ReloadTLS(); err == nil {
		t.Error("a certificate with another's key reloaded")
	}
	if err := os.WriteFile(cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadTLS(); err == nil {
		t.Error("a file without a certificate reloaded")
	}
	if err := handshake(addr, ca2.Pool); err != nil {
		t.Errorf("after a bad reload, the running certificate: %v", err)
	}

	// The files' change.
	reloads := make(chan error, 16)
	srv.tlsReloaded = func(err error) { reloads <- err }
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan error, 1)
	go func() { watched <- srv.WatchTLS(ctx) }()
	defer func() {
		cancel()
		if err := <-watched; err != nil {
			t.Errorf("WatchTLS: %v", err)
		}
	}()
	p3 := ca3.Server("s3b")
	deadline := time.After(30 * time.Second)
	for {
		// WatchTLS may start after a write: write until a reload serves it.
		install(t, p3, cert, key)
		select {
		case err := <-reloads:
			if err == nil && handshake(addr, ca3.Pool) == nil {
				if err := oldCall(); err != nil {
					t.Errorf("the connection made before the reloads: %v", err)
				}
				return
			}
		case <-deadline:
			t.Fatal("no reload within 30s of the files' change")
		case <-time.After(time.Second):
		}
	}
}
