package httplimit

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Every value carved from the slabs keeps its bytes while thousands more
// are carved after it, and appending to one never writes into the next.
func TestSlabValuesStay(t *testing.T) {
	sc := new(headerScratch)
	s := &httpSink{h: make(http.Header), sc: sc}
	var kept [][]string
	var want []string
	for i := range 5000 {
		v := fmt.Sprintf(`"p%d";r=%d;t=%d`, i%7, i*37, i%61)
		if i%97 == 0 {
			v = "" // an empty value carves no bytes
		}
		kept = append(kept, s.value([]byte(v)))
		want = append(want, v)
	}
	for i, v := range kept {
		if len(v) != 1 || cap(v) != 1 || v[0] != want[i] {
			t.Fatalf("value %d is %q (cap %d), want [%q] (cap 1)", i, v, cap(v), want[i])
		}
	}
	grown := append(kept[10], "extra")
	if kept[11][0] != want[11] || len(grown) != 2 {
		t.Fatalf("appending to value 10 changed value 11 to %q", kept[11][0])
	}
}

// A value longer than a slab takes is allocated alone; one that does not
// fit what is left of a slab starts the next.
func TestSlabLongValues(t *testing.T) {
	sc := new(headerScratch)
	s := &httpSink{h: make(http.Header), sc: sc}
	long := strings.Repeat("x", maxSlabValue+1)
	if v := s.value([]byte(long)); v[0] != long {
		t.Fatalf("long value %q", v[0])
	}
	if sc.slab != nil {
		t.Fatal("a long value was carved from a slab")
	}
	first := s.value([]byte("a"))
	full := sc.slab
	full.nb = len(full.b) - 3 // 3 bytes left
	v := s.value([]byte("abcd"))
	if sc.slab == full || v[0] != "abcd" || first[0] != "a" {
		t.Fatalf("a value that does not fit stayed on the full slab: %q, %q", v[0], first[0])
	}
}

// Carving is one allocation per slab: none per value, counted on one
// scratch, without the pool the race detector empties at random.
func TestSlabAllocations(t *testing.T) {
	sc := new(headerScratch)
	s := &httpSink{h: make(http.Header), sc: sc}
	b := []byte(`"default";r=999999999;t=60`)
	if a := testing.AllocsPerRun(4*slabValues, func() { s.value(b) }); a != 0 {
		t.Errorf("%v allocations per value, want 0 (one per %d values)", a, slabValues)
	}
	alone := &httpSink{h: make(http.Header)}
	if a := testing.AllocsPerRun(100, func() { keptValue = alone.value(b) }); a < 1 {
		t.Errorf("%v allocations per value without a scratch, want at least 1", a)
	}
}

// keptValue keeps a value, as a response's header does.
var keptValue []string

// Headers written concurrently through the pooled scratches keep their
// values: each goroutine's headers are read after every goroutine is done
// (the race detector checks the carving shares nothing it writes).
func TestSlabConcurrentHeaders(t *testing.T) {
	const goroutines, each = 8, 300
	headers := make([][]http.Header, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				h := make(http.Header)
				sc := scratchPool.Get().(*headerScratch)
				sc.hs = httpSink{h: h, sc: sc}
				sc.hs.addBytes("Ratelimit", fmt.Appendf(nil, "g%d;r=%d", g, i))
				sc.hs = httpSink{}
				scratchPool.Put(sc)
				headers[g] = append(headers[g], h)
			}
		})
	}
	wg.Wait()
	for g, hs := range headers {
		for i, h := range hs {
			if got, want := h.Get("Ratelimit"), fmt.Sprintf("g%d;r=%d", g, i); got != want {
				t.Fatalf("goroutine %d header %d: %q, want %q", g, i, got, want)
			}
		}
	}
}

// The RateLimit value carved last serves the next response of the same
// policy, r and t as it is, and any other one is formatted anew.
func TestRateValueCache(t *testing.T) {
	sc := newHeaderScratch()
	sc.hs.reset(make(http.Header), sc)
	a := newPolicyHeaders(core.Policy{Name: "a", Limit: 10, Window: time.Minute})
	b := newPolicyHeaders(core.Policy{Name: "b", Limit: 10, Window: time.Minute})
	first := sc.rateValue(a, 9, 6)
	for _, tc := range []struct {
		ph     *policyHeaders
		r, t   int64
		want   string
		reused bool
	}{
		{a, 9, 6, `"a";r=9;t=6`, true},
		{a, 8, 6, `"a";r=8;t=6`, false},
		{a, 8, 12, `"a";r=8;t=12`, false},
		{b, 8, 12, `"b";r=8;t=12`, false},
		{a, 9, 6, `"a";r=9;t=6`, false},
	} {
		v := sc.rateValue(tc.ph, tc.r, tc.t)
		if len(v) != 1 || v[0] != tc.want {
			t.Fatalf("rateValue(%s, %d, %d) = %q, want [%q]", tc.ph.policy.Name, tc.r, tc.t, v, tc.want)
		}
		if reused := &v[0] == &first[0]; reused != tc.reused {
			t.Errorf("rateValue(%s, %d, %d): the first value reused %v, want %v", tc.ph.policy.Name, tc.r, tc.t, reused, tc.reused)
		}
	}
	if first[0] != `"a";r=9;t=6` {
		t.Errorf("the first value changed to %q", first[0])
	}
}

// rateBytes formats a value anew whenever the policy, r or t differ from
// the last one's, and keeps none that does not fit its buffer.
func TestRateBytesCache(t *testing.T) {
	sc := newHeaderScratch()
	a := newPolicyHeaders(core.Policy{Name: "a", Limit: 10, Window: time.Minute})
	long := newPolicyHeaders(core.Policy{Name: strings.Repeat("n", 120), Limit: 10, Window: time.Minute})
	for _, tc := range []struct {
		ph   *policyHeaders
		r, t int64
		want string
	}{
		{a, 9, 6, `"a";r=9;t=6`},
		{a, 9, 6, `"a";r=9;t=6`},
		{a, 8, 6, `"a";r=8;t=6`},
		{a, 8, 60, `"a";r=8;t=60`},
		{long, 8, 60, `"` + strings.Repeat("n", 120) + `";r=8;t=60`},
		{long, 8, 60, `"` + strings.Repeat("n", 120) + `";r=8;t=60`},
		{a, 8, 60, `"a";r=8;t=60`},
	} {
		if got := sc.rateBytes(tc.ph, tc.r, tc.t); string(got) != tc.want {
			t.Fatalf("rateBytes(%.5s, %d, %d) = %q, want %q", tc.ph.policy.Name, tc.r, tc.t, got, tc.want)
		}
	}
}
