package clientlimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"120", 2 * time.Minute, true},
		{" 7 ", 7 * time.Second, true},
		{"99999999999999999999999", maxHint, true},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Sunday, 01-Mar-26 12:01:00 GMT", time.Minute, true}, // RFC 850
		{"Sun Mar  1 12:00:05 2026", 5 * time.Second, true},   // asctime
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},            // past
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"12abc", 0, false},
	} {
		got, ok := parseRetryAfter(tt.v, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseReset(t *testing.T) {
	unix := now.Unix()
	for _, tt := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"30", 30 * time.Second, true},
		{"0", 0, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"999999999", 999999999 * time.Second, true}, // the largest wait
		{strconv.FormatInt(unix+60, 10), time.Minute, true},
		{strconv.FormatInt(unix+60, 10) + ".25", time.Minute + 250*time.Millisecond, true},
		{strconv.FormatInt(unix-60, 10), 0, true}, // past
		{strconv.FormatInt(unix*1000+1500, 10), 1500 * time.Millisecond, true},
		{"1000000000", 0, true}, // 2001
		{"99999999999999999999", maxHint, true},
		{"", 0, false},
		{"-5", 0, false},
		{"1.", 0, false},
		{"1.1234567891", 0, false},
		{"x", 0, false},
	} {
		got, ok := parseReset(tt.v, now)
		if ok != tt.ok || ok && got != min(tt.want, maxHint) {
			t.Errorf("parseReset(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}

func TestReadSignals(t *testing.T) {
	type want struct {
		retryAfter   time.Duration
		exhaustedFor time.Duration
		interval     time.Duration
		paceFor      time.Duration
		malformed    string
	}
	for _, tt := range []struct {
		name string
		h    []string
		want want
	}{
		{"none", nil, want{}},
		{"ratekit token bucket", []string{"RateLimit-Policy", `"default";q=100;w=60`, "RateLimit", `"default";r=40;t=36`}, want{interval: 900 * time.Millisecond, paceFor: 36 * time.Second}},
		{"ratekit denied", []string{"RateLimit-Policy", `"default";q=100;w=60`, "RateLimit", `"default";r=0;t=1`, "Retry-After", "1"}, want{retryAfter: time.Second, exhaustedFor: time.Second}},
		{"token name", []string{"RateLimit", `api;r=1;t=5`}, want{interval: 5 * time.Second, paceFor: 5 * time.Second}},
		{"two quotas", []string{"RateLimit", `"s";r=9;t=1, "d";r=10;t=100`}, want{interval: 10 * time.Second, paceFor: 100 * time.Second}},
		{"two fields", []string{"RateLimit", `"s";r=9;t=1`, "RateLimit", `"d";r=0;t=100`}, want{interval: time.Second / 9, paceFor: time.Second, exhaustedFor: 100 * time.Second}},
		{"window for t", []string{"RateLimit-Policy", `"d";q=10;w=60`, "RateLimit", `"d";r=6`}, want{interval: 10 * time.Second, paceFor: time.Minute}},
		{"no t, no policy", []string{"RateLimit", `"d";r=6`}, want{}},
		{"bytes quota", []string{"RateLimit-Policy", `"b";q=10;qu="content-bytes";w=60`, "RateLimit", `"b";r=0;t=60`}, want{}},
		{"requests quota", []string{"RateLimit-Policy", `"b";q=10;qu="requests";w=60`, "RateLimit", `"b";r=0;t=60`}, want{exhaustedFor: time.Minute}},
		{"draft dictionary", []string{"RateLimit", `limit=100, remaining=0, reset=30`}, want{exhaustedFor: 30 * time.Second}},
		{"github", []string{"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4000", "X-RateLimit-Reset", strconv.FormatInt(now.Unix()+3600, 10)}, want{interval: 900 * time.Millisecond, paceFor: time.Hour}},
		{"triple", []string{"RateLimit-Remaining", "5", "RateLimit-Reset", "10"}, want{interval: 2 * time.Second, paceFor: 10 * time.Second}},
		{"remaining without reset", []string{"X-RateLimit-Remaining", "0"}, want{}},
		{"bad Retry-After", []string{"Retry-After", "later"}, want{malformed: "Retry-After"}},
		{"bad RateLimit", []string{"RateLimit", `"d";r=`}, want{malformed: "Ratelimit"}},
		{"bad member skipped", []string{"RateLimit", `"d";r=-1;t=5, "e";r=1;t=2, ("x");r=0;t=9, "f";r="x";t=1`}, want{interval: 2 * time.Second, paceFor: 2 * time.Second}},
		{"bad reset", []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "tomorrow"}, want{malformed: "X-Ratelimit-Reset"}},
		{"long Retry-After", []string{"Retry-After", strings.Repeat("0", 64) + "1"}, want{malformed: "Retry-After"}},
		{"long remaining", []string{"X-RateLimit-Remaining", strings.Repeat("0", 64) + "1", "X-RateLimit-Reset", "10"}, want{malformed: "X-Ratelimit-Remaining"}},
		{"long reset", []string{"RateLimit-Remaining", "1", "RateLimit-Reset", "1" + strings.Repeat(" ", 64)}, want{malformed: "Ratelimit-Reset"}},
		{"65 quotas", []string{"RateLimit", strings.Repeat(`"s";r=9;t=1, `, 64) + `"d";r=0;t=100`}, want{interval: time.Second / 9, paceFor: time.Second, malformed: "Ratelimit"}},
		{"65 policies", []string{"RateLimit-Policy", strings.Repeat(`"s";w=1, `, 64) + `"d";w=100`, "RateLimit", `"d";r=0`}, want{malformed: "Ratelimit-Policy"}},
		{"one long string", []string{"RateLimit", `"d";r=0;t=9;x="` + strings.Repeat("a", maxFieldBytes) + `"`}, want{malformed: "Ratelimit"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i < len(tt.h); i += 2 {
				h.Add(tt.h[i], tt.h[i+1])
			}
			s := readSignals(h, now)
			got := want{s.retryAfter, s.exhaustedFor, s.interval, s.paceFor, s.malformed}
			if got != tt.want {
				t.Errorf("readSignals(%v) = %+v, want %+v", h, got, tt.want)
			}
		})
	}
}

// The parsers never panic, and what they return is within bounds.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "Sun, 01 Mar 2026 12:00:30 GMT", "Sunday, 01-Mar-26 12:01:00 GMT", "Sun Mar  1 12:00:05 2026", "-1", "soon", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseRetryAfter(v, now)
		if d < 0 || d > maxHint || !ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, %v", v, d, ok)
		}
		// RFC 9110's delta-seconds: digits only (no sign).
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && digits(strings.TrimSpace(v)) && n < 1e9 && (!ok || d != min(time.Duration(n)*time.Second, maxHint)) {
			t.Fatalf("parseRetryAfter(%q) = %v, %v; want %ds", v, d, ok, n)
		}
	})
}

func FuzzReset(f *testing.F) {
	for _, s := range []string{"30", "1.5", "1772366460", "1772366460.25", "1772366401500", "", "x", "1."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseReset(v, now)
		if d < 0 || d > maxHint || !ok && d != 0 {
			t.Fatalf("parseReset(%q) = %v, %v", v, d, ok)
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && digits(v) && n < epochSeconds && (!ok || d != min(time.Duration(n)*time.Second, maxHint)) {
			t.Fatalf("parseReset(%q) = %v, %v; want %ds", v, d, ok, n)
		}
	})
}

// Any RateLimit and RateLimit-Policy values: no panic, and the signals are
// within bounds.
func FuzzRateLimit(f *testing.F) {
	f.Add(`"default";r=40;t=36`, `"default";q=100;w=60`)
	f.Add(`"s";r=9;t=1, "d";r=10;t=100`, ``)
	f.Add(`"b";r=0;t=60`, `"b";q=10;qu="content-bytes";w=60`)
	f.Add(`limit=100, remaining=0, reset=30`, ``)
	f.Add(`"d";r=6`, `"d";q=10;w=60`)
	f.Add(`"d";r=`, `(`)
	f.Add(`api;r=99999999999999;t=1`, `api;w=999999999999999`)
	f.Fuzz(func(t *testing.T, rl, pol string) {
		h := http.Header{"Ratelimit": {rl}, "Ratelimit-Policy": {pol}}
		s := readSignals(h, now)
		if s.exhaustedFor < 0 || s.exhaustedFor > maxHint || s.interval < 0 || s.interval > maxHint || s.paceFor < s.interval || s.paceFor > maxHint {
			t.Fatalf("RateLimit %q, RateLimit-Policy %q: %+v", rl, pol, s)
		}
		if s.malformed != "" && s.malformed != hRateLimit && s.malformed != hRateLimitPol {
			t.Fatalf("malformed %q", s.malformed)
		}
	})
}

// A hostile server's fields of 12,000 members each (216 KB) are read in
// part: the first 64 members of each, within 8 KiB, as the whole fields
// would have been parsed; the rest, which says the quota is spent for an
// hour, is not read.
func TestHostileFields(t *testing.T) {
	h := hostileFields(12000)
	rl := h[hRateLimit][0]
	for i := 64; i < 12000; i += 1000 {
		rl = strings.Replace(rl, strconv.FormatInt(int64(36*36*10+i), 36)+";r=5", strconv.FormatInt(int64(36*36*10+i), 36)+";r=0;t=3600", 1)
	}
	h[hRateLimit] = []string{rl}
	lines := strings.Split(h[hRateLimitPol][0], ", ") // one member a line
	for _, v := range [][]string{h[hRateLimit], h[hRateLimitPol], lines} {
		whole, err := httpsfv.UnmarshalList(v)
		if err != nil || len(whole) != 12000 {
			t.Fatalf("the whole field: %d members, %v", len(whole), err)
		}
		prefix, cut := cutList(v, maxMembers, maxFieldBytes)
		if !cut || len(prefix) != 1 || len(prefix[0]) > maxFieldBytes {
			t.Fatalf("cutList: cut %v, %d lines, %d bytes; want a cut to one line of at most %d bytes", cut, len(prefix), len(prefix[0]), maxFieldBytes)
		}
		read, err := httpsfv.UnmarshalList(prefix)
		if err != nil || len(read) != maxMembers {
			t.Fatalf("the part read: %d members, %v; want %d", len(read), err, maxMembers)
		}
		want, _ := httpsfv.Marshal(whole[:maxMembers])
		if got, _ := httpsfv.Marshal(read); got != want {
			t.Fatalf("the part read is\n%s\nwant the whole field's first members\n%s", got, want)
		}
	}
	h[hRateLimitPol] = lines
	s := readSignals(h, now)
	// The first members: 5 left of a window of 9s.
	if s.exhausted || s.interval != 9*time.Second/5 || s.paceFor != 9*time.Second || s.malformed != hRateLimit {
		t.Errorf("readSignals = %+v; want a pace of 1.8s for 9s, nothing exhausted, RateLimit reported", s)
	}
}

// Any one or two field lines and bounds: the part cutList keeps is within
// the bounds, and a parser reads in it the first members of the whole
// field, unchanged.
func FuzzCutList(f *testing.F) {
	f.Add(`"a";r=1, "b";r=2, "c";r=3`, ``, uint8(2), uint16(100))
	f.Add(`"a,b";r=1, c`, `d`, uint8(3), uint16(8))
	f.Add(`"x\\\", y";r=1, z`, `w`, uint8(1), uint16(300))
	f.Add(`%"a\", b, c`, ``, uint8(2), uint16(300))
	f.Add(`("a" "b,c");r=1, d`, `e, f`, uint8(5), uint16(12))
	f.Add(`limit=100, remaining=0, reset=30`, `remaining=1`, uint8(2), uint16(40))
	f.Fuzz(func(t *testing.T, a, b string, members uint8, bytes uint16) {
		lines := []string{a}
		if b != "" {
			lines = append(lines, b)
		}
		maxM, maxB := 1+int(members%80), int(bytes%400)
		prefix, cut := cutList(lines, maxM, maxB)
		joined := strings.Join(lines, ", ")
		switch {
		case !cut && (len(prefix) != len(lines) || strings.Join(prefix, ", ") != joined || len(joined) > maxB):
			t.Fatalf("cutList(%q, %d, %d) = %q, not cut", lines, maxM, maxB, prefix)
		case cut && (len(prefix) > 1 || !strings.HasPrefix(joined, strings.Join(prefix, "")) || len(strings.Join(prefix, "")) > maxB):
			t.Fatalf("cutList(%q, %d, %d) = %q, cut", lines, maxM, maxB, prefix)
		}
		if whole, err := httpsfv.UnmarshalList(lines); err == nil {
			read, err := httpsfv.UnmarshalList(prefix)
			if err != nil || len(read) > maxM || len(read) > len(whole) || !cut && len(read) != len(whole) {
				t.Fatalf("cutList(%q, %d, %d) = %q: %d members (%v) of %d", lines, maxM, maxB, prefix, len(read), err, len(whole))
			}
			got, err1 := httpsfv.Marshal(read)
			want, err2 := httpsfv.Marshal(whole[:len(read)])
			if got != want || (err1 == nil) != (err2 == nil) {
				t.Fatalf("cutList(%q, %d, %d) = %q: read %q, want %q", lines, maxM, maxB, prefix, got, want)
			}
		}
		if whole, err := httpsfv.UnmarshalDictionary(lines); err == nil {
			read, err := httpsfv.UnmarshalDictionary(prefix)
			if err != nil {
				t.Fatalf("cutList(%q, %d, %d) = %q: %v", lines, maxM, maxB, prefix, err)
			}
			names, all := read.Names(), whole.Names()
			if len(names) > len(all) || fmt.Sprint(names) != fmt.Sprint(all[:len(names)]) {
				t.Fatalf("cutList(%q, %d, %d) = %q: names %q of %q", lines, maxM, maxB, prefix, names, all)
			}
		}
	})
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// hostileFields returns a RateLimit and a RateLimit-Policy field of n
// members each, named apart so that every RateLimit member looks for its
// policy: the shape of a hostile upstream's answer.
func hostileFields(n int) http.Header {
	var rl, pol strings.Builder
	for i := range n {
		if i > 0 {
			rl.WriteString(", ")
			pol.WriteString(", ")
		}
		name := strconv.FormatInt(int64(36*36*10+i), 36) // "a00", "a01", ...
		rl.WriteString(name + ";r=5")
		pol.WriteString(name + ";w=9")
	}
	return http.Header{hRateLimit: {rl.String()}, hRateLimitPol: {pol.String()}}
}

// BenchmarkHostileFields reads a RateLimit and a RateLimit-Policy of
// 12,000 members each (216 KB), and the RateLimit alone.
func BenchmarkHostileFields(b *testing.B) {
	both := hostileFields(12000)
	alone := http.Header{hRateLimit: both[hRateLimit]}
	for _, bb := range []struct {
		name string
		h    http.Header
	}{{"both", both}, {"RateLimit", alone}} {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(int64(len(bb.h[hRateLimit][0]) + len(bb.h.Get(hRateLimitPol))))
			for b.Loop() {
				readSignals(bb.h, now)
			}
		})
	}
}
