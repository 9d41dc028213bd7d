// Package calendar computes the calendar periods of core's calendar
// windows (core.Calendar), for the memory store and the Redis store alike:
// days, ISO weeks and months in a time zone, as Unix microseconds.
package calendar

import "time"

// The periods, numbered as core.Calendar numbers them.
const (
	Day   = 1
	Week  = 2
	Month = 3
)

// Bounds returns the period [start, end) of the given kind that holds t,
// in Unix microseconds. A period starts at the first instant whose local
// date in loc is its first day or later: where midnight does not exist (a
// daylight saving change at 00:00), the day starts at the change. Every
// bound is a whole second, zone offsets being whole seconds.
func Bounds(period int, loc *time.Location, t int64) (start, end int64) {
	local := time.UnixMicro(t).In(loc)
	y, m, d := local.Date()
	switch period {
	case Week:
		d -= (int(local.Weekday()) + 6) % 7
	case Month:
		d = 1
	}
	// A clock set back across midnight can give an instant the local
	// date of a period that has already ended: step to the one that holds
	// it (at most a few steps, in zones that ever did so).
	for range 8 {
		ny, nm, nd := y, m, d+1
		switch period {
		case Week:
			nd = d + 7
		case Month:
			nm, nd = m+1, 1
		}
		start, end = dayStart(loc, y, m, d)*1e6, dayStart(loc, ny, nm, nd)*1e6
		if t < end {
			break
		}
		y, m, d = ny, nm, nd
	}
	return start, end
}

// dayStart returns the first instant, in Unix seconds, whose local date in
// loc is y-m-d (normalized, as time.Date does) or later.
func dayStart(loc *time.Location, y int, m time.Month, d int) int64 {
	civil := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix()
	// Local time is t + offset, increasing within each zone period: scan
	// the periods from two days before, and return the first instant of
	// the first one whose local time reaches civil.
	t := time.Unix(civil-48*3600, 0).In(loc)
	for range 64 {
		_, off := t.Zone()
		from := t.Unix()
		at := max(civil-int64(off), from)
		_, next := t.ZoneBounds()
		if next.IsZero() || at < next.Unix() || next.Unix() <= from {
			return at
		}
		t = next.In(loc)
	}
	return t.Unix()
}
