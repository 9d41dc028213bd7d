package observe

import (
	"context"
	"errors"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Shadow is a [core.Limiter] that enforces one limiter and, next to it, asks a
// candidate what it would have decided, so that a new limit can be watched
// on live traffic before it is enforced.
//
// Every call goes to the enforced limiter, whose Decision and error are
// returned as they are. The same call then goes to the candidate, and its
// answer, or its error, is reported to the [Observer] as an [Event] with
// Shadow set, never returned. The candidate counts as if it alone were
// enforcing: it sees every request and counts the ones it allows, so its
// denials are exactly those it would have made in production.
//
// The enforced decisions are not reported: wrap the enforced limiter in a
// [Limiter] ([New], with the same observer) to see both, as the example of
// [NewShadow] does.
//
// A Shadow is safe for concurrent use. Create one with [NewShadow].
type Shadow struct {
	// This is the adapters' dry run, for any Limiter, side by side with the real
	// policy. The candidate sees every request whatever the enforced limiter
	// decided. Observe the enforced limiter inside the Shadow rather than around
	// it, because the Shadow's calls take the candidate's time too.

	enforced  core.Limiter
	lay       core.LayeredLimiter // enforced, when it is layered
	ref       core.Refunder       // enforced, when it can refund
	pol       core.Policy         // enforced's, when it has one
	candidate core.Limiter
	w         observer
}

var (
	_ core.Limiter        = (*Shadow)(nil)
	_ core.LayeredLimiter = (*Shadow)(nil)
	_ core.Refunder       = (*Shadow)(nil)
)

// NewShadow returns a limiter that enforces enforced and reports to obs
// what candidate would have decided. The options describe the candidate's
// events: [WithPolicyName] names it (default: the candidate's policy name).
// It fails if a limiter or obs is nil or an option is invalid.
func NewShadow(enforced, candidate core.Limiter, obs Observer, opts ...Option) (*Shadow, error) {
	if enforced == nil {
		return nil, errors.New("observe: NewShadow: an enforced limiter is required")
	}
	w, err := newObserver("NewShadow", candidate, obs, opts)
	if err != nil {
		return nil, err
	}
	s := &Shadow{enforced: enforced, candidate: candidate, w: w}
	s.ref, _ = core.As[core.Refunder](enforced)
	s.lay, _ = core.As[core.LayeredLimiter](enforced)
	if p, ok := core.As[core.PolicyReporter](enforced); ok {
		s.pol = p.Policy()
	}
	return s, nil
}

// Policy returns the enforced limiter's policy, or the zero Policy when it
// has none (see [core.PolicyReporter]).
func (s *Shadow) Policy() core.Policy { return s.pol }

// Allow is shorthand for AllowN(ctx, key, 1).
func (s *Shadow) Allow(ctx context.Context, key string) (core.Decision, error) {
	return s.AllowN(ctx, key, 1)
}

// AllowN returns what the enforced limiter's AllowN returns, after asking
// the candidate's AllowN and reporting its answer.
func (s *Shadow) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	d, err := s.enforced.AllowN(ctx, key, n)
	s.consult(ctx, OpAllow, key, n)
	return d, err
}

// Peek returns what the enforced limiter's Peek returns, after asking the
// candidate's Peek and reporting its answer.
func (s *Shadow) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	d, err := s.enforced.Peek(ctx, key, n)
	s.consult(ctx, OpPeek, key, n)
	return d, err
}

// AllowLayers returns what the enforced limiter's AllowLayers returns,
// when it is a [core.LayeredLimiter], after asking the candidate's AllowN and
// reporting its answer, as AllowN does. An enforced limiter that is not
// layered counts as one layer: AllowLayers returns [core.MostRestrictive] of
// its AllowN Decision, which HTTP middleware writes exactly as the
// Decision alone. (A Shadow has these methods whatever it enforces, so
// that enforcing a layered limiter does not hide its layers; see
// [core.Failover] for why.)
func (s *Shadow) AllowLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	ld, err := layersOf(ctx, s.enforced, s.lay, key, n, true)
	s.consult(ctx, OpAllow, key, n)
	return ld, err
}

// PeekLayers returns what the enforced limiter's PeekLayers returns (see
// [Shadow.AllowLayers]), after asking the candidate's Peek and reporting
// its answer.
func (s *Shadow) PeekLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	ld, err := layersOf(ctx, s.enforced, s.lay, key, n, false)
	s.consult(ctx, OpPeek, key, n)
	return ld, err
}

// Reset resets key in both limiters and returns the enforced limiter's
// error; the candidate's is reported.
func (s *Shadow) Reset(ctx context.Context, key string) error {
	err := s.enforced.Reset(ctx, key)
	start := s.w.now()
	cerr := s.candidate.Reset(ctx, key)
	s.w.report(ctx, OpReset, key, 0, core.Decision{}, cerr, start, true)
	return err
}

// Refund gives back n units in the enforced limiter and returns its error,
// or an error wrapping [core.ErrNoRefund] when it cannot refund (see
// [core.As]). The candidate is not refunded and nothing is reported: it
// decided the request on its own, and giving back units it may have denied
// would give it units of other requests. A candidate watched on a route
// that refunds therefore reports more denials than it would make enforced.
func (s *Shadow) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	if s.ref == nil {
		return noRefund("shadow", s.enforced)
	}
	return s.ref.Refund(ctx, key, n, elapsed)
}

// Unwrap returns the enforced limiter, the one Shadow passes requests to
// and whose answers it returns; the candidate is not unwrapped (see
// [core.Wrapper]).
func (s *Shadow) Unwrap() core.Limiter { return s.enforced }

// consult asks the candidate with decide (its AllowN or Peek, as op says)
// and reports its answer, timed.
func (s *Shadow) consult(ctx context.Context, op Op, key string, n int64) {
	start := s.w.now()
	var cd core.Decision
	var cerr error
	if op == OpAllow {
		cd, cerr = s.candidate.AllowN(ctx, key, n)
	} else {
		cd, cerr = s.candidate.Peek(ctx, key, n)
	}
	s.w.report(ctx, op, key, n, cd, cerr, start, true)
}
