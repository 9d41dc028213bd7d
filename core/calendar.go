package core

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	calperiod "github.com/ratekit/ratekit/internal/calendar"
)

// Calendar aligns a [FixedWindow] policy's windows to calendar periods in
// the policy's Zone instead of multiples of Window since the Unix epoch: a
// window is the day, ISO week or month that holds now, as long as it
// lasts there (a day of 23 or 25 hours across a daylight saving change,
// a month of 28 to 31 days). The zero Calendar means epoch windows.
type Calendar uint8

// The calendar periods.
const (
	// CalendarDay is the local day, from one midnight to the next.
	CalendarDay Calendar = iota + 1
	// CalendarWeek is the ISO week, from Monday 00:00 to the next.
	CalendarWeek
	// CalendarMonth is the month, from its first day at 00:00 to the next
	// month's.
	CalendarMonth
)

var calendarNames = [...]string{CalendarDay: "day", CalendarWeek: "week", CalendarMonth: "month"}

// String returns "day", "week" or "month", or "none" for the zero Calendar.
func (c Calendar) String() string {
	switch {
	case c == 0:
		return "none"
	case int(c) < len(calendarNames):
		return calendarNames[c]
	}
	return "Calendar(" + strconv.Itoa(int(c)) + ")"
}

// Window returns the Window a [Policy] with this calendar period carries,
// its nominal length: 24h for a day, 7×24h for a week, 31×24h (the
// longest) for a month; 0 for the zero Calendar. The windows themselves
// last as long as the periods do in the policy's Zone.
func (c Calendar) Window() time.Duration {
	switch c {
	case CalendarDay:
		return 24 * time.Hour
	case CalendarWeek:
		return 7 * 24 * time.Hour
	case CalendarMonth:
		return 31 * 24 * time.Hour
	}
	return 0
}

// zones caches the locations loaded by name, successful loads only: they
// are named by files of the zone database, a bounded set.
var zones sync.Map // string -> *time.Location

// maxZoneLen bounds a Zone's length; IANA names are at most about 30 bytes.
const maxZoneLen = 64

// loadZone returns the location a policy's Zone names: "" is UTC.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if v, ok := zones.Load(name); ok {
		return v.(*time.Location), nil
	}
	if len(name) > maxZoneLen {
		return nil, fmt.Errorf("%q is longer than %d bytes", name[:maxZoneLen], maxZoneLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '/' || c == '_' || c == '-' || c == '+') {
			return nil, fmt.Errorf("%q is not a time zone name such as Europe/Berlin", name)
		}
	}
	if name == "Local" {
		return nil, fmt.Errorf("%q is each machine's own zone: name one, such as Europe/Berlin", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a known time zone (IANA names such as Europe/Berlin; a program on a machine without a zone database imports time/tzdata)", name)
	}
	zones.Store(name, loc)
	return loc, nil
}

// calendar is the calendar of a Memory's settings: its periods in its
// zone, and the bounds of the period it last found, so that a decision
// within them does no calendar arithmetic and allocates nothing. Times are
// Unix microseconds; every period starts on a whole second (zone offsets
// are whole seconds).
type calendar struct {
	period Calendar
	zone   string
	loc    *time.Location
	last   atomic.Pointer[periods]
}

// periods are two consecutive periods, [prev, start) and [start, end).
type periods struct{ prev, start, end int64 }

func newCalendar(p Policy) *calendar {
	if p.Calendar == 0 {
		return nil
	}
	loc, err := loadZone(p.Zone)
	if err != nil {
		loc = time.UTC // unreachable: the policy is valid
	}
	return &calendar{period: p.Calendar, zone: p.Zone, loc: loc}
}

// same reports whether c and d have the same periods.
func (c *calendar) same(d *calendar) bool {
	if c == nil || d == nil {
		return c == d
	}
	return c.period == d.period && c.zone == d.zone
}

// at returns the period [start, end) that holds t.
func (c *calendar) at(t int64) (start, end int64) {
	if p := c.last.Load(); p != nil {
		if p.start <= t && t < p.end {
			return p.start, p.end
		}
		if p.prev <= t && t < p.start {
			return p.prev, p.start
		}
	}
	return c.find(t)
}

// find computes the period that holds t and, if it is later than the one
// cached, caches it: a limiter allocates once a period.
func (c *calendar) find(t int64) (start, end int64) {
	start, end = c.compute(t)
	for {
		old := c.last.Load()
		if old != nil && old.start >= start {
			return start, end
		}
		prev := old
		if prev == nil || prev.end != start {
			p, _ := c.compute(start - 1)
			prev = &periods{start: p}
		}
		if c.last.CompareAndSwap(old, &periods{prev: prev.start, start: start, end: end}) {
			return start, end
		}
	}
}

// compute returns the period that holds t (see internal/calendar).
func (c *calendar) compute(t int64) (start, end int64) {
	return calperiod.Bounds(int(c.period), c.loc, t)
}
