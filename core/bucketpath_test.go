package core

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// TestFillPolicyCopiesEveryField checks that fillPolicy, which copies the
// Policy field by field, copies every field there is: a field added to
// Policy fails here until fillPolicy copies it.
func TestFillPolicyCopiesEveryField(t *testing.T) {
	var p Policy
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("field-" + strconv.Itoa(i))
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(int64(100 + i))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(100 + i))
		default:
			t.Fatalf("Policy.%s: kind %v: teach this test to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
	set := &settings{policy: p}
	var d Decision
	set.fillPolicy(&d)
	if d.Policy != p || d.Limit != p.Limit {
		t.Errorf("fillPolicy: got %+v (Limit %d), want %+v", d.Policy, d.Limit, p)
	}
}

// TestReadClockIsNoTime checks that no time micros returns is readClock.
func TestReadClockIsNoTime(t *testing.T) {
	for _, ns := range []int64{math.MinInt64, math.MinInt64 + 1, math.MinInt64 + 999, math.MinInt64 + 1000, -1, 0, math.MaxInt64} {
		if us := micros(ns); us == readClock {
			t.Errorf("micros(%d) = readClock", ns)
		}
	}
}

// TestBucketPathMatchesEngine checks that the buckets' own decision path
// (decideInto, lock-free on a held key) decides exactly as the engine's
// locked path does: two limiters on one manual clock, one asked through
// AllowN and Peek, the other through decideEngine, over random keys,
// costs (some above the capacity, some not positive), times and Peeks,
// give the same Decisions and errors.
func TestBucketPathMatchesEngine(t *testing.T) {
	ctx := context.Background()
	for _, p := range []Policy{
		{Limit: 10, Window: time.Second, Burst: 5},
		{Limit: 3, Window: time.Second},
		{Algorithm: LeakyBucket, Limit: 7, Window: time.Second, Burst: 4},
		{Name: "big", Limit: 1e9, Window: time.Minute},
	} {
		t.Run(p.Algorithm.String()+"/"+strconv.FormatInt(p.Limit, 10), func(t *testing.T) {
			clock := NewManualClock(time.Unix(1_700_000_000, 0))
			fast, slow := mustNew(t, p, WithClock(clock)), mustNew(t, p, WithClock(clock))
			r := rand.New(rand.NewPCG(1, uint64(p.Limit)))
			capacity := p.Capacity()
			for i := range 5000 {
				key := "k" + strconv.Itoa(r.IntN(20))
				if r.IntN(50) == 0 {
					key = ""
				}
				n := 1 + r.Int64N(capacity)
				switch r.IntN(40) {
				case 0:
					n = capacity + 1 + r.Int64N(3)
				case 1:
					n = -r.Int64N(2)
				}
				commit := r.IntN(4) != 0
				var got, want Decision
				var gotErr error
				if commit {
					got, gotErr = fast.AllowN(ctx, key, n)
				} else {
					got, gotErr = fast.Peek(ctx, key, n)
				}
				wantErr := slow.decideEngine(&want, key, n, commit, readClock)
				if got != want || !sameError(gotErr, wantErr) {
					t.Fatalf("step %d: %q n=%d commit=%v:\n got %+v, %v\nwant %+v, %v", i, key, n, commit, got, gotErr, want, wantErr)
				}
				clock.Advance(time.Duration(r.Int64N(int64(p.Window / time.Duration(p.Limit) * 2))))
			}
		})
	}
}

// sameError reports whether a and b are both nil or both the same error.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error() && errors.Is(a, errors.Unwrap(b))
}
