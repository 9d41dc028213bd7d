// Package ctxsleep is the context-aware sleep of the packages that wait:
// core's Wait, clientlimit's Transport and httplimit's leaky-bucket delay.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends. It returns nil when d elapsed, and
// ctx's error when ctx ended first or had ended already. A d of 0 or less
// returns nil at once, without looking at ctx.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
