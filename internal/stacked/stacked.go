// Package stacked keeps one request's [httplimit.Result] of each limit for
// the adapters that carry it in their framework's per-request storage
// (fiber's Locals), so that limits stacked on one request decide together
// ([httplimit.Result.After]). The net/http adapters carry it on the
// response writer instead (internal/httpview.Writer).
package stacked

import (
	"sync"

	"github.com/ratekit/ratekit/httplimit"
)

// Key is the per-request storage key under which a limit keeps its Result
// for the limits further down.
type Key struct{}

var pool = sync.Pool{New: func() any { return new(httplimit.Result) }}

// Get returns a Result to decide one request into.
func Get() *httplimit.Result { return pool.Get().(*httplimit.Result) }

// Put returns r, which nothing refers to any more, to the pool.
func Put(r *httplimit.Result) {
	r.Release()
	*r = httplimit.Result{}
	pool.Put(r)
}
