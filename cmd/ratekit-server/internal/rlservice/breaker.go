package rlservice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
)

// The circuit breaker in front of Redis. Every request decided on Redis
// goes through one core.Failover (failing closed) whose remote limiter,
// redisGate, runs the request's decision: so core's breaker counts the
// outages in a row, across domains and limits (Redis is one store), and
// once it opens, requests are decided at once by their domains' failure
// policies instead of each waiting for Redis's timeout, until a probe
// after the cool-down finds Redis again.

// gateKey carries a request's decision to redisGate through the context.
type gateKey struct{}

// gateRun is one request's decision on Redis.
type gateRun struct {
	l      *Limiter
	st     *state
	items  []item
	called bool
	denied bool
	err    error // the decision's
}

// redisGate is the breaker's remote limiter: its AllowN runs the request's
// decision that the context carries, and returns its error.
type redisGate struct{}

func (redisGate) AllowN(ctx context.Context, _ string, _ int64) (core.Decision, error) {
	g, _ := ctx.Value(gateKey{}).(*gateRun)
	if g == nil {
		return core.Decision{}, errors.New("rlservice: breaker: no decision to run")
	}
	g.called = true
	g.denied, g.err = g.l.decide(g.st, g.items)
	return core.Decision{Allowed: true}, g.err
}

func (redisGate) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{Allowed: true}, nil
}

func (redisGate) Reset(context.Context, string) error { return nil }

// newBreaker returns the breaker of o's Redis.
func newBreaker(o Options) (*core.Failover, error) {
	failures, coolDown := o.BreakerFailures, o.BreakerCoolDown
	if failures == 0 {
		failures = DefaultBreakerFailures
	}
	if coolDown == 0 {
		coolDown = DefaultBreakerCoolDown
	}
	opts := []core.FailoverOption{core.WithErrorPolicy(core.FailClosed()), core.WithClock(o.Clock), core.WithBreaker(failures, coolDown)}
	if o.OnBreaker != nil {
		opts = append(opts, core.WithBreakerHook(o.OnBreaker))
	}
	b, err := core.NewFailover(redisGate{}, opts...)
	if err != nil {
		return nil, fmt.Errorf("rlservice: %w", err)
	}
	return b, nil
}

// decideRedis decides items on Redis through the breaker: decide's result,
// or the breaker's error when it is open and Redis was not asked.
func (l *Limiter) decideRedis(ctx context.Context, st *state, items []item) (bool, error) {
	g := gatePool.Get().(*gateRun)
	*g = gateRun{l: l, st: st, items: items}
	_, err := l.breaker.AllowN(context.WithValue(ctx, gateKey{}, g), "redis", 1)
	denied := false
	if g.called {
		denied, err = g.denied, g.err
	}
	*g = gateRun{}
	gatePool.Put(g)
	return denied, err
}

var gatePool = sync.Pool{New: func() any { return new(gateRun) }}

// Defaults of the breaker, core.Failover's.
const (
	// DefaultBreakerFailures is how many Redis outages in a row open the
	// breaker unless Options.BreakerFailures says otherwise.
	DefaultBreakerFailures = 3
	// DefaultBreakerCoolDown is how long the breaker stays open before a
	// request probes Redis unless Options.BreakerCoolDown says otherwise.
	DefaultBreakerCoolDown = 5 * time.Second
)
