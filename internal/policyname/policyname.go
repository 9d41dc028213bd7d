// Package policyname checks the names of policies, rules and limits: one
// rule for core's policies and the rule files of package rules.
package policyname

import "fmt"

// MaxBytes is the longest name accepted.
const MaxBytes = 64

// Check reports why name is not a valid name, or nil: at most MaxBytes
// letters, digits, '-', '_' or '.'. The empty name passes; a caller that
// requires one says so.
func Check(name string) error {
	if len(name) > MaxBytes {
		return fmt.Errorf("is %d bytes long, at most %d", len(name), MaxBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%q has %q; use letters, digits, '-', '_' or '.'", name, name[i:i+1])
		}
	}
	return nil
}
