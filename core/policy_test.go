package core

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		in   string
		want Policy
	}{
		{"100/1m", Policy{Limit: 100, Window: time.Minute}},
		{"100/m", Policy{Limit: 100, Window: time.Minute}},
		{"10/s burst=20", Policy{Limit: 10, Window: time.Second, Burst: 20}},
		{"5/15m algorithm=sliding-log name=login", Policy{Name: "login", Algorithm: SlidingLog, Limit: 5, Window: 15 * time.Minute}},
		{"  1000/1h   algo=Fixed_Window  ", Policy{Algorithm: FixedWindow, Limit: 1000, Window: time.Hour}},
		{"1000000/d algorithm=sliding-window", Policy{Algorithm: SlidingWindow, Limit: 1e6, Window: 24 * time.Hour}},
		{"3/7d", Policy{Limit: 3, Window: 7 * 24 * time.Hour}},
		{"2/500ms algorithm=leaky-bucket burst=4", Policy{Algorithm: LeakyBucket, Limit: 2, Window: 500 * time.Millisecond, Burst: 4}},
		{"1/1h30m", Policy{Limit: 1, Window: 90 * time.Minute}},
		{"1000000000/30d", Policy{Limit: 1e9, Window: 30 * 24 * time.Hour}},
	}
	for _, tt := range tests {
		got, err := ParsePolicy(tt.in)
		if err != nil {
			t.Errorf("ParsePolicy(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParsePolicy(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
		back, err := ParsePolicy(got.String())
		if err != nil || back != got {
			t.Errorf("ParsePolicy(%q.String() = %q) = %#v, %v; want it back", tt.in, got.String(), back, err)
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	tests := []struct {
		in, wantInErr string
	}{
		{"", "empty"},
		{"100", "no '/'"},
		{"/1m", `limit ""`},
		{"abc/1m", `limit "abc": not a whole number`},
		{"-5/1m", `limit "-5"`},
		{"0/1m", "at least 1"},
		{"1.5/1m", "not a whole number"},
		{"99999999999/1m", "more than 1000000000"},
		{"100/", `window ""`},
		{"100/1x", `window "1x"`},
		{"100/-1m", `window "-1m"`},
		{"100/0s", `window "0s"`},
		{"100/1ns", "Window must be between"},
		{"100/1500ns", "whole number of microseconds"},
		{"100/400d", "days must be"},
		{"100/1m burst", `option "burst": want key=value`},
		{"100/1m burst=", `want key=value`},
		{"100/1m burst=x", `burst "x"`},
		{"100/1m burst=5 algorithm=fixed-window", "Burst applies to token-bucket and leaky-bucket only"},
		{"100/1m algorithm=gcra", `algorithm "gcra": unknown`},
		{"100/1m colour=red", `unknown option "colour"`},
		{"100/1m burst=1 burst=2", `option "burst" given twice`},
		{"100/1m name=a:b", "Name"},
		{"1/366d burst=1000000000", "50 years"},
	}
	for _, tt := range tests {
		_, err := ParsePolicy(tt.in)
		if err == nil {
			t.Errorf("ParsePolicy(%q) succeeded, want an error with %q", tt.in, tt.wantInErr)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantInErr) {
			t.Errorf("ParsePolicy(%q) error = %q, want it to contain %q", tt.in, err, tt.wantInErr)
		}
		if !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("ParsePolicy(%q) error does not wrap ErrInvalidPolicy: %v", tt.in, err)
		}
	}
}

func TestValidateNamesField(t *testing.T) {
	tests := []struct {
		p     Policy
		field string
	}{
		{Policy{Limit: 0, Window: time.Second}, "Limit"},
		{Policy{Limit: -1, Window: time.Second}, "Limit"},
		{Policy{Limit: MaxLimit + 1, Window: time.Second}, "Limit"},
		{Policy{Limit: 1, Window: 0}, "Window"},
		{Policy{Limit: 1, Window: -time.Second}, "Window"},
		{Policy{Limit: 1, Window: MaxWindow + time.Second}, "Window"},
		{Policy{Limit: 1, Window: time.Second + 1}, "Window"},
		{Policy{Limit: 1, Window: time.Second, Burst: -1}, "Burst"},
		{Policy{Limit: 1, Window: time.Second, Burst: 2, Algorithm: SlidingLog}, "Burst"},
		{Policy{Limit: 1, Window: time.Second, Algorithm: Algorithm(9)}, "Algorithm"},
		{Policy{Limit: 1, Window: time.Second, Name: "has space"}, "Name"},
		{Policy{Limit: 1, Window: time.Second, Name: strings.Repeat("n", 65)}, "Name"},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		var pe *PolicyError
		if !errors.As(err, &pe) || pe.Field != tt.field {
			t.Errorf("%#v.Validate() = %v, want a PolicyError on %s", tt.p, err, tt.field)
			continue
		}
		if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("error %q should name %s and wrap ErrInvalidPolicy", err, tt.field)
		}
		if _, err := New(tt.p); err == nil {
			t.Errorf("New(%#v) succeeded, want an error", tt.p)
		}
	}
}

func TestNewOptionErrors(t *testing.T) {
	p := Policy{Limit: 1, Window: time.Second}
	if _, err := New(p, WithMaxKeys(0)); err == nil || !strings.Contains(err.Error(), "WithMaxKeys") {
		t.Errorf("WithMaxKeys(0): err = %v, want one naming WithMaxKeys", err)
	}
	if _, err := New(p, WithClock(nil)); err == nil || !strings.Contains(err.Error(), "WithClock") {
		t.Errorf("WithClock(nil): err = %v, want one naming WithClock", err)
	}
}

func TestAlgorithmNames(t *testing.T) {
	all := Algorithms()
	for i, a := range all {
		if a != Algorithm(i) {
			t.Errorf("Algorithms()[%d] = %v, want declaration order", i, a)
		}
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if s := Algorithm(len(all)).String(); s != "Algorithm("+strconv.Itoa(len(all))+")" {
		t.Errorf("Algorithm(%d) = %q, an algorithm missing from Algorithms()", len(all), s)
	}
	all[0] = LeakyBucket
	if Algorithms()[0] != TokenBucket {
		t.Error("Algorithms() returned a slice shared with its earlier callers")
	}
	if s := Algorithm(42).String(); s != "Algorithm(42)" {
		t.Errorf("Algorithm(42).String() = %q", s)
	}
}

// FuzzParsePolicy checks that ParsePolicy never panics, that what it accepts
// is valid, and that String gives back a string that parses to the same
// policy.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"100/1m", "10/s burst=20", "5/15m algorithm=sliding-log name=login", "1/d", "7/1h30m algo=leaky_bucket burst=3", "0/0", "x/y z=w", "1000/1mo tz=Europe/Berlin", "100/1d tz=America/New_York", "1/1w", "1/d tz=UTC name=daily"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("ParsePolicy(%q) error %v does not wrap ErrInvalidPolicy", s, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParsePolicy(%q) = %#v, which is invalid: %v", s, p, err)
		}
		back, err := ParsePolicy(p.String())
		if err != nil || back != p {
			t.Fatalf("ParsePolicy(%q) = %#v; its String %q parses to %#v, %v", s, p, p.String(), back, err)
		}
	})
}
