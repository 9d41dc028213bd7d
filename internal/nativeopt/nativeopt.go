// Package nativeopt builds the framework adapters' native options: an
// [httplimit.Option] over a function of the framework's own request
// context (gin's *gin.Context, echo's Context, fiber's Ctx), so that what
// earlier middleware stored there decides the key, the cost or a skip.
// Each adapter names the options in its framework's words and says how to
// find its context in the [keyfunc.Request] its middleware passes.
package nativeopt

import (
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/keyfunc"
)

// Native is how an adapter finds its framework's context C in a request
// view of its own middleware, and the error a key or cost function gets
// outside it (one wrapping [keyfunc.ErrInvalidKey]: the request is refused,
// 400, never served unlimited).
type Native[C any] struct {
	Of      func(keyfunc.Request) (C, bool)
	Outside error
}

// Key is [httplimit.WithKey] over f; a nil f is the mistake
// httplimit.WithKey(nil) is.
func (n Native[C]) Key(f func(C) (string, error)) httplimit.Option {
	if f == nil {
		return httplimit.WithKey(nil)
	}
	return httplimit.WithKey(func(r keyfunc.Request) (string, error) {
		c, ok := n.Of(r)
		if !ok {
			return "", n.Outside
		}
		return f(c)
	})
}

// Cost is [httplimit.WithCost] over f; a nil f is the mistake
// httplimit.WithCost(nil) is.
func (n Native[C]) Cost(f func(C) (int64, error)) httplimit.Option {
	if f == nil {
		return httplimit.WithCost(nil)
	}
	return httplimit.WithCost(func(r keyfunc.Request) (int64, error) {
		c, ok := n.Of(r)
		if !ok {
			return 0, n.Outside
		}
		return f(c)
	})
}

// Skip is [httplimit.WithSkip] over f, which skips nothing outside the
// adapter's middleware; a nil f is the mistake httplimit.WithSkip(nil) is.
func (n Native[C]) Skip(f func(C) bool) httplimit.Option {
	if f == nil {
		return httplimit.WithSkip(nil)
	}
	return httplimit.WithSkip(func(r keyfunc.Request) bool {
		c, ok := n.Of(r)
		return ok && f(c)
	})
}
