package core_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// A nil option is an error that names it, from every constructor that
// takes options, never a panic.
func TestNilOption(t *testing.T) {
	p := core.Policy{Limit: 10, Window: time.Second}
	remote, err := core.New(p)
	if err != nil {
		t.Fatal(err)
	}
	for name, build := range map[string]func() error{
		"New": func() error { _, err := core.New(p, core.WithMaxKeys(10), nil); return err },
		"NewFailover": func() error {
			_, err := core.NewFailover(remote, core.WithErrorPolicy(core.FailClosed()), nil)
			return err
		},
	} {
		err := build()
		if err == nil || !strings.Contains(err.Error(), name+": option") || !strings.Contains(err.Error(), "is nil") {
			t.Errorf("%s with a nil option: %v, want an error naming it", name, err)
		}
	}
}
