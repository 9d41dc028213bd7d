package rlservice

import (
	"context"
	"errors"
	"fmt"
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
	run    func() error
	called bool
	err    error // run's
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
	g.err = g.run()
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

// throughBreaker runs decide through the breaker: it returns decide's
// error, or the breaker's when it is open and decide was not run.
func (l *Limiter) throughBreaker(ctx context.Context, decide func() error) error {
	g := &gateRun{run: decide}
	_, err := l.breaker.AllowN(context.WithValue(ctx, gateKey{}, g), "redis", 1)
	if g.called {
		return g.err
	}
	return err
}

// Defaults of the breaker, core.Failover's.
const (
	// DefaultBreakerFailures is how many Redis outages in a row open the
	// breaker unless Options.BreakerFailures says otherwise.
	DefaultBreakerFailures = 3
	// DefaultBreakerCoolDown is how long the breaker stays open before a
	// request probes Redis unless Options.BreakerCoolDown says otherwise.
	DefaultBreakerCoolDown = 5 * time.Second
)
