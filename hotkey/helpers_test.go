package hotkey_test

import (
	"context"
	"testing"

	"github.com/ratekit/ratekit/core"
)

var ctx = context.Background()

// policyless hides its limiter's Policy method.
type policyless struct{ core.Limiter }

func allow(t *testing.T, l core.Limiter, key string, n int64) core.Decision {
	t.Helper()
	d, err := l.AllowN(ctx, key, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", key, n, err)
	}
	return d
}
