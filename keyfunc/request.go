package keyfunc

import (
	"context"
	"errors"

	"github.com/ratekit/ratekit/internal/bodyfield"
)

// Request is the framework-neutral view of an incoming request that every key
// function reads. [FromHTTP] implements it for net/http (and so for any
// router built on it); each framework adapter implements it for its own
// request type. It is deliberately small so that frameworks not built on
// net/http, such as fasthttp, can implement it without copying the request.
//
// A Request describes one in-flight request and is used by one goroutine at a
// time, before the handler runs; its methods need not be safe for concurrent
// use. It is valid only while its request is handled: ratekit's adapters
// reuse their views, as the frameworks reuse their contexts, so a function
// given a Request (a key, cost or skip function, an error hook) reads what
// it needs before it returns and keeps nothing of it.
type Request interface {
	// RemoteAddr returns the address of the socket peer, usually "host:port"
	// as in net/http's Request.RemoteAddr. A bare IP address is accepted too.
	RemoteAddr() string

	// Header returns all values of the named header, one element per header
	// line, in the order received, or nil if it is absent. The name is
	// matched case-insensitively. Callers must not modify the returned slice.
	Header(name string) []string

	// Method returns the request method, such as "GET".
	Method() string

	// Route returns the route pattern that matched the request, such as
	// "/items/{id}", without the method, or "" when the router does not know
	// it. It never returns the raw request path.
	Route() string

	// Context returns the request's context, carrying values set by earlier
	// middleware such as an authenticated user ID.
	Context() context.Context

	// Field returns the value of the named field of the body or the URL
	// query, or "" if neither has it. The body is read as every common
	// handler might read it: as the URL-encoded or multipart form its
	// Content-Type declares, and as a JSON object (a top-level string
	// member, its name matched case-insensitively) when it declares JSON
	// or starts as an object whatever it declares, so that an identity
	// reads the same however the request labels its body. An encoded body
	// (Content-Encoding gzip, x-gzip or deflate) is read decoded. Field
	// never reads nor decodes more than a bound of bytes (1 MiB by
	// default, see [MaxBodyBytes]) and leaves the body intact, as sent,
	// for the handler. It reports an error when the body cannot be read,
	// and one wrapping [ErrInvalidKey] when the body is larger than the
	// bound, as sent or decoded, whatever its type, has another content
	// coding or more than two, is malformed for the type it declares, or
	// gives the field more than once with different values (in one
	// reading, between a form and JSON, or between the body and the
	// query).
	//
	// Every view of ratekit reads fields this one way. A view of your own
	// that reads bodies can give Field to [FromHTTP]'s view of an
	// [net/http.Request] holding the request's Content-Type,
	// Content-Encoding, body and query.
	Field(name string) (string, error)
}

// Func computes the rate-limiting key of a request: who is limited. It
// returns a non-empty key, or an error that wraps [ErrNoKey] when the request
// carries nothing to key by, or [ErrInvalidKey] when it carries something
// malformed. A Func must be safe for concurrent use; every Func in this
// package is.
type Func func(Request) (string, error)

var (
	// ErrNoKey reports that a request carries nothing to key by: a missing
	// header, form field or context value. Key functions wrap it with what was
	// missing; test for it with [errors.Is]. The adapter decides what a
	// missing key means for the request.
	ErrNoKey = errors.New("keyfunc: no key")

	// ErrInvalidKey ("keyfunc: invalid key") reports that a request
	// carries a key that cannot be used: an email address with control
	// characters, a field given twice with different values. Key functions
	// wrap it with the reason; test for it with [errors.Is]. A request
	// with an invalid key should be refused, not let through unlimited, or
	// a client could escape its limit by sending malformed input.
	ErrInvalidKey = errInvalidKey()
)

// errInvalidKey returns ErrInvalidKey, which the body reader of every view
// declares so that it can wrap it too.
func errInvalidKey() error { return bodyfield.ErrInvalidKey }
