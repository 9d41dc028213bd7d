package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

var perMinute = core.Policy{Limit: 100, Window: time.Minute}

// offsets returns the arrivals' times.
func offsets(as []arrival) []time.Duration {
	out := make([]time.Duration, len(as))
	for i, a := range as {
		out[i] = a.at
	}
	return out
}

func checkAt(t *testing.T, what string, as []arrival, i int, want time.Duration) {
	t.Helper()
	if i >= len(as) {
		t.Fatalf("%s: %d arrivals, want at least %d", what, len(as), i+1)
	}
	if as[i].at != want {
		t.Errorf("%s: arrival %d at %v, want %v", what, i, as[i].at, want)
	}
}

func TestBoundaryBurst(t *testing.T) {
	start := defaultStart.Add(30 * time.Second) // 12:00:30: the first boundary is 30s in
	as := boundaryBurst(perMinute, start, time.Minute)
	if len(as) != 200 {
		t.Fatalf("%d arrivals, want 200", len(as))
	}
	checkAt(t, "one minute", as, 0, 29*time.Second)
	checkAt(t, "one minute", as, 1, 29*time.Second+10*time.Millisecond)
	checkAt(t, "one minute", as, 99, 29*time.Second+990*time.Millisecond)
	checkAt(t, "one minute", as, 100, 30*time.Second)
	checkAt(t, "one minute", as, 199, 30*time.Second+990*time.Millisecond)

	// Four minutes: boundaries at 30s, 1m30s, 2m30s and 3m30s; a burst at
	// every other one, so that the limiters are fresh again.
	as = boundaryBurst(perMinute, start, 4*time.Minute)
	if len(as) != 400 {
		t.Fatalf("four minutes: %d arrivals, want 400", len(as))
	}
	checkAt(t, "four minutes", as, 200, 2*time.Minute+29*time.Second)
	checkAt(t, "four minutes", as, 399, 2*time.Minute+30*time.Second+990*time.Millisecond)

	// Starting on a boundary, the first one is a window in.
	as = boundaryBurst(core.Policy{Limit: 4, Window: 6 * time.Second}, defaultStart, 8*time.Second)
	want := []time.Duration{5900, 5925, 5950, 5975, 6000, 6025, 6050, 6075}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if got := offsets(as); !slices.Equal(got, want) {
		t.Errorf("4/6s from a boundary: %v, want %v", got, want)
	}
}

func TestSteady(t *testing.T) {
	as, err := steady(perMinute, time.Minute, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 200 {
		t.Fatalf("%d arrivals, want 200", len(as))
	}
	checkAt(t, "twice the rate", as, 1, 300*time.Millisecond)
	checkAt(t, "twice the rate", as, 199, 59700*time.Millisecond)

	// 3 per second at 1.0: 333,333µs apart, whole microseconds.
	as, err = steady(core.Policy{Limit: 3, Window: time.Second}, time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := offsets(as), []time.Duration{0, 333333 * time.Microsecond, 666666 * time.Microsecond, 999999 * time.Microsecond}; !slices.Equal(got, want) {
		t.Errorf("3/s: %v, want %v", got, want)
	}

	if _, err := steady(perMinute, 24*time.Hour, 1000); err == nil {
		t.Error("144 million requests: no error")
	}
}

func TestSawtooth(t *testing.T) {
	p := core.Policy{Limit: 10, Window: time.Second}
	as, err := sawtooth(p, defaultStart, 2*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 20 {
		t.Fatalf("%d arrivals, want 20", len(as))
	}
	// k-th of 10 at √((k+½)/10) s into its tooth.
	checkAt(t, "sawtooth", as, 0, 223607*time.Microsecond)   // √0.05
	checkAt(t, "sawtooth", as, 1, 387298*time.Microsecond)   // √0.15
	checkAt(t, "sawtooth", as, 9, 974679*time.Microsecond)   // √0.95
	checkAt(t, "sawtooth", as, 10, 1223607*time.Microsecond) // the second tooth
	// The rate climbs linearly: a quarter of a tooth's requests in its
	// first half.
	first := 0
	for _, a := range as[:10] {
		if a.at < 500*time.Millisecond {
			first++
		}
	}
	if first != 2 { // k = 0, 1: (k+½)/10 < ¼
		t.Errorf("%d requests in the first half of a tooth, want 2", first)
	}

	// Started mid-window, the first tooth is cut: only its second half.
	as, err = sawtooth(p, defaultStart.Add(500*time.Millisecond), time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 10 || as[0].at != 0 || as[7].at != 474679*time.Microsecond || as[8].at != 723607*time.Microsecond {
		t.Errorf("mid-window start: %v", offsets(as))
	}
}

func TestRetryStorm(t *testing.T) {
	tr, err := retryStorm(perMinute, time.Minute, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.arrivals) != 200 {
		t.Fatalf("%d first attempts, want 200", len(tr.arrivals))
	}
	a := tr.arrivals[7]
	for attempt := 1; attempt <= stormRetries; attempt++ {
		next, ok := tr.retry(a)
		if !ok {
			t.Fatalf("gave up after %d attempts, want %d retries", attempt, stormRetries)
		}
		if backoff := next.at - a.at; backoff < 500*time.Millisecond || backoff > 1500*time.Millisecond || backoff%time.Microsecond != 0 {
			t.Errorf("retry %d after %v, want 0.5s to 1.5s in whole microseconds", attempt, backoff)
		}
		if next.attempt != attempt || next.client != a.client {
			t.Errorf("retry %d: %+v", attempt, next)
		}
		again, _ := tr.retry(a)
		if again != next {
			t.Errorf("retry %d: %+v, then %+v: not deterministic", attempt, next, again)
		}
		a = next
	}
	if _, ok := tr.retry(a); ok {
		t.Errorf("retried after %d retries", stormRetries)
	}
	other, _ := retryStorm(perMinute, time.Minute, 2, 2)
	n1, _ := tr.retry(tr.arrivals[0])
	n2, _ := other.retry(other.arrivals[0])
	if n1 == n2 {
		t.Errorf("seeds 1 and 2 gave the same backoff %v", n1.at)
	}
}

func TestReadCSV(t *testing.T) {
	as, _, abs, err := readCSV(strings.NewReader("time,cost\n# a comment\n1.5\n\n250ms, 3\n1m0.000001s\n0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if abs {
		t.Error("offsets read as absolute times")
	}
	want := []arrival{{0, 1, 0, 0}, {250 * time.Millisecond, 3, 1, 0}, {1500 * time.Millisecond, 1, 2, 0}, {time.Minute + time.Microsecond, 1, 3, 0}}
	if len(as) != len(want) {
		t.Fatalf("got %+v, want %+v", as, want)
	}
	for i := range want {
		if as[i] != want[i] {
			t.Errorf("arrival %d: %+v, want %+v", i, as[i], want[i])
		}
	}

	as, first, abs, err := readCSV(strings.NewReader("2026-01-01T12:00:59.5Z\n2026-01-01T13:00:00+01:00\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !abs || !first.Equal(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)) || as[0].at != 0 || as[1].at != 59500*time.Millisecond {
		t.Errorf("absolute: first %v, %+v", first, as)
	}

	for _, bad := range []string{"", "# nothing\n", "1\n2026-01-01T12:00:00Z\n", "1,0\n", "1,x\n", "1,2,3\n", "1\nsoon\n", "1\n-1s\n"} {
		if _, _, _, err := readCSV(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
