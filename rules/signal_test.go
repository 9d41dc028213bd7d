//go:build unix

package rules

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSourceWatchSignal reloads on a real SIGHUP, with a debounce period so
// long that only the signal can have reloaded.
func TestSourceWatchSignal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeAtomic(t, path, version(0))
	s, err := Open(path, WithDebounce(time.Hour), WithSignal(syscall.SIGHUP))
	if err != nil {
		t.Fatal(err)
	}
	r := watchReloads(s)
	ready := make(chan struct{})
	s.ready = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Watch(ctx) }()
	<-ready
	for v := 1; v <= 5; v++ {
		writeAtomic(t, path, version(v))
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		r.waitVersion(t, s, v)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch returned %v", err)
	}
}
