package rules

import (
	"errors"
	"fmt"

	"github.com/ratekit/ratekit/internal/yamlast"
)

// An Error is one mistake in a rule set. [Parse] and [New] return every
// mistake they find (up to a bound) joined with [errors.Join]; find the
// first with [errors.As].
type Error struct {
	// File is the file's name as given to Parse, or "" for New.
	File string
	// Line and Column locate the mistake in the file, from 1; 0 when the
	// set was not read from a file.
	Line, Column int
	// Path names the field at fault in the file's terms, such as
	// "rules[1].limits[0].rate", or "" for the file as a whole.
	Path string
	// Err says what is wrong.
	Err error

	option bool // a mistake in the options, not in the file
}

// Error returns "rules: <file>:<line>:<column>: <path>: <what>", leaving out
// what is unknown.
func (e *Error) Error() string {
	return yamlast.Message("rules: ", e.File, e.Line, e.Column, e.Path, e.Err)
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// maxErrors bounds how many mistakes one validation reports.
const maxErrors = 20

// errorList collects a validation's mistakes, up to maxErrors.
type errorList struct {
	errs []*Error
}

func (l *errorList) add(path string, err error) {
	if len(l.errs) < maxErrors {
		l.errs = append(l.errs, &Error{Path: path, Err: err})
	}
}

// option adds a mistake in the options, which has no place in a file.
func (l *errorList) option(format string, args ...any) {
	if len(l.errs) < maxErrors {
		l.errs = append(l.errs, &Error{Err: fmt.Errorf(format, args...), option: true})
	}
}

func (l *errorList) addf(path, format string, args ...any) {
	l.add(path, fmt.Errorf(format, args...))
}

func (l *errorList) full() bool { return len(l.errs) >= maxErrors }

func (l *errorList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	errs := make([]error, len(l.errs))
	for i, e := range l.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}
