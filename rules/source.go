package rules

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// A Source holds the running rule set of a file and replaces it when the file
// changes: on [Source.Reload], or as [Source.Watch] sees the file change or
// the process receive a signal ([WithSignal]).
//
// A replacement is atomic: [Source.Load] returns the old set or the new,
// never a mix, and a request that loaded a set keeps it to the end. A file
// that does not read or validate never replaces the running set: the error
// is returned and reported ([WithErrorHook]). Functions given to
// [Source.OnReload] are told of each replacement, in order, with the old set
// and the new: that is where state carries over ([Compare]).
//
// Replace the file atomically (write a temporary file in the same directory
// and rename it over the old; a Kubernetes ConfigMap volume does so): a file
// rewritten in place may be read half written, and then it is either invalid
// (and kept out) or a shorter set that the rest of the write replaces.
//
// A Source is safe for concurrent use.
type Source struct {
	path string
	o    *options
	cur  atomic.Pointer[Set]

	mu  sync.Mutex // serializes reloads
	sum [sha256.Size]byte

	subsMu sync.Mutex
	subs   map[int]func(old, new *Set)
	nextID int

	ready func() // called when Watch watches; for tests
}

// Open reads and validates the rule file at path (as [ParseFile] does, with
// opts) and returns a Source holding its set, or the file's errors.
func Open(path string, opts ...Option) (*Source, error) {
	s := &Source{path: path, o: buildOptions("Open", opts)}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	set, err := parse(path, data, s.o)
	if err != nil {
		return nil, err
	}
	s.cur.Store(set)
	s.sum = sha256.Sum256(data)
	return s, nil
}

// Load returns the running set. Call it once per request and use that set
// for the whole request.
func (s *Source) Load() *Set { return s.cur.Load() }

// Path returns the file's path, as given to Open.
func (s *Source) Path() string { return s.path }

// OnReload registers fn to be called after each replacement of the set,
// with the set replaced and its replacement, and returns a function that
// unregisters it. Functions are called in the order registered, by the
// goroutine that reloaded, one replacement at a time; a replacement waits
// for them, so keep them short.
func (s *Source) OnReload(fn func(old, new *Set)) (stop func()) {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	if s.subs == nil {
		s.subs = make(map[int]func(old, new *Set))
	}
	id := s.nextID
	s.nextID++
	s.subs[id] = fn
	return func() {
		s.subsMu.Lock()
		defer s.subsMu.Unlock()
		delete(s.subs, id)
	}
}

// Reload reads the file again and, if it changed and validates, makes it
// the running set and tells the OnReload functions. A file whose bytes did
// not change is not parsed again and replaces nothing. The error of a file
// that does not read or validate is returned, reported to the error hook,
// and the running set is kept.
func (s *Source) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := readFile(s.path)
	if err != nil {
		s.report(err)
		return err
	}
	sum := sha256.Sum256(data)
	if sum == s.sum {
		return nil
	}
	set, err := parse(s.path, data, s.o)
	if err != nil {
		s.report(err)
		return err
	}
	old := s.cur.Swap(set)
	s.sum = sum
	for _, fn := range s.subscribers() {
		fn(old, set)
	}
	return nil
}

// subscribers returns the OnReload functions in the order registered.
func (s *Source) subscribers() []func(old, new *Set) {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	fns := make([]func(old, new *Set), 0, len(s.subs))
	for id := 0; id < s.nextID; id++ {
		if fn, ok := s.subs[id]; ok {
			fns = append(fns, fn)
		}
	}
	return fns
}

func (s *Source) report(err error) {
	if s.o.errorHook != nil {
		s.o.errorHook(err)
	}
}

// Watch reloads the file whenever it changes, until ctx is done, and then
// returns nil; it returns an error only when the watch cannot start or the
// file system watcher fails. It watches the file's directory, so that a file
// replaced by a rename or a symbolic link swap (an editor's save, a
// Kubernetes ConfigMap update) is seen as well as one written in place, and
// reloads once the directory has been quiet for the debounce period
// ([WithDebounce]). With [WithSignal] it also reloads, at once, on each of
// those signals. It reloads once when it starts, so that a change made after
// Open and before the watch began is not missed. Errors of reloads and of
// the watcher go to the error hook. Run it in a goroutine of its own; it
// leaves none behind.
func (s *Source) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rules: watch: %w", err)
	}
	defer w.Close()
	dirs, relevant := watchTargets(s.path)
	for _, dir := range dirs {
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("rules: watch %s: %w", dir, err)
		}
	}
	var sigs chan os.Signal
	if len(s.o.signals) > 0 {
		sigs = make(chan os.Signal, 1)
		signal.Notify(sigs, s.o.signals...)
		defer signal.Stop(sigs)
	}
	if s.ready != nil {
		s.ready()
	}
	_ = s.Reload()
	return s.watch(ctx, w.Events, w.Errors, sigs, relevant)
}

// watchTargets returns the directories to watch for path and whether a
// changed name in them concerns it: the file's own name, its link target's
// name in a directory of its own, or a name beginning with "..", as the
// directories and links a Kubernetes volume swaps.
func watchTargets(path string) (dirs []string, relevant func(name string) bool) {
	dir, base := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	dir = filepath.Clean(dir)
	dirs = []string{dir}
	names := []string{base}
	if target, err := filepath.EvalSymlinks(path); err == nil {
		tdir, tbase := filepath.Split(target)
		tdir = filepath.Clean(tdir)
		if abs, err := filepath.Abs(dir); err == nil {
			if tabs, err := filepath.Abs(tdir); err == nil && tabs != abs && !strings.HasPrefix(tabs, abs+string(filepath.Separator)) {
				dirs = append(dirs, tdir)
				names = append(names, tbase)
			}
		}
	}
	return dirs, func(name string) bool {
		b := filepath.Base(name)
		return strings.HasPrefix(b, "..") || slices.Contains(names, b)
	}
}

// watch is Watch's loop, apart from the file system so that tests can drive
// it.
func (s *Source) watch(ctx context.Context, events <-chan fsnotify.Event, errs <-chan error, sigs <-chan os.Signal, relevant func(string) bool) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var pending <-chan time.Time // timer.C while a reload waits
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return errors.New("rules: watch: the file system watcher stopped")
			}
			if relevant(ev.Name) {
				timer.Reset(s.o.debounce)
				pending = timer.C
			}
		case err, ok := <-errs:
			if !ok {
				return errors.New("rules: watch: the file system watcher stopped")
			}
			s.report(fmt.Errorf("rules: watch: %w", err))
			if errors.Is(err, fsnotify.ErrEventOverflow) { // events were lost
				timer.Reset(s.o.debounce)
				pending = timer.C
			}
		case <-pending:
			pending = nil
			_ = s.Reload()
		case <-sigs:
			_ = s.Reload()
		}
	}
}
