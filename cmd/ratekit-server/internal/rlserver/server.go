// Package rlserver runs the rate limit service: the gRPC server of Envoy's
// RateLimitService and of gRPC health checking, over a [rlservice.Limiter]
// whose configuration it reloads from a file or a directory.
//
// A reload ([Server.Reload], [Server.Watch]) reads every file again and
// replaces the configuration atomically, keeping every limit's usage; a
// file that does not read or validate changes nothing, its error is
// returned and logged, and the running configuration stays. [Server.Serve]
// stops gracefully when its context is done: health checks answer
// NOT_SERVING at once, calls in flight finish (up to the drain timeout),
// new ones are refused.
package rlserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlconfig"
	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlservice"
)

// Options configure a [Server].
type Options struct {
	// Config is the configuration file, or a directory of them.
	Config string
	// Merge merges files of one domain (MERGE_DOMAIN_CONFIG).
	Merge bool
	// Service configures the limiter.
	Service rlservice.Options
	// Log gets what the server does. Default: slog.Default().
	Log *slog.Logger
	// Debounce is how long the configuration's directory must be quiet
	// before Watch reloads. Default: 200ms.
	Debounce time.Duration
	// Drain bounds how long Serve waits for calls in flight when it stops.
	// Default: 10s.
	Drain time.Duration
	// MaxConnectionAge and MaxConnectionAgeGrace are gRPC's keepalive
	// bounds (GRPC_MAX_CONNECTION_AGE, GRPC_MAX_CONNECTION_AGE_GRACE); 0
	// is gRPC's default, no bound.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// TLS, when set, serves over TLS; [Server.ReloadTLS] and
	// [Server.WatchTLS] read its files again.
	TLS *TLS
}

// A Server is the service with its configuration source.
type Server struct {
	o       Options
	limiter *rlservice.Limiter
	health  *health.Server
	mu      sync.Mutex // serializes reloads

	certs *certs // nil without TLS

	reloaded    func(error) // told of each reload's outcome; for tests
	tlsReloaded func(error) // told of each TLS reload's outcome; for tests
}

// New loads the configuration and returns a Server deciding by it.
func New(o Options) (*Server, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Debounce == 0 {
		o.Debounce = 200 * time.Millisecond
	}
	if o.Drain == 0 {
		o.Drain = 10 * time.Second
	}
	cfg, err := rlconfig.Load(o.Config, o.Merge)
	if err != nil {
		return nil, err
	}
	l, err := rlservice.New(cfg, o.Service)
	if err != nil {
		return nil, err
	}
	o.Log.Info("configuration loaded", "path", o.Config, "domains", cfg.Domains(), "limits", len(cfg.Limits()))
	srv := &Server{o: o, limiter: l, health: health.NewServer()}
	if o.TLS != nil {
		tc, err := o.TLS.load(time.Now())
		if err != nil {
			return nil, err
		}
		srv.certs = &certs{o: *o.TLS}
		srv.certs.current.Store(tc)
	}
	return srv, nil
}

// Limiter returns the server's limiter.
func (s *Server) Limiter() *rlservice.Limiter { return s.limiter }

// Reload reads the configuration again and makes it the one in force. On
// error nothing changes.
func (s *Server) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg, err := rlconfig.Load(s.o.Config, s.o.Merge)
	if err == nil {
		err = s.limiter.SetConfig(cfg)
	}
	if s.reloaded != nil {
		defer s.reloaded(err)
	}
	if err != nil {
		s.o.Log.Error("configuration not reloaded; the running one stays", "path", s.o.Config, "error", err)
		return err
	}
	s.o.Log.Info("configuration reloaded", "path", s.o.Config, "domains", cfg.Domains(), "limits", len(cfg.Limits()))
	return nil
}

// Watch reloads the configuration whenever its files change, until ctx is
// done. It watches the configuration's directory (for a file, the one
// holding it), so that a file replaced by a rename or a symbolic link swap
// (a Kubernetes ConfigMap update) is seen as well as one written in place,
// and reloads once the directory has been quiet for the debounce period.
func (s *Server) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rlserver: watch: %w", err)
	}
	defer w.Close()
	dir, only := s.o.Config, ""
	if fi, err := statDir(dir); err != nil {
		return fmt.Errorf("rlserver: watch: %w", err)
	} else if !fi {
		dir, only = filepath.Dir(dir), filepath.Base(dir)
	}
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("rlserver: watch %s: %w", dir, err)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("rlserver: watch: the file system watcher stopped")
			}
			// In a directory, files whose name begins with '.' are not
			// read (an editor's or a writer's temporary file), but a
			// Kubernetes volume swaps its "..data" link.
			b := filepath.Base(ev.Name)
			if strings.HasPrefix(b, "..") || b == only || (only == "" && !strings.HasPrefix(b, ".")) {
				timer.Reset(s.o.Debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("rlserver: watch: the file system watcher stopped")
			}
			s.o.Log.Error("watching the configuration", "error", err)
			timer.Reset(s.o.Debounce)
		case <-timer.C:
			_ = s.Reload()
		}
	}
}

// Serve serves Envoy's RateLimitService and gRPC health checking on lis
// until ctx is done, then stops gracefully; it returns nil after a stop
// that ctx asked for.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	var opts []grpc.ServerOption
	if s.o.MaxConnectionAge > 0 || s.o.MaxConnectionAgeGrace > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: s.o.MaxConnectionAge, MaxConnectionAgeGrace: s.o.MaxConnectionAgeGrace}))
	}
	if s.certs != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.certs.config())))
	}
	g := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(g, s.limiter)
	healthpb.RegisterHealthServer(g, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	s.o.Log.Info("serving", "addr", lis.Addr().String(), "tls", s.certs != nil)
	select {
	case err := <-errc:
		s.health.Shutdown()
		return fmt.Errorf("rlserver: %w", err)
	case <-ctx.Done():
	}
	s.o.Log.Info("stopping: draining calls in flight", "drain", s.o.Drain)
	s.health.Shutdown() // NOT_SERVING, so that load balancers move away
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(s.o.Drain)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		g.Stop()
		<-stopped
	}
	<-errc
	s.o.Log.Info("stopped")
	return nil
}

// statDir reports whether path is a directory.
func statDir(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}
