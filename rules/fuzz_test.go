package rules

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that any file gives either a valid set or errors that
// each name a position, and never a panic.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("testdata/*.json")
	for _, path := range append(seeds, more...) {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "rules: [", "a: &x 1\nb: *x\n", "rules:\n  - <<: {}\n", "---\n---\n",
		"rules: [{name: a, limits: [{name: x, rate: 1/s, key: ip}]}]",
		"rules: [{name: a, match: {headers: {X: ['*']}, methods: [get]}, limits: [{name: x, limit: 1, window: 7d, key: [ip, route]}]}]",
		`{"rules": [{"name": "a", "limits": [{"name": "x", "rate": "1/s", "key": "email:user", "cost": 1}]}], "overrides": [{"limit": "a/x", "key": "k", "rate": "2/s"}]}`,
	} {
		f.Add([]byte(s))
	}
	opts := []Option{WithPlan(proPlan), WithContextKey("tenant", tenantKey{})}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data, opts...)
		if err != nil {
			if s != nil {
				t.Fatal("a set and an error")
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v: not an *Error", err)
			}
			for _, u := range unwrapJoin(err) {
				var e *Error
				if !errors.As(u, &e) || e.File != "fuzz.yaml" || e.Line < 1 || e.Column < 1 {
					t.Fatalf("an error without a position: %v", u)
				}
			}
			return
		}
		if len(s.Rules()) == 0 {
			t.Fatal("a set without rules")
		}
		for _, l := range s.Limits() {
			if err := l.Policy().Validate(); err != nil {
				t.Fatalf("%s: %v", l.ID(), err)
			}
			if l.Cost() < 1 || l.Cost() > l.Policy().Capacity() || l.Key() == nil {
				t.Fatalf("%s: cost %d, key %v", l.ID(), l.Cost(), l.Key() != nil)
			}
		}
		_, _ = s.Match(newRequest("GET", "/x", map[string]string{"X-Api-Key": "k"}))
	})
}

// unwrapJoin returns the errors joined in err, or err alone.
func unwrapJoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
