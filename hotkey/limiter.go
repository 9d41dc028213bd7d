package hotkey

import (
	"context"
	"fmt"

	"github.com/ratekit/ratekit/core"
)

// decideFunc is AllowN or Peek of a limiter, so that one body serves both.
type decideFunc func(l core.Limiter, ctx context.Context, key string, n int64) (core.Decision, error)

// checkRequest validates a request's key and cost as core's limiters do,
// wrapping the same sentinel errors.
func checkRequest(key string, n, maxCost int64) error {
	switch {
	case key == "":
		return fmt.Errorf("hotkey: %w", core.ErrEmptyKey)
	case n <= 0:
		return fmt.Errorf("hotkey: cost %d: %w", n, core.ErrInvalidCost)
	case n > maxCost:
		return fmt.Errorf("hotkey: cost %d, at most %d: %w", n, maxCost, core.ErrCostTooHigh)
	}
	return nil
}

// policyOf returns l's policy if it reports a valid one.
func policyOf(l core.Limiter) (core.Policy, bool) {
	if p, ok := l.(interface{ Policy() core.Policy }); ok {
		if pol := p.Policy(); pol.Validate() == nil {
			return pol, true
		}
	}
	return core.Policy{}, false
}

// refunderOf returns l as a Refunder if it can refund, else nil.
func refunderOf(l core.Limiter) core.Refunder {
	r, _ := core.AsRefunder(l)
	return r
}

// noRefund returns core.ErrNoRefund, wrapped, naming the limiter that
// cannot refund.
func noRefund(who string, l core.Limiter) error {
	return fmt.Errorf("hotkey: %s: %T: %w", who, l, core.ErrNoRefund)
}
