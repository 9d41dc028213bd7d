package rules

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"
)

// failAfter bounds every wait of these tests: a failure, never a pace.
const failAfter = 30 * time.Second

// version writes rule set number v: a rule named after it, and v+1 limits
// in another, so that a set read half written is told apart.
func version(v int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rules:\n  - name: v%d\n    match: {routes: [/v]}\n    limits: [{name: x, rate: %d/1m, key: ip}]\n", v, v+1)
	b.WriteString("  - name: rest\n    limits:\n")
	for i := range v%MaxLimits + 1 {
		fmt.Fprintf(&b, "      - {name: l%d, rate: 100/1m, key: ip}\n", i)
	}
	return b.String()
}

// versionOf returns the version of a set written by version, or -1.
func versionOf(s *Set) int {
	var v int
	if _, err := fmt.Sscanf(s.Rules()[0].Name(), "v%d", &v); err != nil {
		return -1
	}
	if len(s.Rules()) != 2 || len(s.Rules()[1].Limits()) != v%MaxLimits+1 {
		return -1 // read half written
	}
	return v
}

// writeAtomic replaces path by a rename, as an editor's save does.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type reloads struct {
	ch   chan [2]*Set
	errs chan error
}

func watchReloads(s *Source) *reloads {
	r := &reloads{ch: make(chan [2]*Set, 1000), errs: make(chan error, 1000)}
	s.OnReload(func(old, new *Set) { r.ch <- [2]*Set{old, new} })
	return r
}

func (r *reloads) hook(err error) {
	select {
	case r.errs <- err:
	default:
	}
}

// waitVersion waits for the reload that brings version v, and checks that
// every reload on the way replaced the set before it.
func (r *reloads) waitVersion(t *testing.T, s *Source, v int) {
	t.Helper()
	deadline := time.After(failAfter)
	for {
		select {
		case pair := <-r.ch:
			if versionOf(pair[1]) == v {
				if s.Load() != pair[1] && len(r.ch) == 0 {
					t.Fatalf("version %d: Load is not the new set", v)
				}
				return
			}
		case <-deadline:
			t.Fatalf("version %d never loaded; running %d", v, versionOf(s.Load()))
		}
	}
}

func TestSourceReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeAtomic(t, path, version(1))
	var hooked []error
	s, err := Open(path, WithErrorHook(func(err error) { hooked = append(hooked, err) }))
	if err != nil {
		t.Fatal(err)
	}
	r := watchReloads(s)
	v1 := s.Load()
	if versionOf(v1) != 1 || s.Path() != path {
		t.Fatalf("version %d at %s", versionOf(v1), s.Path())
	}

	// An invalid file is reported and replaces nothing.
	writeAtomic(t, path, strings.Replace(version(2), "rate: 3/1m", "rate: 3/1q", 1))
	err = s.Reload()
	var e *Error
	if !errors.As(err, &e) || e.File != path || e.Line != 4 || e.Path != "rules[0].limits[0].rate" {
		t.Fatalf("Reload of an invalid file: %v", err)
	}
	if len(hooked) != 1 || hooked[0] != err {
		t.Errorf("hook got %v", hooked)
	}
	if s.Load() != v1 || len(r.ch) != 0 {
		t.Fatal("an invalid file replaced the set")
	}
	// So is a missing file.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); !errors.Is(err, os.ErrNotExist) || len(hooked) != 2 || s.Load() != v1 {
		t.Fatalf("Reload of a missing file: %v (hooked %d)", err, len(hooked))
	}

	// A valid file replaces the set; the old one still works for a request
	// that holds it.
	writeAtomic(t, path, version(2))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	pair := <-r.ch
	if pair[0] != v1 || versionOf(pair[1]) != 2 || s.Load() != pair[1] {
		t.Fatalf("reload told %v -> %v", pair[0], pair[1])
	}
	if rule, err := v1.Match(newRequest("GET", "/v", nil)); err != nil || rule.Name() != "v1" {
		t.Errorf("the old set matched %v, %v", rule, err)
	}
	// The same bytes again replace nothing.
	writeAtomic(t, path, version(2))
	if err := s.Reload(); err != nil || len(r.ch) != 0 || versionOf(s.Load()) != 2 {
		t.Fatalf("a reload of the same file: %v, %d reloads", err, len(r.ch))
	}

	// An unregistered function is not called.
	called := false
	stop := s.OnReload(func(_, _ *Set) { called = true })
	stop()
	writeAtomic(t, path, version(3))
	if err := s.Reload(); err != nil || called {
		t.Fatalf("Reload: %v; unregistered function called: %v", err, called)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "none.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing file: %v", err)
	}
	path := filepath.Join(dir, "bad.yaml")
	writeAtomic(t, path, "rules: [")
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), path+":1:8:") {
		t.Errorf("Open of an invalid file: %v", err)
	}
}

// TestSourceWatch rewrites the file many times, in the ways files are
// replaced, and waits for each version to be loaded.
func TestSourceWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeAtomic(t, path, version(0))
	var r *reloads
	s, err := Open(path, WithDebounce(time.Millisecond), WithErrorHook(func(err error) { r.hook(err) }))
	if err != nil {
		t.Fatal(err)
	}
	r = watchReloads(s)
	stop := startWatch(t, s)

	for v := 1; v <= 60; v++ {
		switch v % 3 {
		case 0: // in place
			if err := os.WriteFile(path, []byte(version(v)), 0o600); err != nil {
				t.Fatal(err)
			}
		default:
			writeAtomic(t, path, version(v))
		}
		r.waitVersion(t, s, v)
	}

	// An invalid file is reported and the set kept; the next valid one loads.
	for len(r.errs) > 0 {
		<-r.errs
	}
	writeAtomic(t, path, "rules: [{name: broken}]")
	select {
	case err := <-r.errs:
		if !strings.Contains(err.Error(), "rules[0].limits: no limits") {
			t.Errorf("error %v", err)
		}
	case <-time.After(failAfter):
		t.Fatal("an invalid file was not reported")
	}
	if versionOf(s.Load()) != 60 {
		t.Fatalf("running version %d after an invalid file", versionOf(s.Load()))
	}
	writeAtomic(t, path, version(61))
	r.waitVersion(t, s, 61)

	// Another file in the directory is no reason to reload.
	if err := os.WriteFile(filepath.Join(dir, "other.yaml"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	stop()
}

// TestSourceWatchConfigMap swaps the file as a Kubernetes ConfigMap volume
// does: the file is a link through "..data", a link to a directory that each
// update replaces with a rename.
func TestSourceWatchConfigMap(t *testing.T) {
	dir := t.TempDir()
	publish := func(v int) {
		t.Helper()
		gen := filepath.Join(dir, fmt.Sprintf("..gen%d", v))
		if err := os.Mkdir(gen, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(gen, "rules.yaml"), []byte(version(v)), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if v > 0 {
			if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("..gen%d", v-1))); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(0)
	path := filepath.Join(dir, "rules.yaml")
	if err := os.Symlink(filepath.Join("..data", "rules.yaml"), path); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, WithDebounce(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := watchReloads(s)
	stop := startWatch(t, s)
	for v := 1; v <= 20; v++ {
		publish(v)
		r.waitVersion(t, s, v)
	}
	stop()
}

// TestWatchLoop drives Watch's loop with events and signals of its own in
// a bubble of fake time: changes in a burst are read once, when the
// directory has been quiet for the debounce period; a signal reloads at
// once; the loop ends with its context.
func TestWatchLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "rules.yaml")
		writeAtomic(t, path, version(0))
		s, err := Open(path, WithDebounce(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var at []time.Duration
		start := time.Now()
		s.OnReload(func(_, _ *Set) {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, time.Since(start))
		})
		events := make(chan fsnotify.Event)
		errs := make(chan error)
		sigs := make(chan os.Signal)
		_, relevant := watchTargets(path)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- s.watch(ctx, events, errs, sigs, relevant) }()

		// A burst of five writes, 30ms apart: one reload, 100ms after the last.
		for i := range 5 {
			if i == 4 {
				writeAtomic(t, path, version(1))
			}
			events <- fsnotify.Event{Name: path, Op: fsnotify.Write}
			time.Sleep(30 * time.Millisecond)
		}
		// An event on another file changes nothing.
		events <- fsnotify.Event{Name: filepath.Join(dir, "other"), Op: fsnotify.Create}
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		if want := []time.Duration{220 * time.Millisecond}; fmt.Sprint(at) != fmt.Sprint(want) {
			t.Errorf("reloads at %v, want %v", at, want)
		}
		mu.Unlock()

		// A signal reloads at once.
		writeAtomic(t, path, version(2))
		sigs <- os.Interrupt
		synctest.Wait()
		if versionOf(s.Load()) != 2 {
			t.Errorf("after a signal: version %d", versionOf(s.Load()))
		}
		// A lost event reloads after the debounce period.
		writeAtomic(t, path, version(3))
		errs <- fsnotify.ErrEventOverflow
		time.Sleep(99 * time.Millisecond)
		synctest.Wait()
		if versionOf(s.Load()) != 2 {
			t.Errorf("reloaded before the debounce period")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if versionOf(s.Load()) != 3 {
			t.Errorf("after an overflow: version %d", versionOf(s.Load()))
		}

		cancel()
		if err := <-done; err != nil {
			t.Errorf("loop returned %v", err)
		}
		go func() { done <- s.watch(t.Context(), events, errs, sigs, relevant) }()
		close(events)
		if err := <-done; err == nil {
			t.Error("a closed watcher is no error")
		}
	})
}

func TestWatchTargets(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir()
	target := filepath.Join(other, "real.yaml")
	writeAtomic(t, target, version(0))
	link := filepath.Join(dir, "rules.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	dirs, relevant := watchTargets(link)
	if len(dirs) != 2 || dirs[0] != dir || dirs[1] != other {
		t.Errorf("dirs %v", dirs)
	}
	for name, want := range map[string]bool{link: true, target: true, filepath.Join(dir, "..data"): true, filepath.Join(dir, "x.yaml"): false, filepath.Join(dir, "rules.yaml.swp"): false} {
		if relevant(name) != want {
			t.Errorf("relevant(%s) = %v", name, !want)
		}
	}
	if dirs, _ := watchTargets("rules.yaml"); len(dirs) != 1 || dirs[0] != "." {
		t.Errorf("a bare name: %v", dirs)
	}
}

// TestSourceLoadDuringReloads has requests load and use sets while the file
// is reloaded: each sees one whole set, old or new.
func TestSourceLoadDuringReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeAtomic(t, path, version(0))
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			req := newRequest("GET", "/v", nil)
			for {
				select {
				case <-stop:
					return
				default:
				}
				set := s.Load()
				v := versionOf(set)
				r, err := set.Match(req)
				if v < 0 || err != nil || r.Name() != fmt.Sprintf("v%d", v) || r.Limits()[0].Policy().Limit != int64(v+1) {
					t.Errorf("version %d: rule %v, %v", v, r, err)
					return
				}
			}
		})
	}
	for v := 1; v <= 100; v++ {
		writeAtomic(t, path, version(v))
		if err := s.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if versionOf(s.Load()) != 100 {
		t.Errorf("running version %d", versionOf(s.Load()))
	}
}

// startWatch runs s.Watch in a goroutine and returns once its watcher is
// set up; stop ends it and checks it returned nil.
func startWatch(t *testing.T, s *Source) (stop func()) {
	t.Helper()
	ready := make(chan struct{})
	s.ready = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Watch(ctx) }()
	<-ready
	return func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch returned %v", err)
			}
		case <-time.After(failAfter):
			t.Fatal("Watch did not return after its context was done")
		}
	}
}
