package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

// unreachableClient is a client for an address nothing listens on. The
// constructors reject bad options before they talk to Redis, so
// TestOptionErrors needs no server.
func unreachableClient(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 10 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

// New and NewLayered accept and reject the same options, with the same
// messages; a nil option is an error naming it, never a panic.
func TestOptionErrors(t *testing.T) {
	client := unreachableClient(t)
	p := core.Policy{Name: "api", Limit: 5, Window: time.Second}
	for _, tc := range []struct {
		name string
		opts []Option
		want string // the message, after "redisstore: <constructor>: "
	}{
		{"nil option", []Option{nil}, "option 1 is nil"},
		{"nil option after a good one", []Option{WithTimeout(time.Second), nil}, "option 2 is nil"},
		{"nil clock", []Option{WithClock(nil)}, "WithClock(nil): a clock is required"},
		{"nil clock after a clock", []Option{WithClock(core.SystemClock{}), WithClock(nil)}, "WithClock(nil): a clock is required"},
		{"prefix with a brace", []Option{WithPrefix("a{b")}, `WithPrefix("a{b"): must not contain '{' or '}'`},
		{"negative timeout", []Option{WithTimeout(-time.Second)}, "WithTimeout(-1s): must not be negative"},
		{"negative margin", []Option{WithExpiryMargin(-time.Millisecond)}, "WithExpiryMargin(-1ms): must not be negative"},
		{"negative batch", []Option{WithBatching(-1)}, "WithBatching(-1): must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				fn  string
				new func() error
			}{
				{"New", func() error { _, err := New(client, p, tc.opts...); return err }},
				{"NewLayered", func() error { _, err := NewLayered(client, []core.Policy{p}, tc.opts...); return err }},
			} {
				want := fmt.Sprintf("redisstore: %s: %s", c.fn, tc.want)
				err := func() (err error) {
					defer func() {
						if r := recover(); r != nil {
							err = fmt.Errorf("panic: %v", r)
						}
					}()
					return c.new()
				}()
				if err == nil || err.Error() != want {
					t.Errorf("%s: err = %v, want %q", c.fn, err, want)
				}
			}
		})
	}
}

// The defaults apply when an option asks for them: an empty prefix is the
// default prefix, for a Limiter and for every layer of a Layered.
func TestOptionDefaults(t *testing.T) {
	client := newClient(t, singleNode(t))
	p := core.Policy{Name: "api", Limit: 5, Window: time.Second}
	l, err := New(client, p, WithPrefix(""))
	if err != nil {
		t.Fatal(err)
	}
	ll, err := NewLayered(client, []core.Policy{p}, WithPrefix(""))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultPrefix + ":api/token-bucket:{k}"
	if got := l.key("k"); got != want {
		t.Errorf("Limiter key %q, want %q", got, want)
	}
	if got := ll.layers[0].key("k"); got != want {
		t.Errorf("Layered key %q, want %q", got, want)
	}
}

// A layered script is made of the same parts as the single scripts: the
// prelude once, then each layer's head and body as a function, with no
// prelude of its own.
func TestScriptParts(t *testing.T) {
	var ps []core.Policy
	for _, a := range []core.Algorithm{core.TokenBucket, core.FixedWindow, core.SlidingLog, core.SlidingWindow, core.LeakyBucket} {
		p := core.Policy{Name: a.String(), Algorithm: a, Limit: 7, Window: 3 * time.Second}
		if a.Burstable() {
			p.Burst = 11
		}
		ps = append(ps, p)
	}
	const margin = 1000
	for _, p := range ps {
		head, body := policyParts(p, margin)
		if strings.Contains(head, preludeLua) || strings.Contains(body, preludeLua) {
			t.Errorf("%v: a part holds the prelude", p)
		}
		if got, want := scriptSource(p, margin), head+preludeLua+body; got != want {
			t.Errorf("%v: scriptSource is not head, prelude, body:\n%s", p, got)
		}
		if !strings.Contains(head, fmt.Sprintf("local margin = %d\n", margin)) {
			t.Errorf("%v: head %q has no margin", p, head)
		}
	}
	src := layeredSource(ps, margin)
	if n := strings.Count(src, preludeLua); n != 1 {
		t.Errorf("layered script holds the prelude %d times, want 1", n)
	}
	if !strings.HasSuffix(src, layeredLua) {
		t.Errorf("layered script does not end with layered.lua")
	}
	for i, p := range ps {
		head, body := policyParts(p, margin)
		fn := fmt.Sprintf("local function layer%d(KEYS, n, commit, since)\n%s%s\nend\n", i+1, head, body)
		if !strings.Contains(src, fn) {
			t.Errorf("layered script has no function for layer %d (%v)", i, p)
		}
	}
}

// A calendar policy is refused by NewLayered, with an error that names
// it, rather than counted as epoch windows of its nominal length; New
// takes it (calendar.go).
func TestCalendarRefused(t *testing.T) {
	client := unreachableClient(t)
	p, err := core.ParsePolicy("1000/1mo tz=Europe/Berlin name=quota")
	if err != nil {
		t.Fatal(err)
	}
	epoch := core.Policy{Name: "api", Limit: 5, Window: time.Second}
	const want = `redisstore: NewLayered: layer 1: policy "1000/1mo name=quota tz=Europe/Berlin": calendar windows (a month in Europe/Berlin) are not supported in layered limits on Redis`
	_, err = NewLayered(client, []core.Policy{epoch, p})
	if err == nil || !errors.Is(err, errors.ErrUnsupported) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %v, want %q wrapping errors.ErrUnsupported", err, want)
	}
	if _, err := New(client, p); err != nil {
		t.Errorf("New: %v", err)
	}
}
