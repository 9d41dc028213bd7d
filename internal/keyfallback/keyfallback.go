// Package keyfallback marks the context of a request that an adapter keyed
// by its fallback key function (httplimit.FallbackKey), because the
// request's own key was missing or unusable, so that the observers of the
// limiter (package observe, and the metrics built on it) can count such
// decisions apart.
package keyfallback

import "context"

type ctxKey struct{}

// With returns ctx marked as the context of a request keyed by its
// fallback key.
func With(ctx context.Context) context.Context { return context.WithValue(ctx, ctxKey{}, true) }

// In reports whether ctx is marked by [With].
func In(ctx context.Context) bool {
	v, _ := ctx.Value(ctxKey{}).(bool)
	return v
}
