package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PlanFunc returns the plan a key is on, one of the names given to
// [NewTiered]: looked up from the API key's account, read from the context
// (set by an authentication middleware), or taken from a header that a
// trusted gateway sets. It is called once per request and must be safe for
// concurrent use.
type PlanFunc func(ctx context.Context, key string) (plan string, err error)

// ErrUnknownPlan reports a plan, returned by a [PlanFunc], that the
// [Tiered] limiter has no policy for.
var ErrUnknownPlan = errors.New("unknown plan")

// Tiered is a [Limiter] that chooses the policy of each request by its key's
// plan ("free", "pro"). It holds one [Memory] limiter per plan, not one per
// user, so memory is bounded by the number of plans times the maximum number
// of keys ([WithMaxKeys]).
//
// Each request is decided, and counted, by the plan its key is on at that
// moment ([PlanFunc] is asked every time), so a plan change applies to the
// next request. Each plan counts only the usage it decided: a key never gets
// more from one plan than that plan allows, and a key whose plan flips gets
// at most the sum of its plans' limits, whoever picks the plan (a header
// included). A key's first request on a new plan starts from that plan's
// count for it, empty unless it was on that plan within the last window. To
// give an upgraded key a fresh start, call [Tiered.Reset] when its plan
// changes.
//
// A cost above the plan's capacity is [ErrCostTooHigh]. A PlanFunc error, or
// a plan with no policy ([ErrUnknownPlan]), is returned wrapped, with a zero
// Decision.
//
// A Tiered is safe for concurrent use. Create one with [NewTiered].
type Tiered struct {
	plans  map[string]*Memory
	planOf PlanFunc
}

var (
	_ Limiter        = (*Tiered)(nil)
	_ Refunder       = (*Tiered)(nil)
	_ PartialLimiter = (*Tiered)(nil)
)

// NewTiered returns a limiter that enforces plans[planOf(ctx, key)] on each
// request. Each plan's policy gets the plan's name as its Name when it has
// none (and the name is a valid policy name), so that headers name the
// plan; opts configure every plan's [Memory] limiter ([WithMaxKeys] counts
// per plan). It fails if there is no plan, a plan has an empty name or an
// invalid policy, planOf is nil, or an option is invalid.
func NewTiered(plans map[string]Policy, planOf PlanFunc, opts ...Option) (*Tiered, error) {
	if len(plans) == 0 {
		return nil, errors.New("core: NewTiered: at least one plan is required")
	}
	if planOf == nil {
		return nil, errors.New("core: NewTiered: a PlanFunc is required")
	}
	t := &Tiered{plans: make(map[string]*Memory, len(plans)), planOf: planOf}
	for name, p := range plans {
		if name == "" {
			return nil, errors.New("core: NewTiered: a plan has an empty name")
		}
		if p.Name == "" && checkName(name) == nil {
			p.Name = name
		}
		m, err := New(p, opts...)
		if err != nil {
			return nil, fmt.Errorf("core: NewTiered: plan %q: %w", name, err)
		}
		t.plans[name] = m
	}
	return t, nil
}

// Plans returns the plans' policies by plan name, in a new map.
func (t *Tiered) Plans() map[string]Policy {
	ps := make(map[string]Policy, len(t.plans))
	for name, m := range t.plans {
		ps[name] = m.Policy()
	}
	return ps
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (t *Tiered) Allow(ctx context.Context, key string) (Decision, error) {
	return t.AllowN(ctx, key, 1)
}

// AllowN asks for key's plan and decides by that plan's policy: n units
// are counted if they fit, nothing otherwise. See [Limiter].
func (t *Tiered) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	m, err := t.limiter(ctx, key, n)
	if err != nil {
		return Decision{}, err
	}
	return m.AllowN(ctx, key, n)
}

// AllowAtMost counts as many of n units as fit for key under its plan's
// limiter now and returns how many; see [PartialLimiter].
func (t *Tiered) AllowAtMost(ctx context.Context, key string, n int64) (Decision, int64, error) {
	m, err := t.limiter(ctx, key, n)
	if err != nil {
		return Decision{}, 0, err
	}
	return m.AllowAtMost(ctx, key, n)
}

// Peek reports key's state under its plan's limiter as it is, and whether
// AllowN would allow n units now, counting nothing; see [Limiter].
func (t *Tiered) Peek(ctx context.Context, key string, n int64) (Decision, error) {
	m, err := t.limiter(ctx, key, n)
	if err != nil {
		return Decision{}, err
	}
	return m.Peek(ctx, key, n)
}

// Refund asks for key's plan and gives back n units in that plan's limiter
// (see [Refunder]). Units are given back by the plan the key is on when
// Refund is called: if it moved to another plan since AllowN counted them,
// they stay counted in the old plan and the new one gives back up to n units
// of the key's other requests there. Errors are those of AllowN and a
// negative elapsed ([ErrInvalidElapsed]).
func (t *Tiered) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	if elapsed < 0 {
		return checkRefund(key, n, max(n, 1), elapsed)
	}
	m, err := t.limiter(ctx, key, n)
	if err != nil {
		return err
	}
	return m.Refund(ctx, key, n, elapsed)
}

// Reset forgets key in every plan, without asking for its plan. It fails
// for an empty key; a plan's limiter that fails is reported, joined with the
// others' errors, after every plan has been reset.
func (t *Tiered) Reset(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("core: %w", ErrEmptyKey)
	}
	var errs []error
	for name, m := range t.plans {
		if err := m.Reset(ctx, key); err != nil {
			errs = append(errs, fmt.Errorf("core: tiered: reset plan %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// limiter returns the limiter of key's plan, checking the request first so
// that the PlanFunc never sees an empty key.
func (t *Tiered) limiter(ctx context.Context, key string, n int64) (*Memory, error) {
	if key == "" || n <= 0 {
		return nil, checkRequest(key, n, n)
	}
	plan, err := t.planOf(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("core: tiered: plan of key: %w", err)
	}
	m, ok := t.plans[plan]
	if !ok {
		return nil, fmt.Errorf("core: tiered: plan %q: %w", plan, ErrUnknownPlan)
	}
	return m, nil
}
