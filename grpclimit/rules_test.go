package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/rules"
)

// A rule set as the interceptor's limiter: each call decided by the rule
// its full method matches, its limits in the metadata; a method no rule
// names is not limited.
func TestRuleSet(t *testing.T) {
	clock := core.NewManualClock(start)
	set, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: other
    match: {routes: [/test.Echo/Other]}
    limits:
      - {name: per-peer, rate: 1/10s algorithm=fixed-window, key: peer}
      - {name: all, rate: 100/1m algorithm=fixed-window, key: route}
`))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := rules.NewLimiter(set, core.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	conn, _ := serve(t, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, grpclimit.WithClock(clock))))
	ctx := context.Background()
	_, md, err := unary(ctx, conn, methodOther, "x")
	if err != nil {
		t.Fatalf("Other: %v", err)
	}
	checkMD(t, "Other", md, map[string]string{"ratelimit-policy": `"per-peer";q=1;w=10, "all";q=100;w=60`})
	_, _, err = unary(ctx, conn, methodOther, "x")
	checkRefusal(t, "second Other", err, refusal{codes.ResourceExhausted, 10, "policy:per-peer"})
	for i := range 3 {
		if _, _, err := unary(ctx, conn, methodSay, "x"); err != nil {
			t.Fatalf("Say %d (no rule): %v", i+1, err)
		}
	}
	clock.Advance(10 * time.Second)
	if _, _, err := unary(ctx, conn, methodOther, "x"); err != nil {
		t.Fatalf("Other after 10s: %v", err)
	}
}
