package core

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones, on a machine without a zone database
)

func utc(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func calendarPolicy(c Calendar, zone string, limit int64) Policy {
	return Policy{Algorithm: FixedWindow, Limit: limit, Window: c.Window(), Calendar: c, Zone: zone}
}

// TestCalendarBoundaries: for each boundary between two calendar periods,
// written as UTC instants independently of the code under test, a key that
// used its limit just before it is denied with RetryAfter exactly to the
// boundary, allowed at the boundary itself, and its new window lasts
// exactly until the next boundary (ResetAfter).
func TestCalendarBoundaries(t *testing.T) {
	tests := []struct {
		name       string
		cal        Calendar
		zone       string
		start      time.Time // the earlier period's start
		boundary   time.Time // its end, the next period's start
		next       time.Time // the next period's end
		wantLength time.Duration
	}{
		{"Jan 31 to Feb 1", CalendarMonth, "", utc(2026, 1, 1, 0), utc(2026, 2, 1, 0), utc(2026, 3, 1, 0), 28 * 24 * time.Hour},
		{"Feb 28 to Mar 1", CalendarMonth, "", utc(2027, 2, 1, 0), utc(2027, 3, 1, 0), utc(2027, 4, 1, 0), 31 * 24 * time.Hour},
		{"Feb 29 to Mar 1, leap year", CalendarMonth, "", utc(2028, 2, 1, 0), utc(2028, 3, 1, 0), utc(2028, 4, 1, 0), 31 * 24 * time.Hour},
		{"Jan to Feb, leap year", CalendarMonth, "", utc(2028, 1, 1, 0), utc(2028, 2, 1, 0), utc(2028, 3, 1, 0), 29 * 24 * time.Hour},
		{"Dec 31 to Jan 1, month", CalendarMonth, "", utc(2026, 12, 1, 0), utc(2027, 1, 1, 0), utc(2027, 2, 1, 0), 31 * 24 * time.Hour},
		{"Dec 31 to Jan 1, day", CalendarDay, "", utc(2026, 12, 31, 0), utc(2027, 1, 1, 0), utc(2027, 1, 2, 0), 24 * time.Hour},
		{"Feb 28 to Feb 29, day", CalendarDay, "", utc(2028, 2, 28, 0), utc(2028, 2, 29, 0), utc(2028, 3, 1, 0), 24 * time.Hour},
		{"week, UTC", CalendarWeek, "", utc(2026, 11, 30, 0), utc(2026, 12, 7, 0), utc(2026, 12, 14, 0), 7 * 24 * time.Hour},
		{"week over New Year", CalendarWeek, "", utc(2026, 12, 28, 0), utc(2027, 1, 4, 0), utc(2027, 1, 11, 0), 7 * 24 * time.Hour},
		// Berlin: CET (+1) to CEST (+2) on 2026-03-29 at 02:00, back on
		// 2026-10-25 at 03:00.
		{"Berlin, day before spring", CalendarDay, "Europe/Berlin", utc(2026, 3, 27, 23), utc(2026, 3, 28, 23), utc(2026, 3, 29, 22), 23 * time.Hour},
		{"Berlin, spring day", CalendarDay, "Europe/Berlin", utc(2026, 3, 28, 23), utc(2026, 3, 29, 22), utc(2026, 3, 30, 22), 24 * time.Hour},
		{"Berlin, autumn day", CalendarDay, "Europe/Berlin", utc(2026, 10, 23, 22), utc(2026, 10, 24, 22), utc(2026, 10, 25, 23), 25 * time.Hour},
		{"Berlin, Sunday to Monday in spring", CalendarWeek, "Europe/Berlin", utc(2026, 3, 22, 23), utc(2026, 3, 29, 22), utc(2026, 4, 5, 22), 7 * 24 * time.Hour},
		{"Berlin, week of the autumn change", CalendarWeek, "Europe/Berlin", utc(2026, 10, 18, 22), utc(2026, 10, 25, 23), utc(2026, 11, 1, 23), 7 * 24 * time.Hour},
		{"Berlin, week before the autumn change", CalendarWeek, "Europe/Berlin", utc(2026, 10, 11, 22), utc(2026, 10, 18, 22), utc(2026, 10, 25, 23), 7*24*time.Hour + time.Hour},
		{"Berlin, February to March", CalendarMonth, "Europe/Berlin", utc(2026, 1, 31, 23), utc(2026, 2, 28, 23), utc(2026, 3, 31, 22), 31*24*time.Hour - time.Hour},
		{"Berlin, October to November", CalendarMonth, "Europe/Berlin", utc(2026, 9, 30, 22), utc(2026, 10, 31, 23), utc(2026, 11, 30, 23), 30 * 24 * time.Hour},
		// New York: EST (-5) to EDT (-4) on 2026-03-08 at 02:00, back on
		// 2026-11-01 at 02:00.
		{"New York, spring day", CalendarDay, "America/New_York", utc(2026, 3, 7, 5), utc(2026, 3, 8, 5), utc(2026, 3, 9, 4), 23 * time.Hour},
		{"New York, autumn day", CalendarDay, "America/New_York", utc(2026, 10, 31, 4), utc(2026, 11, 1, 4), utc(2026, 11, 2, 5), 25 * time.Hour},
		{"New York, Sunday to Monday", CalendarWeek, "America/New_York", utc(2026, 3, 2, 5), utc(2026, 3, 9, 4), utc(2026, 3, 16, 4), 7 * 24 * time.Hour},
		// São Paulo moved to -02 at midnight on 2018-11-04: that day began
		// at 01:00 local, 03:00 UTC, and lasted 23 hours.
		{"São Paulo, no midnight", CalendarDay, "America/Sao_Paulo", utc(2018, 11, 3, 3), utc(2018, 11, 4, 3), utc(2018, 11, 5, 2), 23 * time.Hour},
		// Samoa skipped 2011-12-30: Dec 29 (-10) ended at 10:00 UTC where
		// Dec 31 (+14) began.
		{"Samoa, a day skipped", CalendarDay, "Pacific/Apia", utc(2011, 12, 29, 10), utc(2011, 12, 30, 10), utc(2011, 12, 31, 10), 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.next.Sub(tt.boundary); got != tt.wantLength {
				t.Fatalf("test case: next period lasts %v, want %v", got, tt.wantLength)
			}
			p := calendarPolicy(tt.cal, tt.zone, 2)
			clk := NewManualClock(tt.start)
			m := newSet(t, p, clk)
			ctx := context.Background()

			// The earlier period's first instant belongs to it.
			d, err := m.AllowN(ctx, "k", 1)
			if err != nil || !d.Allowed || d.ResetAfter != tt.boundary.Sub(tt.start) {
				t.Fatalf("at the period's start: %+v, %v; want allowed, ResetAfter %v", d, err, tt.boundary.Sub(tt.start))
			}
			// Its last nanosecond too: the store counts whole
			// microseconds, so RetryAfter is 1µs, rounded up.
			clk.Set(tt.boundary.Add(-time.Nanosecond))
			if d, _ := m.AllowN(ctx, "k", 1); !d.Allowed || d.Remaining != 0 || d.ResetAfter != time.Microsecond {
				t.Fatalf("1ns before the boundary: %+v; want allowed, 0 left, ResetAfter 1µs", d)
			}
			if d, _ := m.AllowN(ctx, "k", 1); d.Allowed || d.RetryAfter != time.Microsecond {
				t.Fatalf("1ns before the boundary, over the limit: %+v; want denied, RetryAfter 1µs", d)
			}
			// Exact to the nanosecond on a whole-microsecond clock.
			for _, before := range []time.Duration{time.Hour + 1234567*time.Microsecond, time.Microsecond} {
				clk.Set(tt.boundary.Add(-before))
				if d, _ := m.AllowN(ctx, "k", 1); d.Allowed || d.RetryAfter != before || d.ResetAfter != before {
					t.Fatalf("%v before the boundary: %+v; want denied, RetryAfter and ResetAfter %v", before, d, before)
				}
			}
			// The boundary instant starts the next period.
			clk.Set(tt.boundary)
			if d, _ := m.AllowN(ctx, "k", 2); !d.Allowed || d.ResetAfter != tt.wantLength {
				t.Fatalf("at the boundary: %+v; want allowed, ResetAfter %v", d, tt.wantLength)
			}
			if d, _ := m.Peek(ctx, "k", 1); d.Allowed || d.RetryAfter != tt.wantLength {
				t.Fatalf("at the boundary, full: %+v; want denied, RetryAfter %v", d, tt.wantLength)
			}
			clk.Set(tt.next.Add(-time.Microsecond))
			if d, _ := m.Peek(ctx, "k", 1); d.Allowed || d.RetryAfter != time.Microsecond {
				t.Fatalf("1µs before the next boundary: %+v; want denied, RetryAfter 1µs", d)
			}
			clk.Set(tt.next)
			if d, _ := m.Peek(ctx, "k", 2); !d.Allowed || d.ResetAfter != 0 {
				t.Fatalf("at the next boundary: %+v; want allowed, fresh", d)
			}
		})
	}
}

// TestCalendarPeriods checks the period arithmetic against time.Date
// across years of hours in several zones: every period starts at local
// midnight of its first day (these zones change their clocks away from
// midnight), on a Monday for weeks and on the 1st for months, the periods
// tile time, and each holds the instants of its local dates.
func TestCalendarPeriods(t *testing.T) {
	for _, zone := range []string{"", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham"} {
		loc := time.UTC
		if zone != "" {
			loc = mustZone(t, zone)
		}
		for _, c := range []Calendar{CalendarDay, CalendarWeek, CalendarMonth} {
			cal := newCalendar(calendarPolicy(c, zone, 1))
			var prevStart, prevEnd int64
			for at := utc(2027, 12, 20, 0); at.Before(utc(2029, 1, 10, 0)); at = at.Add(47 * time.Minute) {
				us := at.UnixMicro()
				start, end := cal.at(us)
				if start > us || us >= end {
					t.Fatalf("%s %v: %v in [%v, %v)", zone, c, at, time.UnixMicro(start), time.UnixMicro(end))
				}
				if prevEnd != 0 && start != prevStart && start != prevEnd {
					t.Fatalf("%s %v: period [%v, %v) after one ending %v", zone, c, time.UnixMicro(start), time.UnixMicro(end), time.UnixMicro(prevEnd))
				}
				prevStart, prevEnd = start, end
				s := time.UnixMicro(start).In(loc)
				y, mo, d := at.In(loc).Date()
				switch c {
				case CalendarWeek:
					wd := (int(at.In(loc).Weekday()) + 6) % 7
					y, mo, d = time.Date(y, mo, d-wd, 0, 0, 0, 0, time.UTC).Date()
					if s.Weekday() != time.Monday {
						t.Fatalf("%s week starts on %v", zone, s)
					}
				case CalendarMonth:
					d = 1
				}
				if want := time.Date(y, mo, d, 0, 0, 0, 0, loc); !s.Equal(want) {
					t.Fatalf("%s %v of %v starts %v, want %v", zone, c, at, s, want)
				}
			}
		}
	}
}

// TestCalendarBackwards: a clock stepped back into the previous period
// keeps the later period's count, with RetryAfter to its end.
func TestCalendarBackwards(t *testing.T) {
	clk := NewManualClock(utc(2026, 3, 29, 22)) // Monday 00:00 in Berlin
	m := newSet(t, calendarPolicy(CalendarDay, "Europe/Berlin", 1), clk)
	spend(t, m, "k", 1)
	clk.Advance(-time.Hour)
	if d := peek(t, m, "k"); d.Allowed || d.RetryAfter != 25*time.Hour {
		t.Fatalf("an hour back: %+v; want denied for 25h", d)
	}
	// Further back than the cached periods.
	clk.Set(utc(2026, 1, 1, 0))
	if d := peek(t, m, "k"); d.Allowed || d.RetryAfter != utc(2026, 3, 30, 22).Sub(utc(2026, 1, 1, 0)) {
		t.Fatalf("months back: %+v", d)
	}
	if d := peek(t, m, "other"); !d.Allowed {
		t.Fatalf("a new key months back: %+v", d)
	}
}

// TestCalendarRefund: units given back count only in the period they
// were taken in.
func TestCalendarRefund(t *testing.T) {
	clk := NewManualClock(utc(2026, 10, 31, 12))
	m := newSet(t, calendarPolicy(CalendarMonth, "Europe/Berlin", 2), clk)
	spend(t, m, "k", 2)
	if err := m.Refund(context.Background(), "k", 1, 0); err != nil {
		t.Fatal(err)
	}
	if d := peek(t, m, "k"); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after a refund in the period: %+v", d)
	}
	spend(t, m, "k", 1)
	clk.Set(utc(2026, 10, 31, 23)) // November in Berlin
	spend(t, m, "k", 2)
	if err := m.Refund(context.Background(), "k", 1, time.Hour+time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if d := peek(t, m, "k"); d.Allowed {
		t.Fatalf("a refund of October's units gave room in November: %+v", d)
	}
}

// TestCalendarSetPolicy: changing between epoch and calendar windows, the
// calendar period or the zone keeps the current window's count, moved to
// the new window that holds now.
func TestCalendarSetPolicy(t *testing.T) {
	now := utc(2026, 3, 29, 21) // Sunday 23:00 in Berlin, 21:00 in UTC
	tests := []struct {
		name     string
		from, to Policy
		retry    time.Duration // until the new window's end
	}{
		{"epoch day to Berlin day", Policy{Algorithm: FixedWindow, Limit: 10, Window: 24 * time.Hour}, calendarPolicy(CalendarDay, "Europe/Berlin", 10), time.Hour},
		{"Berlin day to epoch day", calendarPolicy(CalendarDay, "Europe/Berlin", 10), Policy{Algorithm: FixedWindow, Limit: 10, Window: 24 * time.Hour}, 3 * time.Hour},
		{"UTC day to Berlin day", calendarPolicy(CalendarDay, "", 10), calendarPolicy(CalendarDay, "Europe/Berlin", 10), time.Hour},
		{"Berlin day to New York day", calendarPolicy(CalendarDay, "Europe/Berlin", 10), calendarPolicy(CalendarDay, "America/New_York", 10), 7 * time.Hour},
		{"Berlin day to Berlin week", calendarPolicy(CalendarDay, "Europe/Berlin", 10), calendarPolicy(CalendarWeek, "Europe/Berlin", 10), time.Hour},
		{"Berlin week to Berlin month", calendarPolicy(CalendarWeek, "Europe/Berlin", 10), calendarPolicy(CalendarMonth, "Europe/Berlin", 10), 2*24*time.Hour + time.Hour},
		{"epoch 7d to UTC week", Policy{Algorithm: FixedWindow, Limit: 10, Window: 7 * 24 * time.Hour}, calendarPolicy(CalendarWeek, "", 10), 3 * time.Hour},
		{"UTC week to 1h", calendarPolicy(CalendarWeek, "", 10), Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Hour}, time.Hour},
		{"limit only", calendarPolicy(CalendarMonth, "Europe/Berlin", 10), calendarPolicy(CalendarMonth, "Europe/Berlin", 8), 2*24*time.Hour + time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := NewManualClock(now)
			m := newSet(t, tt.from, clk)
			spend(t, m, "k", 8)
			setPolicy(t, m, tt.to)
			if d := peek(t, m, "k"); d.Remaining != tt.to.Limit-8 {
				t.Fatalf("after SetPolicy: %+v; want %d left", d, tt.to.Limit-8)
			}
			if d, _ := m.AllowN(context.Background(), "k", tt.to.Limit-7); d.Allowed || d.RetryAfter != tt.retry {
				t.Fatalf("over the limit after SetPolicy: %+v; want RetryAfter %v", d, tt.retry)
			}
			spend(t, m, "k", int(tt.to.Limit-8))
			wantRetry(t, m, clk, "k", tt.retry)
		})
	}
}

// TestCalendarAllocs: a decision within a period does no calendar
// arithmetic that allocates, even the first one of a period.
func TestCalendarAllocs(t *testing.T) {
	clk := NewManualClock(utc(2026, 3, 1, 0))
	m := newSet(t, calendarPolicy(CalendarDay, "Europe/Berlin", MaxLimit), clk)
	ctx := context.Background()
	m.Allow(ctx, "k")
	if n := testing.AllocsPerRun(1000, func() {
		clk.Advance(time.Second)
		m.Allow(ctx, "k")
	}); n != 0 {
		t.Errorf("%v allocations a decision", n)
	}
}

func TestCalendarValidate(t *testing.T) {
	tests := []struct {
		p         Policy
		field     string
		substring string
	}{
		{Policy{Limit: 1, Window: 24 * time.Hour, Calendar: CalendarDay}, "Calendar", "fixed-window only, got day with token-bucket"},
		{Policy{Algorithm: SlidingWindow, Limit: 1, Window: 24 * time.Hour, Calendar: CalendarDay}, "Calendar", "sliding-window"},
		{Policy{Algorithm: SlidingLog, Limit: 1, Window: 31 * 24 * time.Hour, Calendar: CalendarMonth}, "Calendar", "sliding-log"},
		{Policy{Algorithm: LeakyBucket, Limit: 1, Window: 7 * 24 * time.Hour, Calendar: CalendarWeek}, "Calendar", "leaky-bucket"},
		{Policy{Algorithm: FixedWindow, Limit: 1, Window: 30 * 24 * time.Hour, Calendar: CalendarMonth}, "Window", "must be 744h0m0s (CalendarMonth.Window())"},
		{Policy{Algorithm: FixedWindow, Limit: 1, Window: 24 * time.Hour, Calendar: 9}, "Calendar", "not a known calendar period"},
		{calendarPolicy(CalendarDay, "Mars/Olympus_Mons", 1), "Zone", `"Mars/Olympus_Mons" is not a known time zone`},
		{calendarPolicy(CalendarDay, "Local", 1), "Zone", "each machine's own zone"},
		{calendarPolicy(CalendarDay, "../etc/passwd", 1), "Zone", "not a time zone name"},
		{calendarPolicy(CalendarDay, "Europe/Berlin ", 1), "Zone", "not a time zone name"},
		{calendarPolicy(CalendarDay, strings.Repeat("A", 100), 1), "Zone", "longer than 64 bytes"},
		{Policy{Algorithm: FixedWindow, Limit: 1, Window: 24 * time.Hour, Zone: "Europe/Berlin"}, "Zone", "calendar windows only"},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		var pe *PolicyError
		if !errors.As(err, &pe) || pe.Field != tt.field || !strings.Contains(pe.Reason, tt.substring) {
			t.Errorf("%#v: %v; want field %s, %q", tt.p, err, tt.field, tt.substring)
		}
	}
	for _, c := range []Calendar{CalendarDay, CalendarWeek, CalendarMonth} {
		for _, zone := range []string{"", "Europe/Berlin", "America/New_York", "Etc/GMT+5", "UTC"} {
			if err := calendarPolicy(c, zone, 1).Validate(); err != nil {
				t.Errorf("%v in %q: %v", c, zone, err)
			}
		}
	}
}

func TestParseCalendarPolicy(t *testing.T) {
	for _, tt := range []struct {
		in, out string
		want    Policy
	}{
		{"1000/1mo tz=Europe/Berlin", "", calendarPolicy(CalendarMonth, "Europe/Berlin", 1000)},
		{"100/1d tz=America/New_York", "", calendarPolicy(CalendarDay, "America/New_York", 100)},
		{"1/1w", "", calendarPolicy(CalendarWeek, "", 1)},
		{"1/w", "1/1w", calendarPolicy(CalendarWeek, "", 1)},
		{"5/mo tz=UTC name=quota", "5/1mo name=quota", Policy{Name: "quota", Algorithm: FixedWindow, Limit: 5, Window: CalendarMonth.Window(), Calendar: CalendarMonth}},
		{"1/1d tz=UTC", "", calendarPolicy(CalendarDay, "", 1)},
		{"1/24h algorithm=fixed-window tz=Asia/Tokyo", "1/1d tz=Asia/Tokyo", calendarPolicy(CalendarDay, "Asia/Tokyo", 1)},
		{"1/1d", "", Policy{Limit: 1, Window: 24 * time.Hour}},
		{"1/7d algorithm=fixed-window", "", Policy{Algorithm: FixedWindow, Limit: 1, Window: 7 * 24 * time.Hour}},
	} {
		p, err := ParsePolicy(tt.in)
		if err != nil || p != tt.want {
			t.Errorf("ParsePolicy(%q) = %#v, %v; want %#v", tt.in, p, err, tt.want)
			continue
		}
		out := tt.out
		if out == "" {
			out = tt.in
		}
		if p.String() != out {
			t.Errorf("ParsePolicy(%q).String() = %q, want %q", tt.in, p.String(), out)
		}
	}
	for _, tt := range []struct{ in, substring string }{
		{"1/1mo tz=Mars/Olympus_Mons", `"Mars/Olympus_Mons" is not a known time zone`},
		{"1/1d tz=Local", "each machine's own zone"},
		{"1/1w algorithm=sliding-window", "fixed-window only, got week with sliding-window"},
		{"1/1mo algorithm=sliding-log", "sliding-log"},
		{"1/1d tz=Europe/Berlin algorithm=token-bucket", "token-bucket"},
		{"1/2w", "a calendar week is 1w, one at a time"},
		{"1/12mo", "a calendar month is 1mo"},
		{"1/7d tz=Europe/Berlin", "tz applies to calendar windows, 1d, 1w or 1mo; got 7d"},
		{"1/1h tz=Europe/Berlin", "tz applies to calendar windows"},
		{"1/1w tz=", "want key=value"},
		{"1/1w tz=UTC tz=UTC", "given twice"},
		{"x/1mo", "not a whole number"},
		{"0/1w", "at least 1"},
		{"1000000001/1mo", "more than"},
		{"1/1mo burst=2", "Burst"},
	} {
		_, err := ParsePolicy(tt.in)
		if err == nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.substring) {
			t.Errorf("ParsePolicy(%q) error %v; want one wrapping ErrInvalidPolicy containing %q", tt.in, err, tt.substring)
		}
	}
}

// BenchmarkCalendarWindow compares a calendar day's hot key with the
// epoch's 24-hour window: within a period the calendar adds a load and two
// comparisons, and nothing allocates.
func BenchmarkCalendarWindow(b *testing.B) {
	ctx := context.Background()
	for _, p := range []Policy{
		{Algorithm: FixedWindow, Limit: MaxLimit, Window: 24 * time.Hour},
		calendarPolicy(CalendarDay, "Europe/Berlin", MaxLimit),
	} {
		b.Run(p.String(), func(b *testing.B) {
			m := mustNew(b, p, WithClock(NewManualClock(benchStart)))
			b.ReportAllocs()
			for b.Loop() {
				m.AllowN(ctx, "203.0.113.7", 1)
			}
		})
	}
}

// TestCalendarLayered: a calendar day under a per-minute token bucket: the
// day's denial counts nothing in the bucket, and its RetryAfter runs to
// local midnight.
func TestCalendarLayered(t *testing.T) {
	clk := NewManualClock(utc(2026, 10, 25, 22)) // 23:00 in Berlin, a 25-hour day
	minute := newSet(t, Policy{Name: "minute", Limit: 10, Window: time.Minute}, clk)
	day := newSet(t, Policy{Name: "day", Algorithm: FixedWindow, Limit: 3, Window: CalendarDay.Window(), Calendar: CalendarDay, Zone: "Europe/Berlin"}, clk)
	l, err := NewLayered(minute, day)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
	d, err := l.Allow(ctx, "k")
	if err != nil || d.Allowed || d.RetryAfter != time.Hour || d.Policy.Name != "day" {
		t.Fatalf("the day's fourth: %+v, %v; want denied by day for 1h", d, err)
	}
	if d := peek(t, minute, "k"); d.Remaining != 7 {
		t.Fatalf("the minute layer after the day's denial: %+v; want 7 left", d)
	}
	clk.Advance(time.Hour)
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("at midnight: %+v, %v", d, err)
	}
}

// TestCalendarRace: goroutines making the first decisions of a new period
// race to compute and cache its bounds (the cache held the old period's):
// every key of the new period gets exactly its limit, 8 goroutines on one
// new key with limit 1 get exactly one allowed, and the old period's key
// is fresh.
func TestCalendarRace(t *testing.T) {
	boundary := utc(2026, 3, 29, 22) // Monday 00:00 in Berlin
	clk := NewManualClock(boundary.Add(-time.Second))
	m := newSet(t, calendarPolicy(CalendarDay, "Europe/Berlin", 1), clk)
	ctx := context.Background()
	spend(t, m, "old", 1)
	clk.Set(boundary)
	const G = 8
	var allowed [G]int
	start := make(chan struct{})
	done := make(chan struct{})
	for g := range G {
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			if d, err := m.Allow(ctx, "shared"); err == nil && d.Allowed {
				allowed[g]++
			}
			for i := range 50 {
				if d, err := m.Allow(ctx, "new"+strconv.Itoa(i)); err == nil && d.Allowed {
					allowed[g]++
				}
			}
		}()
	}
	close(start)
	for range G {
		<-done
	}
	total := 0
	for _, a := range allowed {
		total += a
	}
	if total != 51 {
		t.Errorf("%d allowed over 51 new keys of limit 1 raced by %d goroutines, want 51", total, G)
	}
	if d := peek(t, m, "old"); !d.Allowed || d.ResetAfter != 0 {
		t.Errorf("the old period's key in the new one: %+v", d)
	}
}
