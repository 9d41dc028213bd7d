//go:build unix

package rules

import (
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
	stop := startWatch(t, s)
	for v := 1; v <= 5; v++ {
		writeAtomic(t, path, version(v))
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		r.waitVersion(t, s, v)
	}
	stop()
}
