package connectlimit_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/ratekit/ratekit/connectlimit"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/rules"
)

// A rule set as the interceptor's limiter: each call decided by the rule
// its procedure matches, every limit of the rule in the headers and the
// refusal naming the one that refused; a procedure no rule names is not
// limited.
func TestRuleSet(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: say
    match: {routes: [/test.v1.Echo/Say]}
    limits:
      - {name: per-peer, rate: 1/10s algorithm=fixed-window, key: peer}
      - {name: all, rate: 100/1m algorithm=fixed-window, key: route}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			clock := core.NewManualClock(start)
			lim, err := rules.NewLimiter(set, core.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			s := newServer(t, connectlimit.NewInterceptor(lim, connectlimit.WithClock(clock)))
			c := s.say(proto.opts)
			policy := []string{`"per-peer";q=1;w=10, "all";q=100;w=60`}
			res, err := sayCall(c, "hi")
			if err != nil {
				t.Fatalf("first Say: %v", err)
			}
			checkHeaders(t, "first Say", rateHeaders(res.Header()), map[string][]string{
				"Ratelimit": {`"per-peer";r=0;t=10, "all";r=99;t=60`}, "Ratelimit-Policy": policy,
			})
			_, err = sayCall(c, "hi")
			checkRefusal(t, "second Say", err, refusal{
				code: connect.CodeResourceExhausted, retry: 10, quota: []string{"policy:per-peer"},
				meta: map[string][]string{
					"Ratelimit": {`"per-peer";r=0;t=10, "all";r=99;t=60`}, "Ratelimit-Policy": policy, "Retry-After": {"10"},
				},
			})
			for i := range 3 {
				if _, err := uploadCall(s.upload(proto.opts), 1); err != nil {
					t.Fatalf("Upload %d (no rule): %v", i+1, err)
				}
			}
			clock.Advance(10 * time.Second)
			if _, err := sayCall(c, "hi"); err != nil {
				t.Fatalf("Say after 10s: %v", err)
			}
		})
	}
}
