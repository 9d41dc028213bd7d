package rlserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// TLS configures the gRPC server's TLS (GRPC_SERVER_USE_TLS and the
// GRPC_SERVER_TLS_ and GRPC_CLIENT_TLS_ variables).
type TLS struct {
	// CertFile and KeyFile are the server's certificate chain and key, PEM.
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the server require client
	// certificates signed by one of its certificates (mTLS).
	ClientCAFile string
	// ClientSAN, when set with ClientCAFile, is a DNS name the client's
	// certificate must carry.
	ClientSAN string
}

// certs holds the TLS configuration in force, swapped whole when the files
// are read again, so that a handshake sees one certificate and one client
// CA pool.
type certs struct {
	o       TLS
	mu      sync.Mutex // serializes reloads
	current atomic.Pointer[tls.Config]
}

// load reads the files and returns the configuration they make.
func (o TLS) load(now time.Time) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("rlserver: TLS key pair: %w", err)
	}
	if now.After(pair.Leaf.NotAfter) {
		return nil, fmt.Errorf("rlserver: TLS certificate %s expired at %v", o.CertFile, pair.Leaf.NotAfter)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if o.ClientCAFile != "" {
		pem, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("rlserver: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("rlserver: client CA %s: no PEM certificate", o.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if san := o.ClientSAN; san != "" {
			cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
				if len(chains) == 0 || len(chains[0]) == 0 {
					return errors.New("rlserver: no client certificate")
				}
				return chains[0][0].VerifyHostname(san)
			}
		}
	}
	return cfg, nil
}

// config is the tls.Config the server is given: each handshake takes the
// configuration in force.
func (c *certs) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.current.Load(), nil
		},
	}
}

// ReloadTLS reads the TLS files again and, when they make a valid
// configuration, serves it to new connections; connections already made
// keep theirs. A certificate that does not load (missing, a key that does
// not match it, expired) changes nothing: the error is returned and logged.
// Without TLS it does nothing.
func (s *Server) ReloadTLS() error {
	if s.certs == nil {
		return nil
	}
	s.certs.mu.Lock()
	defer s.certs.mu.Unlock()
	cfg, err := s.certs.o.load(time.Now())
	if s.tlsReloaded != nil {
		defer s.tlsReloaded(err)
	}
	if err != nil {
		s.o.Log.Error("TLS certificate not reloaded; the running one stays", "cert", s.certs.o.CertFile, "error", err)
		return err
	}
	s.certs.current.Store(cfg)
	s.o.Log.Info("TLS certificate reloaded", "cert", s.certs.o.CertFile, "not_after", cfg.Certificates[0].Leaf.NotAfter)
	return nil
}

// WatchTLS reloads the TLS files whenever they change, until ctx is done,
// watching their directories as [Server.Watch] does the configuration's
// (a Kubernetes Secret's "..data" swap included). Without TLS it returns
// at once.
func (s *Server) WatchTLS(ctx context.Context) error {
	if s.certs == nil {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rlserver: watch TLS: %w", err)
	}
	defer w.Close()
	names := map[string]bool{}
	for _, f := range []string{s.certs.o.CertFile, s.certs.o.KeyFile, s.certs.o.ClientCAFile} {
		if f == "" {
			continue
		}
		dir := filepath.Dir(f)
		names[filepath.Clean(f)] = true
		if !names[dir] {
			if err := w.Add(dir); err != nil {
				return fmt.Errorf("rlserver: watch TLS %s: %w", dir, err)
			}
			names[dir] = true
		}
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
				return errors.New("rlserver: watch TLS: the file system watcher stopped")
			}
			if names[filepath.Clean(ev.Name)] || strings.HasPrefix(filepath.Base(ev.Name), "..") {
				timer.Reset(s.o.Debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("rlserver: watch TLS: the file system watcher stopped")
			}
			s.o.Log.Error("watching the TLS files", "error", err)
			timer.Reset(s.o.Debounce)
		case <-timer.C:
			_ = s.ReloadTLS()
		}
	}
}
