package keyfunc

import (
	"fmt"
	"reflect"
	"strconv"
)

// ContextValue returns a [Func] keying a request by a value that earlier
// middleware stored in its context, such as the user ID set by an
// authentication middleware: [Request.Context]().Value(key). The value may be
// a string, any integer type, or a [fmt.Stringer].
//
// A missing value, a nil value or an empty string is an error wrapping
// [ErrNoKey]; a value of another type is an error wrapping [ErrInvalidKey].
//
// ContextValue returns nil when key is nil or not comparable: no context
// holds a value under such a key ([context.WithValue] refuses it), and
// every adapter refuses a nil key function when it is built.
func ContextValue(key any) Func {
	if key == nil || !reflect.TypeOf(key).Comparable() {
		return nil
	}
	return func(r Request) (string, error) {
		var s string
		switch v := r.Context().Value(key).(type) {
		case nil:
		case string:
			s = v
		case int:
			s = strconv.FormatInt(int64(v), 10)
		case int8:
			s = strconv.FormatInt(int64(v), 10)
		case int16:
			s = strconv.FormatInt(int64(v), 10)
		case int32:
			s = strconv.FormatInt(int64(v), 10)
		case int64:
			s = strconv.FormatInt(v, 10)
		case uint:
			s = strconv.FormatUint(uint64(v), 10)
		case uint8:
			s = strconv.FormatUint(uint64(v), 10)
		case uint16:
			s = strconv.FormatUint(uint64(v), 10)
		case uint32:
			s = strconv.FormatUint(uint64(v), 10)
		case uint64:
			s = strconv.FormatUint(v, 10)
		case fmt.Stringer:
			s = v.String()
		default:
			return "", fmt.Errorf("%w: context value %v of type %T", ErrInvalidKey, key, v)
		}
		if s == "" {
			return "", fmt.Errorf("%w: context value %v missing", ErrNoKey, key)
		}
		return s, nil
	}
}
