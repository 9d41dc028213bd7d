package hotkey

import (
	"fmt"

	"github.com/ratekit/ratekit/core"
)

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

// noRefund returns core.ErrNoRefund, wrapped, naming the limiter that
// cannot refund.
func noRefund(who string, l core.Limiter) error {
	return fmt.Errorf("hotkey: %s: %T: %w", who, l, core.ErrNoRefund)
}
