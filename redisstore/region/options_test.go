package region

import (
	"errors"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/go-redis/v9"
)

// New rejects a bad option before it talks to Redis, with a message that
// names the constructor and the option; a nil option or a nil clock is an
// error, never a panic or a silent default.
func TestOptionErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 10 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 600, Window: time.Second}
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"nil option", []Option{nil}, "region: New: option 1 is nil"},
		{"nil option after a good one", []Option{WithFloor(1), nil}, "region: New: option 2 is nil"},
		{"nil clock", []Option{WithClock(nil)}, "region: New: WithClock(nil): a clock is required"},
		{"nil clock after a clock", []Option{WithClock(core.SystemClock{}), WithClock(nil)}, "region: New: WithClock(nil): a clock is required"},
		{"short period", []Option{WithPeriod(time.Millisecond)}, "region: New: WithPeriod(1ms): must be at least 10ms, in whole microseconds"},
		{"floor too high", []Option{WithFloor(201)}, "region: New: WithFloor(201): must be between 0 and Limit/regions = 200"},
		{"negative floor", []Option{WithFloor(-1)}, "region: New: WithFloor(-1): must be between 0 and Limit/regions = 200"},
		{"more negative floor", []Option{WithFloor(-2)}, "region: New: WithFloor(-2): must be between 0 and Limit/regions = 200"},
		{"prefix with a brace", []Option{WithPrefix("a}")}, `region: New: WithPrefix("a}"): must not contain '{' or '}'`},
		{"shares of another limit", []Option{WithShares(map[string]int64{"a": 1, "b": 2, "c": 3})}, `region: New: WithShares: map[a:1 b:2 c:3] must give each of ["a" "b" "c"] a share, summing to the limit 600`},
		{"negative timeout", []Option{WithTimeout(-time.Second)}, "region: New: WithTimeout(-1s): must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := func() (l *Limiter, err error) {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panic: %v", r)
					}
				}()
				return New(c, c, p, "a", names, tc.opts...)
			}()
			if err == nil {
				l.Close()
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// A calendar policy is refused: periods and shares count epoch windows.
func TestCalendarRefused(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 10 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 600, Window: core.CalendarDay.Window(), Calendar: core.CalendarDay, Zone: "Europe/Berlin"}
	_, err := New(c, c, p, "a", []string{"a", "b"})
	const want = `region: New: policy "600/1d tz=Europe/Berlin": calendar windows are not supported: unsupported operation`
	if err == nil || !errors.Is(err, errors.ErrUnsupported) || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}
