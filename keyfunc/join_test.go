package keyfunc

import (
	"errors"
	"testing"
)

func constant(k string) Func {
	return func(Request) (string, error) { return k, nil }
}

func failing(err error) Func {
	return func(Request) (string, error) { return "", err }
}

func TestJoin(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		f       Func
		want    string
		wantErr error
	}{
		{"two parts", Join(constant("ana@example.com"), constant("203.0.113.7")), "15:ana@example.com11:203.0.113.7", nil},
		{"one part", Join(constant("a")), "1:a", nil},
		{"colon in first part", Join(constant("a:b"), constant("c")), "3:a:b1:c", nil},
		{"colon in second part", Join(constant("a"), constant("b:c")), "1:a3:b:c", nil},
		{"digits", Join(constant("1"), constant("1:1")), "1:13:1:1", nil},
		{"empty part", Join(constant(""), constant("a")), "0:1:a", nil},
		{"error passed on", Join(constant("a"), failing(ErrNoKey)), "", ErrNoKey},
		{"error unchanged", Join(failing(errBoom), constant("a")), "", errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, tt.f, &fakeRequest{}, tt.want, tt.wantErr)
		})
	}
}

// TestJoinUnambiguous checks that different part lists never share a key.
func TestJoinUnambiguous(t *testing.T) {
	lists := [][]string{
		{"a:b", "c"}, {"a", "b:c"}, {"a:bc"}, {"ab", "c"}, {"a", "bc"}, {"abc"},
		{"1:a"}, {"1", "a"}, {"", "1:a"}, {"1:a", ""}, {"", ""}, {""}, {"0:"},
	}
	seen := map[string][]string{}
	for _, parts := range lists {
		fns := make([]Func, len(parts))
		for i, p := range parts {
			fns[i] = constant(p)
		}
		k, err := Join(fns...)(&fakeRequest{})
		if err != nil {
			t.Fatalf("Join(%q): %v", parts, err)
		}
		if prev, ok := seen[k]; ok {
			t.Errorf("Join(%q) = Join(%q) = %q", parts, prev, k)
		}
		seen[k] = parts
	}
}

func TestPrefix(t *testing.T) {
	tests := []struct {
		name    string
		f       Func
		want    string
		wantErr error
	}{
		{"namespace", Prefix("login", constant("ana@example.com")), "login:ana@example.com", nil},
		{"colon escaped", Prefix("a:b", constant("c")), "a%3Ab:c", nil},
		{"not the same as", Prefix("a", constant("b:c")), "a:b:c", nil},
		{"percent escaped", Prefix("100%", constant("c")), "100%25:c", nil},
		{"escape not ambiguous", Prefix("a%3Ab", constant("c")), "a%253Ab:c", nil},
		{"empty namespace", Prefix("", constant("c")), ":c", nil},
		{"error passed on", Prefix("ns", failing(ErrNoKey)), "", ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, tt.f, &fakeRequest{}, tt.want, tt.wantErr)
		})
	}
}
