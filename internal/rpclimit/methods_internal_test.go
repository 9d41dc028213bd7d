package rpclimit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// entries returns how many methods l keeps MethodFunc's answer for.
func (l *Limiter) entries() int {
	n := 0
	l.byFunc.Range(func(any, any) bool { n++; return true })
	return n
}

func newMemory(t *testing.T, p core.Policy) *core.Memory {
	t.Helper()
	m, err := core.New(p, core.WithClock(core.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// 5,000 calls with made-up method names, as a gRPC proxy
// (UnknownServiceHandler) receives them, keep one entry and mint one key:
// they are all UnknownMethod, to MethodFunc and to the route key.
func TestMadeUpMethodsKeepNothing(t *testing.T) {
	def := newMemory(t, core.Policy{Limit: 2, Window: time.Minute})
	shared := newMemory(t, core.Policy{Limit: 2, Window: time.Minute})
	var asked []string
	l, err := New("test", def, Config{
		Key: keyfunc.Join(keyfunc.Route, keyfunc.PeerIP),
		MethodFunc: func(m string) core.Limiter {
			asked = append(asked, m)
			return shared
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	for i := range 5000 {
		c := &Call{Ctx: context.Background(), Peer: "192.0.2.1:1", Procedure: fmt.Sprintf("/made.Up/Method%d", i), Unknown: true}
		if v := l.Check(c); v.Serve() {
			served++
		}
	}
	if n := l.entries(); n != 1 {
		t.Errorf("%d method entries after 5,000 made-up methods, want 1", n)
	}
	if !slices.Equal(asked, []string{UnknownMethod}) {
		t.Errorf("MethodFunc asked %d times (first %q), want once for %q", len(asked), asked[:min(len(asked), 3)], UnknownMethod)
	}
	if served != 2 {
		t.Errorf("%d of 5,000 made-up methods served on a limit of 2 per route", served)
	}
	if keys := shared.Stats().Keys + def.Stats().Keys; keys != 1 {
		t.Errorf("%d keys in the stores after 5,000 made-up methods, want 1", keys)
	}
}

// Methods named in Config.Methods are the server's, proxied or not; one
// of them may be UnknownMethod, the limiter of every unknown method.
func TestUnknownMethodInMethods(t *testing.T) {
	def := newMemory(t, core.Policy{Name: "def", Limit: 5, Window: time.Minute})
	export := newMemory(t, core.Policy{Name: "export", Limit: 5, Window: time.Minute})
	unknown := newMemory(t, core.Policy{Name: "unknown", Limit: 5, Window: time.Minute})
	l, err := New("test", def, Config{Methods: map[string]core.Limiter{"/shop.Orders/Export": export, UnknownMethod: unknown}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		method  string
		unknown bool
		route   string
		policy  string
	}{
		{"/shop.Orders/Export", true, "/shop.Orders/Export", "export"},
		{"/made.Up/M", true, UnknownMethod, "unknown"},
		{"/test.Echo/Say", false, "/test.Echo/Say", "def"},
	} {
		c := &Call{Ctx: context.Background(), Peer: "192.0.2.1:1", Procedure: tt.method, Unknown: tt.unknown}
		v := l.Check(c)
		var got string
		v.Headers(func(name, value string) {
			if name == "ratelimit-policy" {
				got, _, _ = strings.Cut(strings.Trim(value, `"`), `"`)
			}
		})
		if got != tt.policy || c.Route() != tt.route {
			t.Errorf("%s (unknown %v): route %q, policy %q; want %q, %q", tt.method, tt.unknown, c.Route(), got, tt.route, tt.policy)
		}
	}
}

// Served methods keep MethodFunc's answer, at most MaxMethods of them
// whatever names reach Check: past that a method is UnknownMethod, and the
// error hook is told once.
func TestMethodTableBound(t *testing.T) {
	def := newMemory(t, core.Policy{Limit: 1000, Window: time.Minute})
	shared := newMemory(t, core.Policy{Limit: 1000, Window: time.Minute})
	var (
		mu     sync.Mutex
		hooked []string
	)
	l, err := New("test", def, Config{
		MethodFunc: func(string) core.Limiter { return shared },
		ErrorHook: func(_ context.Context, m string, err error) {
			mu.Lock()
			defer mu.Unlock()
			hooked = append(hooked, m+": "+err.Error())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	const calls = MaxMethods + 904
	var wg sync.WaitGroup
	ready := make(chan struct{})
	folded := make([]int, 8)
	for g := range 8 {
		wg.Go(func() {
			<-ready
			for i := g; i < calls; i += 8 {
				c := &Call{Ctx: context.Background(), Peer: "192.0.2.1:1", Procedure: fmt.Sprintf("/big.S/M%d", i)}
				l.Check(c)
				if c.Route() == UnknownMethod {
					folded[g]++
				}
			}
		})
	}
	close(ready)
	wg.Wait()
	if n := l.entries(); n != MaxMethods+1 {
		t.Errorf("%d method entries after %d methods, want MaxMethods+1 (%d)", n, calls, MaxMethods+1)
	}
	sum := 0
	for _, n := range folded {
		sum += n
	}
	if sum != calls-MaxMethods {
		t.Errorf("%d methods limited as %s, want %d", sum, UnknownMethod, calls-MaxMethods)
	}
	if len(hooked) != 1 || !strings.Contains(hooked[0], "more than 4096 methods") {
		t.Errorf("error hook told %q, want once that the table is full", hooked)
	}
}
