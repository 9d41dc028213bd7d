package core_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
)

// The hot-key wrappers, for the tests of core's composition rules (Unwrap,
// core.As, Failover over any remote) that must hold for them too.

func mustLeased(t testing.TB, remote core.Limiter, batch int64, opts ...hotkey.LeaseOption) *hotkey.Leased {
	t.Helper()
	l, err := hotkey.NewLeased(remote, batch, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustDenialCache(t testing.TB, remote core.Limiter, opts ...hotkey.Option) *hotkey.DenialCache {
	t.Helper()
	c, err := hotkey.NewDenialCache(remote, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
