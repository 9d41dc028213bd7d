package hotkey_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/hotkey"
)

// A nil or invalid option is an error that names it, never a panic.
func TestBadOptions(t *testing.T) {
	remote, err := core.New(core.Policy{Limit: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, want string
		build      func() error
	}{
		{"NewLeased", "option 2 is nil", func() error {
			_, err := hotkey.NewLeased(remote, 10, hotkey.WithMaxKeys(5), nil)
			return err
		}},
		{"NewDenialCache", "option 1 is nil", func() error { _, err := hotkey.NewDenialCache(remote, nil); return err }},
		{"NewLeased", "WithClock(nil)", func() error { _, err := hotkey.NewLeased(remote, 10, hotkey.WithClock(nil)); return err }},
		{"NewDenialCache", "WithMaxKeys(0)", func() error {
			_, err := hotkey.NewDenialCache(remote, hotkey.WithMaxKeys(0))
			return err
		}},
		{"NewLeased", "WithLeaseTime(0s)", func() error {
			_, err := hotkey.NewLeased(remote, 10, hotkey.WithLeaseTime(0))
			return err
		}},
	} {
		err := tt.build()
		if err == nil || !strings.Contains(err.Error(), "hotkey: "+tt.name+": "+tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}
