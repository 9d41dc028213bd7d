package httplimit

import (
	"testing"

	"github.com/ratekit/ratekit/internal/ratehdr"
)

// The exported name is the one the headers are formatted with.
func TestDefaultPolicyNameIsTheHeaders(t *testing.T) {
	if DefaultPolicyName != ratehdr.DefaultPolicyName {
		t.Fatalf("DefaultPolicyName %q, the headers' %q", DefaultPolicyName, ratehdr.DefaultPolicyName)
	}
}
