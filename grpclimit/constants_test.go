package grpclimit

import (
	"testing"

	"github.com/ratekit/ratekit/internal/rpclimit"
)

// TestUnknownMethodConstant checks UnknownMethod, written as a literal so
// that go doc shows its value, against the internal one the interceptors
// use.
func TestUnknownMethodConstant(t *testing.T) {
	if UnknownMethod != rpclimit.UnknownMethod {
		t.Errorf("UnknownMethod = %q, rpclimit's %q", UnknownMethod, rpclimit.UnknownMethod)
	}
}
