package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/calendar"
	"github.com/redis/go-redis/v9"
)

// calendarWindows gives a calendar policy's script (calendarwindow.lua)
// the periods it counts in: the one that holds the client's reading of
// the time and the next, computed on the client, where the zone database
// is. On the server's TIME the client reads its own clock to guess them;
// when the server's time lies in neither, the script answers resync with
// it, and the call is made once more with the periods around that time.
// The periods last found are cached, so a call within them does no
// calendar arithmetic.
type calendarWindows struct {
	period int
	loc    *time.Location
	guess  func() time.Time // the client's clock on the server's TIME; time.Now
	last   atomic.Pointer[windows]
}

// windows are two consecutive periods, [s0, e0) and [e0, e1), with the
// three bounds boxed once as a call's arguments.
type windows struct {
	s0, e0, e1 int64
	args       [3]any
}

func newCalendarWindows(p core.Policy) (*calendarWindows, error) {
	if p.Calendar == 0 {
		return nil, nil
	}
	loc := time.UTC
	if p.Zone != "" {
		var err error
		if loc, err = time.LoadLocation(p.Zone); err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.String(), err)
		}
	}
	return &calendarWindows{period: int(p.Calendar), loc: loc, guess: time.Now}, nil
}

// around returns the period that holds t (Unix µs) and the next. It
// allocates only when t leaves the periods it last returned.
func (c *calendarWindows) around(t int64) *windows {
	if w := c.last.Load(); w != nil && w.s0 <= t && t < w.e0 {
		return w
	}
	w := &windows{}
	w.s0, w.e0 = calendar.Bounds(c.period, c.loc, t)
	_, w.e1 = calendar.Bounds(c.period, c.loc, w.e0)
	w.args = [3]any{w.s0, w.e0, w.e1}
	if old := c.last.Load(); old == nil || old.s0 < w.s0 {
		c.last.Store(w)
	}
	return w
}

// at returns the periods around now, a script's time argument: the
// client's clock in µs, or "" for the server's TIME, guessed from the
// client's own clock.
func (c *calendarWindows) at(now any) *windows {
	if us, ok := now.(int64); ok {
		return c.around(us)
	}
	return c.around(unixMicro(c.guess()))
}

// resync reports whether r, a decision's answer, is a calendar script's
// resync, and the server's time it carries.
func resync(r string) (now int64, ok bool) {
	if len(r) == answerLen && be64(r) == 2 {
		return be64(r[8:]), true
	}
	return 0, false
}

// refundCalendar is Refund for a calendar policy under c: the periods
// follow the elapsed time, and a resync (-now) calls once more. Settle's
// charge calls it too, elapsed then modeCharge.
func (l *Limiter) refundCalendar(ctx context.Context, c *conf, k string, now any, n, elapsed int64) error {
	w := c.cal.at(now)
	for range 2 {
		verb, id := l.verb(c.sha, c.fn)
		args := []any{verb, id, "1", k, now, n, elapsed, w.args[0], w.args[1], w.args[2]}
		if c.since != nil {
			args = append(args, c.since)
		}
		cmd, err := l.process(ctx, redis.NewCmd(ctx, args...))
		if err != nil {
			return fmt.Errorf("redisstore: eval: %w", err)
		}
		if v, ok := cmd.Val().(int64); ok && v < 0 {
			w = c.cal.around(-v) // the server's time
			continue
		}
		return refunded(cmd)
	}
	return fmt.Errorf("redisstore: eval: the server's time left the calendar period it gave")
}
