package keyfunc

import (
	"context"
	"testing"
)

type userKey struct{}

type userID struct{ n int }

func (u userID) String() string { return "user-" + string(rune('0'+u.n)) }

func TestContextValue(t *testing.T) {
	tests := []struct {
		name    string
		value   any
		want    string
		wantErr error
	}{
		{"string", "u_123", "u_123", nil},
		{"int64", int64(-42), "-42", nil},
		{"uint8", uint8(7), "7", nil},
		{"Stringer", userID{5}, "user-5", nil},
		{"missing", nil, "", ErrNoKey},
		{"empty", "", "", ErrNoKey},
		{"unsupported", 1.5, "", ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.value != nil {
				ctx = context.WithValue(ctx, userKey{}, tt.value)
			}
			checkKey(t, ContextValue(userKey{}), &fakeRequest{ctx: ctx}, tt.want, tt.wantErr)
		})
	}
}
