package rlservice

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/cmd/ratekit-server/internal/rlconfig"
	"github.com/ratekit/ratekit/core"
)

const testConfig = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: unl
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: zero
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: general
    rate_limit: {name: general, unit: minute, requests_per_unit: 1}
  - key: special
    rate_limit:
      unit: minute
      requests_per_unit: 10
      replaces: [{name: general}]
  - key: tb
    rate_limit: {window: 10s, requests_per_unit: 10, algorithm: token-bucket, burst: 2}
`

func mustConfig(t *testing.T, yaml string) *rlconfig.Config {
	t.Helper()
	f, err := rlconfig.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	c, err := rlconfig.Build(false, f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// start is a minute boundary, so that fixed windows begin with the test.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, yaml string) (*Limiter, *core.ManualClock) {
	t.Helper()
	clk := core.NewManualClock(start)
	o := Options{Clock: clk}
	if testRedis != nil {
		o.Redis, o.RedisPrefix = testRedis, "test:"+t.Name()
	}
	l, err := New(mustConfig(t, yaml), o)
	if err != nil {
		t.Fatal(err)
	}
	return l, clk
}

// req builds a request of descriptors "k=v,k2=v2;k3=v3".
func req(domain, descs string, hits uint32) *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range strings.Split(descs, ";") {
		var desc rlv3.RateLimitDescriptor
		for _, p := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(p, "=")
			desc.Entries = append(desc.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		r.Descriptors = append(r.Descriptors, &desc)
	}
	return r
}

// want is one descriptor's expected status: code, remaining, seconds until
// reset.
type want struct {
	code      pb.RateLimitResponse_Code
	remaining uint32
	reset     time.Duration
}

var (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

func expect(t *testing.T, l *Limiter, r *pb.RateLimitRequest, overall pb.RateLimitResponse_Code, ws ...want) *pb.RateLimitResponse {
	t.Helper()
	resp, err := l.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if resp.OverallCode != overall {
		t.Errorf("overall %v, want %v", resp.OverallCode, overall)
	}
	if len(resp.Statuses) != len(ws) {
		t.Fatalf("%d statuses, want %d", len(resp.Statuses), len(ws))
	}
	for i, w := range ws {
		s := resp.Statuses[i]
		if w.code == -1 {
			continue
		}
		if s.Code != w.code || s.LimitRemaining != w.remaining || s.DurationUntilReset.AsDuration() != w.reset {
			t.Errorf("status %d: %v remaining %d reset %v, want %v %d %v", i, s.Code, s.LimitRemaining, s.DurationUntilReset.AsDuration(), w.code, w.remaining, w.reset)
		}
	}
	return resp
}

func header(resp *pb.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}

func TestFixedWindow(t *testing.T) {
	l, clk := newLimiter(t, testConfig)
	for i := range 5 {
		resp := expect(t, l, req("d", "a=1", 0), ok, want{ok, uint32(4 - i), time.Minute})
		if i == 0 {
			if got, want := header(resp, "ratelimit-policy"), `"a";q=5;w=60`; got != want {
				t.Errorf("RateLimit-Policy %q, want %q", got, want)
			}
			if got, want := header(resp, "ratelimit"), `"a";r=4;t=60`; got != want {
				t.Errorf("RateLimit %q, want %q", got, want)
			}
		}
	}
	clk.Advance(20 * time.Second)
	resp := expect(t, l, req("d", "a=1", 0), over, want{over, 0, 40 * time.Second})
	if got, want := header(resp, "retry-after"), "40"; got != want {
		t.Errorf("Retry-After %q, want %q", got, want)
	}
	if got, want := header(resp, "ratelimit"), `"a";r=0;t=40`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
	// Another key has its own count; the next window starts afresh.
	expect(t, l, req("d", "a=2", 0), ok, want{ok, 4, 40 * time.Second})
	clk.Advance(40 * time.Second)
	expect(t, l, req("d", "a=1", 0), ok, want{ok, 4, time.Minute})
}

// A request's descriptors are decided all or nothing; a denied request
// counts nothing.
func TestAllOrNothing(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	expect(t, l, req("d", "a=1;b=1", 0), ok, want{ok, 4, time.Minute}, want{ok, 0, time.Minute})
	for range 3 {
		expect(t, l, req("d", "a=1;b=1", 0), over, want{ok, 4, time.Minute}, want{over, 0, time.Minute})
	}
	// a counted only the allowed request.
	expect(t, l, req("d", "a=1", 0), ok, want{ok, 3, time.Minute})
}

func TestHitsAddend(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	expect(t, l, req("d", "a=1", 3), ok, want{ok, 2, time.Minute})
	// Over the limit: nothing counted.
	expect(t, l, req("d", "a=1", 3), over, want{over, 0, time.Minute})
	// A descriptor's own hits_addend wins over the request's.
	r := req("d", "a=1", 3)
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(2)
	expect(t, l, r, ok, want{ok, 0, time.Minute})
	// 0 is a check: over the limit when one more unit would be, counting
	// nothing.
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	expect(t, l, r, over, want{over, 0, time.Minute})
	r = req("d", "a=2", 0)
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	expect(t, l, r, ok, want{ok, 5, 0})
	expect(t, l, req("d", "a=2", 0), ok, want{ok, 4, time.Minute})
	// A cost above the limit can never fit; nothing is counted.
	r = req("d", "a=3;b=3", 0)
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(6)
	expect(t, l, r, over, want{over, 0, 0}, want{ok, 1, 0})
	expect(t, l, req("d", "b=3", 0), ok, want{ok, 0, time.Minute})
}

func TestUnlimitedUnknownAndZero(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	expect(t, l, req("d", "unl=1;nothing=1", 0), ok, want{ok, math.MaxUint32, 0}, want{ok, 0, 0})
	expect(t, l, req("other", "a=1", 0), ok, want{ok, 0, 0})
	resp := expect(t, l, req("d", "zero=1;a=1", 0), over, want{over, 0, time.Second}, want{ok, 5, 0})
	if got := resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(); got != 0 {
		t.Errorf("zero: current limit %d", got)
	}
}

func TestShadowMode(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	expect(t, l, req("d", "shadow=1", 0), ok, want{ok, 0, time.Minute})
	resp := expect(t, l, req("d", "shadow=1;a=1", 0), ok, want{ok, 0, time.Minute}, want{ok, 4, time.Minute})
	if got, want := header(resp, "ratelimit"), `"a";r=4;t=60`; got != want {
		t.Errorf("RateLimit %q, want %q (shadow limits left out)", got, want)
	}
	// A shadow limit is counted only when the request is allowed.
	expect(t, l, req("d", "shadow=2;b=1", 0), ok, want{ok, 0, time.Minute}, want{ok, 0, time.Minute})
	expect(t, l, req("d", "shadow=3;b=1", 0), over, want{ok, 1, 0}, want{over, 0, time.Minute})
	expect(t, l, req("d", "shadow=3", 0), ok, want{ok, 0, time.Minute})
}

func TestReplaces(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	expect(t, l, req("d", "general=1", 0), ok, want{ok, 0, time.Minute})
	expect(t, l, req("d", "general=1", 0), over, want{over, 0, time.Minute})
	// special replaces general: general is not applied, nor counted.
	expect(t, l, req("d", "general=1;special=1", 0), ok, want{ok, 0, 0}, want{ok, 9, time.Minute})
}

// Two descriptors of one limit: one key sums the costs; two keys are
// decided in rounds, the first given back when the second denies.
func TestOneLimitTwice(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	expect(t, l, req("d", "a=1;a=1", 2), ok, want{ok, 1, time.Minute}, want{ok, 1, time.Minute})
	expect(t, l, req("d", "a=1;a=1", 1), over, want{over, 0, time.Minute}, want{over, 0, time.Minute})
	expect(t, l, req("d", "b=2;b=1;a=9", 0), ok, want{ok, 0, time.Minute}, want{ok, 0, time.Minute}, want{ok, 4, time.Minute})
	expect(t, l, req("d", "a=9;b=3;b=1", 0), over, want{ok, 3, time.Minute}, want{ok, 0, time.Minute}, want{over, 0, time.Minute})
	// b=3 and a=9 were given back.
	expect(t, l, req("d", "b=3", 0), ok, want{ok, 0, time.Minute})
	expect(t, l, req("d", "a=9", 0), ok, want{ok, 3, time.Minute})
}

func TestOverride(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	r := req("d", "a=1", 0)
	r.Descriptors[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_SECOND}
	expect(t, l, r, ok, want{ok, 1, time.Second})
	expect(t, l, r, ok, want{ok, 0, time.Second})
	expect(t, l, r, over, want{over, 0, time.Second})
	// The file's limit of the same descriptor is another count.
	expect(t, l, req("d", "a=1", 0), ok, want{ok, 4, time.Minute})
	r.Descriptors[0].Limit.Unit = typev3.RateLimitUnit_UNKNOWN
	if _, err := l.ShouldRateLimit(context.Background(), r); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unit UNKNOWN: %v, want InvalidArgument", err)
	}
}

func TestInvalid(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	for _, r := range []*pb.RateLimitRequest{
		{Descriptors: req("d", "a=1", 0).Descriptors},
		{Domain: "d"},
		{Domain: "d", Descriptors: make([]*rlv3.RateLimitDescriptor, MaxDescriptors+1)},
	} {
		if _, err := l.ShouldRateLimit(context.Background(), r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", r, err)
		}
	}
}

// SetConfig keeps every limit's usage; an algorithm's change starts afresh.
func TestSetConfigKeepsUsage(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	for range 3 {
		expect(t, l, req("d", "a=1", 0), ok, want{}.any())
	}
	expect(t, l, req("d", "tb=1", 2), ok, want{ok, 0, 2 * time.Second})
	next := strings.Replace(testConfig, "{unit: minute, requests_per_unit: 5}", "{unit: minute, requests_per_unit: 10}", 1)
	next = strings.Replace(next, "algorithm: token-bucket, burst: 2", "algorithm: sliding-window", 1)
	if err := l.SetConfig(mustConfig(t, next)); err != nil {
		t.Fatal(err)
	}
	expect(t, l, req("d", "a=1", 0), ok, want{ok, 6, time.Minute})
	expect(t, l, req("d", "tb=1", 2), ok, want{ok, 8, 20 * time.Second})
}

// any marks a status not checked.
func (want) any() want { return want{code: -1} }

// Descriptors of other costs are decided together all the same.
func TestMixedCosts(t *testing.T) {
	l, _ := newLimiter(t, testConfig)
	r := req("d", "a=1;b=1", 0)
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(4)
	expect(t, l, r, ok, want{ok, 1, time.Minute}, want{ok, 0, time.Minute})
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(1)
	r.Descriptors[1].Entries[0].Value = "2"
	expect(t, l, r, ok, want{ok, 0, time.Minute}, want{ok, 0, time.Minute})
	// b=3 is free, a=1 is not: neither counts.
	r.Descriptors[1].Entries[0].Value = "3"
	expect(t, l, r, over, want{over, 0, time.Minute}, want{ok, 1, 0})
	expect(t, l, req("d", "b=3", 0), ok, want{ok, 0, time.Minute})
}
