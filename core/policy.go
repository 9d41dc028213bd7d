package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/internal/policyname"
)

// Algorithm selects how a [Policy] counts usage. The zero value is
// [TokenBucket].
type Algorithm uint8

// The five algorithms. See the package documentation for what each allows
// and how to choose.
const (
	// TokenBucket refills continuously at Limit per Window up to Burst and
	// admits a request while the bucket holds its cost: bursts up to Burst,
	// then a steady rate.
	TokenBucket Algorithm = iota
	// FixedWindow counts units per window aligned to multiples of Window
	// since the Unix epoch, or to calendar periods in a time zone (see
	// [Calendar]). Up to 2×Limit can pass in a short span across a
	// boundary.
	FixedWindow
	// SlidingLog keeps the time and cost of every allowed request of the last
	// Window: exact "at most Limit in any Window", memory growing with Limit.
	// In a [Memory] limiter a key's log takes 12 bytes per distinct request
	// time in the window, and never more than 16·Limit bytes: a store of
	// MaxKeys keys holds about MaxKeys·(100 + 16·Limit) bytes at most. A decision
	// costs O(log k) for a log of k entries.
	SlidingLog
	// SlidingWindow estimates the last Window from two fixed-window counters,
	// weighting the previous one by the share of it still inside the window.
	SlidingWindow
	// LeakyBucket queues requests and lets them leave at Limit per Window:
	// an allowed request carries the Delay until its slot, and the queue
	// holds Burst requests, the one being served included; a request that
	// does not fit is denied. It is nginx's limit_req, whose burst=b is
	// Burst b+1 here.
	LeakyBucket
)

var algorithmNames = [...]string{
	TokenBucket:   "token-bucket",
	FixedWindow:   "fixed-window",
	SlidingLog:    "sliding-log",
	SlidingWindow: "sliding-window",
	LeakyBucket:   "leaky-bucket",
}

// Algorithms returns every algorithm, in declaration order, in a new slice
// that the caller may modify.
func Algorithms() []Algorithm {
	return []Algorithm{TokenBucket, FixedWindow, SlidingLog, SlidingWindow, LeakyBucket}
}

// String returns the algorithm's name as [ParsePolicy] reads it, such as
// "token-bucket".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm returns the algorithm named s: "token-bucket",
// "fixed-window", "sliding-log", "sliding-window" or "leaky-bucket"
// (case-insensitive; '_' may stand for '-').
func ParseAlgorithm(s string) (Algorithm, error) {
	norm := strings.ReplaceAll(strings.ToLower(s), "_", "-")
	for a, name := range algorithmNames {
		if norm == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("core: unknown algorithm %q (want one of %s)", s, strings.Join(algorithmNames[:], ", "))
}

// Bounds on a [Policy], so that every algorithm's arithmetic stays exact in
// 64-bit (or, for the sliding window estimate, 128-bit) integers.
const (
	// MaxLimit is the largest Limit and Burst.
	MaxLimit = 1_000_000_000
	// MaxWindow is the longest Window.
	MaxWindow = 366 * 24 * time.Hour
	// MinWindow is the shortest Window: one microsecond, the resolution
	// every store, Redis included, can keep.
	MinWindow = time.Microsecond
	// maxBurstSpan bounds Burst×Window/Limit, the time a full bucket takes to
	// refill from empty.
	maxBurstSpan = 50 * 366 * 24 * time.Hour
)

// Policy says how much a key may do: at most Limit units per Window, counted
// by Algorithm. The zero Algorithm is [TokenBucket].
//
// A Policy is a plain value: copy it freely. [New] and the other stores
// validate it and reject it with an error that names the field.
type Policy struct {
	// Name identifies the policy in headers, metrics and store keys. It may
	// be empty; otherwise it is at most 64 letters, digits, '-', '_' or '.'.
	Name string
	// Algorithm counts usage. Default: TokenBucket.
	Algorithm Algorithm
	// Limit is the number of units allowed per Window, 1 to MaxLimit.
	Limit int64
	// Window is the period Limit applies to, MinWindow to MaxWindow.
	Window time.Duration
	// Burst is the token bucket's capacity and the leaky bucket's queue
	// length, 0 to MaxLimit; 0 means Limit. The other algorithms have no
	// burst and reject a non-zero one.
	Burst int64
	// Calendar makes a FixedWindow's windows calendar periods (days, ISO
	// weeks or months) in Zone rather than multiples of Window since the
	// Unix epoch; Window is then Calendar.Window(). The other algorithms
	// reject it. Default: epoch windows.
	Calendar Calendar
	// Zone is the time zone of the calendar periods, an IANA name such as
	// "Europe/Berlin" as [time.LoadLocation] reads it ("Local" excepted:
	// every machine enforcing a policy must agree on it). Default: UTC.
	// It requires Calendar.
	Zone string
}

// Burstable reports whether the algorithm uses Burst.
func (a Algorithm) Burstable() bool { return a == TokenBucket || a == LeakyBucket }

// Capacity returns the burst the policy allows, which is also the largest
// cost one request can ever be allowed (a larger one gets [ErrCostTooHigh]):
// Burst for the buckets (Limit when Burst is 0), Limit for the others.
func (p Policy) Capacity() int64 {
	if p.Algorithm.Burstable() && p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

// Validate reports whether the policy can be enforced. The error wraps
// [ErrInvalidPolicy] and names the field at fault.
func (p Policy) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &PolicyError{Name: p.Name, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if err := checkName(p.Name); err != nil {
		return bad("Name", "%v", err)
	}
	if int(p.Algorithm) >= len(algorithmNames) {
		return bad("Algorithm", "%d is not a known algorithm", p.Algorithm)
	}
	if p.Limit <= 0 || p.Limit > MaxLimit {
		return bad("Limit", "must be between 1 and %d, got %d", MaxLimit, p.Limit)
	}
	if p.Window < MinWindow || p.Window > MaxWindow {
		return bad("Window", "must be between %v and %v, got %v", MinWindow, MaxWindow, p.Window)
	}
	if p.Window%time.Microsecond != 0 {
		return bad("Window", "must be a whole number of microseconds, got %v", p.Window)
	}
	if p.Burst < 0 || p.Burst > MaxLimit {
		return bad("Burst", "must be between 0 and %d, got %d", MaxLimit, p.Burst)
	}
	if p.Burst != 0 && !p.Algorithm.Burstable() {
		return bad("Burst", "applies to token-bucket and leaky-bucket only, got %d with %v", p.Burst, p.Algorithm)
	}
	if p.Calendar != 0 {
		if p.Calendar.Window() == 0 {
			return bad("Calendar", "%d is not a known calendar period", p.Calendar)
		}
		if p.Algorithm != FixedWindow {
			return bad("Calendar", "applies to fixed-window only, got %v with %v", p.Calendar, p.Algorithm)
		}
		if w := p.Calendar.Window(); p.Window != w {
			return bad("Window", "must be %v (Calendar%s.Window()) with a calendar %v, got %v", w, strings.ToUpper(p.Calendar.String()[:1])+p.Calendar.String()[1:], p.Calendar, p.Window)
		}
		if _, err := loadZone(p.Zone); err != nil {
			return bad("Zone", "%v", err)
		}
	} else if p.Zone != "" {
		return bad("Zone", "applies to calendar windows only, got %q with no Calendar", p.Zone)
	}
	// The time a full bucket takes to drain at rate Limit/Window.
	if span := mulDivCeil(uint64(p.Capacity()), uint64(p.Window), uint64(p.Limit)); span > uint64(maxBurstSpan) {
		return bad("Burst", "%d at %d per %v takes over 50 years to refill", p.Capacity(), p.Limit, p.Window)
	}
	return nil
}

// PolicyError rejects a [Policy]. It wraps [ErrInvalidPolicy].
type PolicyError struct {
	// Name is the policy's Name.
	Name string
	// Field is the Policy field at fault, such as "Limit".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error returns a message that names the policy, the field and the reason.
func (e *PolicyError) Error() string {
	return fmt.Sprintf("core: policy %q: %s %s", e.Name, e.Field, e.Reason)
}

// Unwrap returns [ErrInvalidPolicy].
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }

func checkName(name string) error { return policyname.Check(name) }

// String formats the policy the way [ParsePolicy] reads it, such as
// "100/1m" or "5/15m algorithm=sliding-log name=login". Fields at their
// default are left out.
func (p Policy) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(p.Limit, 10))
	b.WriteByte('/')
	switch p.Calendar {
	case CalendarDay:
		b.WriteString("1d")
	case CalendarWeek:
		b.WriteString("1w")
	case CalendarMonth:
		b.WriteString("1mo")
	default:
		b.WriteString(formatWindow(p.Window))
	}
	// A calendar window's algorithm is the fixed window unless told.
	if p.Calendar == 0 && p.Algorithm != TokenBucket || p.Calendar != 0 && p.Algorithm != FixedWindow {
		b.WriteString(" algorithm=")
		b.WriteString(p.Algorithm.String())
	}
	if p.Burst != 0 {
		b.WriteString(" burst=")
		b.WriteString(strconv.FormatInt(p.Burst, 10))
	}
	if p.Name != "" {
		b.WriteString(" name=")
		b.WriteString(p.Name)
	}
	switch {
	case p.Zone != "":
		b.WriteString(" tz=")
		b.WriteString(p.Zone)
	case p.Calendar == CalendarDay:
		// "1d" alone is the epoch's 24-hour window.
		b.WriteString(" tz=UTC")
	}
	return b.String()
}

// formatWindow writes d compactly: "1m" rather than "1m0s", "7d" for whole
// days.
func formatWindow(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// ParsePolicy reads a policy from a configuration string:
//
//	<limit>/<window> [algorithm=<name>] [burst=<n>] [name=<name>] [tz=<zone>]
//
// The window is a Go duration ("1m", "15m", "1h30m", "500ms"), a whole
// number of days ("7d"), or a bare unit meaning one of it ("s", "m", "h",
// "d", "ms"). Options are separated by spaces, in any order, each at most
// once. Examples: "100/1m", "10/s burst=20",
// "5/15m algorithm=sliding-log name=login".
//
// Calendar windows ([Calendar]) are "1w" (an ISO week from Monday 00:00),
// "1mo" (a month), and "1d" with a tz option (a day from midnight to
// midnight): tz names the time zone, such as "tz=Europe/Berlin", and is
// UTC when left out. Their algorithm is fixed-window, the only one that
// takes them. Examples: "1000/1mo tz=Europe/Berlin",
// "100/1d tz=America/New_York", "1/1w".
//
// The policy is validated; an error names what is wrong.
func ParsePolicy(s string) (Policy, error) {
	fail := func(format string, args ...any) (Policy, error) {
		return Policy{}, fmt.Errorf("core: parse policy %q: %s: %w", s, fmt.Sprintf(format, args...), ErrInvalidPolicy)
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return fail("empty; want <limit>/<window>, such as 100/1m")
	}
	rate, opts := fields[0], fields[1:]
	limitStr, windowStr, ok := strings.Cut(rate, "/")
	if !ok {
		return fail("%q has no '/'; want <limit>/<window>, such as 100/1m", rate)
	}
	var p Policy
	limit, err := parseCount(limitStr)
	if err != nil {
		return fail("limit %q: %v", limitStr, err)
	}
	p.Limit = limit
	if p.Window, p.Calendar, err = parseWindow(windowStr); err != nil {
		return fail("window %q: %v", windowStr, err)
	}
	seen := make(map[string]bool, len(opts))
	for _, opt := range opts {
		k, v, ok := strings.Cut(opt, "=")
		if !ok || v == "" {
			return fail("option %q: want key=value", opt)
		}
		k = strings.ToLower(k)
		if k == "algo" {
			k = "algorithm"
		}
		if seen[k] {
			return fail("option %q given twice", k)
		}
		seen[k] = true
		switch k {
		case "algorithm":
			if p.Algorithm, err = ParseAlgorithm(v); err != nil {
				return fail("algorithm %q: unknown; want one of %s", v, strings.Join(algorithmNames[:], ", "))
			}
		case "burst":
			if p.Burst, err = parseCount(v); err != nil {
				return fail("burst %q: %v", v, err)
			}
		case "name":
			p.Name = v
		case "tz":
			// UTC has one spelling: the default.
			if v != "UTC" {
				p.Zone = v
			}
		default:
			return fail("unknown option %q; want algorithm, burst, name or tz", k)
		}
	}
	if seen["tz"] && p.Calendar == 0 {
		if p.Window != CalendarDay.Window() {
			return fail("tz applies to calendar windows, 1d, 1w or 1mo; got %s", windowStr)
		}
		p.Calendar = CalendarDay
	}
	if p.Calendar != 0 && !seen["algorithm"] {
		p.Algorithm = FixedWindow
	}
	if err := p.Validate(); err != nil {
		pe := err.(*PolicyError)
		return fail("%s %s", pe.Field, pe.Reason)
	}
	return p, nil
}

// parseCount reads a positive decimal integer up to MaxLimit.
func parseCount(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("missing number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("not a whole number")
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > MaxLimit {
		return 0, fmt.Errorf("more than %d", MaxLimit)
	}
	if n == 0 {
		return 0, fmt.Errorf("must be at least 1")
	}
	return n, nil
}

// parseWindow reads a window: a Go duration, "<n>d", a bare unit, or a
// calendar week or month ("1w", "1mo").
func parseWindow(s string) (time.Duration, Calendar, error) {
	switch s {
	case "":
		return 0, 0, fmt.Errorf("missing duration")
	case "ns", "us", "µs", "ms", "s", "m", "h":
		s = "1" + s
	case "d", "w", "mo":
		s = "1" + s
	}
	for _, c := range [...]struct {
		unit string
		cal  Calendar
	}{{"w", CalendarWeek}, {"mo", CalendarMonth}} {
		if n, ok := strings.CutSuffix(s, c.unit); ok {
			if n != "1" {
				return 0, 0, fmt.Errorf("a calendar %v is 1%s, one at a time (a span of days since the epoch is <n>d)", c.cal, c.unit)
			}
			return c.cal.Window(), c.cal, nil
		}
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := parseCount(days)
		if err != nil || n > int64(MaxWindow/(24*time.Hour)) {
			return 0, 0, fmt.Errorf("days must be a whole number from 1 to %d", MaxWindow/(24*time.Hour))
		}
		return time.Duration(n) * 24 * time.Hour, 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, 0, fmt.Errorf("not a duration such as 1m, 15m, 1h30m or 7d")
	}
	if d <= 0 {
		return 0, 0, fmt.Errorf("must be positive")
	}
	return d, 0, nil
}
