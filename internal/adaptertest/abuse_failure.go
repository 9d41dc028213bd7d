package adaptertest

import (
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// The abuse table's store-failure part: what a client gets while the store
// is out and the route fails closed. It is one answer whoever applies the
// error policy, the middleware or a core.Failover given as its limiter: 503
// with Retry-After, never a 429 (the client exceeded nothing), and the
// error reaches the hook.

func init() { abuseParts = append(abuseParts, failureCases) }

func failureCases() []Case {
	unavailable := func(retry string, errs int) Step {
		return Step{Want: Want{Status: 503, Problem: httplimit.ProblemUnavailable, RetryAfter: retry, NoRate: true, Hooks: true, Errors: errs}}
	}
	return []Case{{
		Name: "abuse/a Failover failing closed answers 503 with its breaker's cool-down, never 429",
		App: func(t *testing.T, env *Env) *App {
			f, err := core.NewFailover(Failing{}, core.WithErrorPolicy(core.FailClosed()),
				core.WithBreaker(1, 30*time.Second), core.WithClock(env.Clock))
			if err != nil {
				t.Fatal(err)
			}
			return use(f, opts(env)...)
		},
		Steps: func() []Step {
			s := []Step{unavailable("30", 1), unavailable("20", 2)}
			s[1].Req.Advance = 10 * time.Second // the breaker still open
			return s
		}(),
	}, {
		Name: "abuse/the middleware failing closed over a Failover failing open serves",
		App: func(t *testing.T, env *Env) *App {
			f, err := core.NewFailover(Failing{}, core.WithClock(env.Clock))
			if err != nil {
				t.Fatal(err)
			}
			return use(f, opts(env, httplimit.WithErrorPolicy(core.FailClosed()))...)
		},
		// The Failover decided the outage: the middleware's policy has
		// nothing left to decide.
		Steps: steps(with(ok, func(w *Want) { w.NoRate = true; hooks(0, 0)(w) })),
	}}
}
