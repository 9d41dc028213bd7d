package rlserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlservice"
	"github.com/ratekit/ratekit/core"
)

const cfg3 = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// serve starts a server on a loopback port and returns a client of it and
// a function that stops it and waits for Serve to return.
func serve(t *testing.T, dir string) (*Server, pb.RateLimitServiceClient, healthpb.HealthClient, func()) {
	t.Helper()
	srv, err := New(Options{
		Config:   dir,
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Service:  rlservice.Options{Clock: core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		Debounce: time.Millisecond,
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
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		conn.Close()
	}
	return srv, pb.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn), stop
}

func writeFile(t *testing.T, dir, name, data string) {
	t.Helper()
	// Written beside and renamed, as a ConfigMap swap or an editor would.
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func call(t *testing.T, c pb.RateLimitServiceClient, ip string) *pb.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
		Domain:      "edge",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func TestServeReloadStop(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "edge.yaml", cfg3)
	srv, c, h, stop := serve(t, dir)
	defer stop()

	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		hr, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v, want SERVING", svc, hr, err)
		}
	}
	for i := range 4 {
		resp := call(t, c, "10.0.0.1")
		wantCode := pb.RateLimitResponse_OK
		if i == 3 {
			wantCode = pb.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != wantCode {
			t.Errorf("call %d: %v, want %v", i, resp.OverallCode, wantCode)
		}
	}

	// A bad file changes nothing.
	writeFile(t, dir, "edge.yaml", strings.Replace(cfg3, "minute", "fortnight", 1))
	if err := srv.Reload(); err == nil || !strings.Contains(err.Error(), "edge.yaml:4:") {
		t.Errorf("Reload of a bad file: %v, want its error at edge.yaml:4", err)
	}
	if resp := call(t, c, "10.0.0.1"); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after a bad reload: %v, want OVER_LIMIT", resp.OverallCode)
	}

	// A good one takes over, keeping the usage: 3 used of 5.
	writeFile(t, dir, "edge.yaml", strings.Replace(cfg3, "requests_per_unit: 3", "requests_per_unit: 5", 1))
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	resp := call(t, c, "10.0.0.1")
	if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 1 || resp.Statuses[0].CurrentLimit.RequestsPerUnit != 5 {
		t.Errorf("after reload: %v, want OK with 1 of 5 left", resp)
	}
}

// Watch reloads when a file of the directory changes.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "edge.yaml", cfg3)
	srv, c, _, stop := serve(t, dir)
	defer stop()
	reloads := make(chan error, 16)
	srv.mu.Lock()
	srv.reloaded = func(err error) { reloads <- err }
	srv.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan error, 1)
	go func() { watched <- srv.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-watched; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	// Watch may start after the write; keep writing new contents until a
	// reload sees the new limit. Each write is a new configuration.
	deadline := time.After(30 * time.Second)
	for {
		writeFile(t, dir, "edge.yaml", strings.Replace(cfg3, "requests_per_unit: 3", "requests_per_unit: 7", 1))
		select {
		case err := <-reloads:
			if err != nil {
				t.Fatalf("reload: %v", err)
			}
			// A reload may have begun before the last write: wait for
			// the one that sees it.
			if resp := call(t, c, "10.0.0.2"); resp.Statuses[0].CurrentLimit.RequestsPerUnit == 7 {
				return
			}
		case <-deadline:
			t.Fatal("no reload within 30s of the file's change")
		case <-time.After(time.Second):
			// not seen yet (the watch may not have begun): write again
		}
	}
}
