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

// LocalsKey returns the per-request storage key under which a limit keeps
// its Result for the limits further down. It is a pointer, which an
// interface holds as it is: looking it up among a request's values
// compares it without a call, where a struct key costs one per value
// compared.
func LocalsKey() any { return theKey }

type key struct{ _ byte }

var theKey = &key{}

// Key is the key adapters released before [LocalsKey] keep their Result
// under, reading and writing it alike, so that a limit stacked on one of
// their requests finds the one around it; kept so that they build.
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
