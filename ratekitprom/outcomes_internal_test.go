package ratekitprom

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/observe"
)

// The counter arrays have a slot for every observe.Outcome, and core has none
// past OutcomeError, or its events would index past them.
func TestOutcomesCoverCore(t *testing.T) {
	for i := range numOutcomes {
		if name := observe.Outcome(i).String(); strings.HasPrefix(name, "Outcome(") {
			t.Errorf("observe.Outcome(%d) is %s, want a named outcome", i, name)
		}
	}
	if got, want := observe.Outcome(numOutcomes).String(), "Outcome("+strconv.Itoa(numOutcomes)+")"; got != want {
		t.Errorf("observe.Outcome(%d) is %q, an outcome past OutcomeError: size the counter arrays for it", numOutcomes, got)
	}
}
