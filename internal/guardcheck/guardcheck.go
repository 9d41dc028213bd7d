// Package guardcheck runs step tables against a guard.Guard on a manual
// clock, for guardtest's suite and the stores' own Guard tests.
package guardcheck

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

var ctx = context.Background()

// Op is what a [Step] does.
type Op uint8

// The operations of a step table.
const (
	// Peek calls Peek, which must decide the step's Want.
	Peek Op = iota
	// Check calls Check, which must decide Want; the attempt's outcome is
	// never told.
	Check
	// Fail calls Check and, if it allowed the attempt, Fail.
	Fail
	// Succeed calls Check and, if it allowed the attempt, Succeed.
	Succeed
)

// String returns "peek", "check", "fail" or "succeed".
func (o Op) String() string { return [...]string{"peek", "check", "fail", "succeed"}[o] }

// Step is one step of a step table: move the clock by Advance, then run Op
// N times (at least once) for Account and IP; "%d" in Account is replaced
// by 0, 1, … N-1. A peek or a check must decide Want (Allowed, RetryAfter
// and BlockedBy).
type Step struct {
	Advance time.Duration
	Op      Op
	Account string
	IP      string
	N       int
	Want    guard.Decision
}

// RunSteps runs steps against g, whose limiters read clock, and fails t at
// the first step that errs or decides other than wanted. Its messages give
// the time since RunSteps began.
func RunSteps(t *testing.T, clock *core.ManualClock, g *guard.Guard, steps []Step) {
	t.Helper()
	began := clock.Now()
	for i, s := range steps {
		clock.Advance(s.Advance)
		for j := range max(s.N, 1) {
			account := s.Account
			if strings.Contains(account, "%d") {
				account = fmt.Sprintf(account, j)
			}
			var got guard.Decision
			var err error
			if s.Op == Peek {
				got, err = g.Peek(ctx, account, s.IP)
			} else {
				got, err = g.Check(ctx, account, s.IP)
			}
			switch {
			case err != nil:
			case s.Op == Peek || s.Op == Check:
				if got.Allowed != s.Want.Allowed || got.RetryAfter != s.Want.RetryAfter || got.BlockedBy != s.Want.BlockedBy {
					t.Fatalf("step %d (at +%v): %v(%q, %q) = %+v, want %+v",
						i, clock.Now().Sub(began), s.Op, account, s.IP, got, s.Want)
				}
			case s.Op == Fail:
				err = g.Fail(ctx, got)
			case s.Op == Succeed:
				err = g.Succeed(ctx, got)
			}
			if err != nil {
				t.Fatalf("step %d: %v(%q, %q): %v", i, s.Op, account, s.IP, err)
			}
		}
	}
}
