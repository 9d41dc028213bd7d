package clientlimit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
)

// Option configures a [Transport]; see [New]. Each option's doc says its
// default and what [New] refuses: a nil option, a nil limiter or function,
// a number out of range.
type Option func(*Transport)

// WithLimiter paces requests with l: before it is sent, every request
// takes its units (see [WithCost]) under its key (see [WithKey]), waiting
// as [core.Wait] does. With a Redis limiter, every process with this
// option shares one quota. A wait longer than [WithMaxWait] fails the
// request at once.
//
// A rule set (rules.Limiter, any [httplimit.RequestLimiter]) decides
// each request by the rule it matches instead, all or nothing, with the
// rule's keys and costs, waiting as core.Wait does and following the
// set's reloads; New then refuses [WithKey] and [WithCost]. The rules
// read a view of the outgoing request: its method, headers (Host: its
// host, see [HostKey]), context, route ([WithRoute]), the URL's query for
// a field (never the body), and the URL's host as its remote address, so
// that the "peer" and "ip" key specs key only a URL that names its server
// by IP address. A request whose key cannot be found fails, unsent, with
// the rule set's error ([*httplimit.KeyError]); one that no rule matches
// is not limited. The server's answers are still held per host. See
// docs/client.md, "A rule set".
//
// New fails if l is nil: leave the option out for no limiter.
//
// Default: none; only the server's answers slow requests down.
func WithLimiter(l core.Limiter) Option {
	return func(t *Transport) {
		if l == nil {
			t.errs = append(t.errs, errors.New("clientlimit: WithLimiter(nil): a limiter is required (leave the option out for none)"))
		}
		t.limiter = l
		t.rl, _ = l.(httplimit.RequestLimiter)
	}
}

// WithRoute sets the route a rule set ([WithLimiter]) matches a request
// by, and keys it by for the "route" and "route-method" key specs: f
// returns a route pattern such as "/v1/items/{id}", without the method.
//
// On a server, a route is the router's pattern, never the raw path: a
// path is the client's to choose, and would give it a key per path and
// a way around a rule. A client's URLs are its program's own, so the
// default is the URL's path ("/" when empty), and a rule's routes
// ("/v1/chat", "/api/*") match it as written. A program that builds
// paths from what it is given (ids, a proxy's input) should map them to
// patterns with f, so that a "route" key is one key per endpoint rather
// than one per id.
//
// New fails if f is nil, or if the limiter is not a rule set: nothing
// else reads the route.
//
// Default: the URL's path.
func WithRoute(f func(*http.Request) string) Option {
	return func(t *Transport) {
		if f == nil {
			t.errs = append(t.errs, errors.New("clientlimit: WithRoute(nil): a route function is required (leave the option out for the URL's path)"))
		}
		t.route, t.routeGiven = f, true
	}
}

// WithKey sets the function that names the quota a request counts
// against: its limiter key and the key under which the server's answers
// hold and pace the next requests. It must return a non-empty string: a
// request it gives "" fails, unsent, with an error wrapping
// [core.ErrEmptyKey]. New fails if f is nil, and with a rule set
// ([WithLimiter]), whose limits have keys of their own.
//
// Default: the request URL's host, port included (req.URL.Host).
func WithKey(f func(*http.Request) string) Option {
	return func(t *Transport) { t.key, t.keyGiven = f, true }
}

// WithCost sets the function that says how many units a request takes from
// the [WithLimiter] limiter. It must return a positive number: a request
// it gives less fails, unsent, with the limiter's error (see [core.Wait]).
// New fails if f is nil, and with a rule set ([WithLimiter]), whose
// limits have costs of their own.
//
// Default: 1 per request.
func WithCost(f func(*http.Request) int64) Option {
	return func(t *Transport) { t.cost, t.costGiven = f, true }
}

// WithMaxRetries sets how many times a request that is safe to repeat is
// sent again after a 429 or 503 answer; 0 never retries. New fails if n
// is negative.
//
// Default: 2.
func WithMaxRetries(n int) Option { return func(t *Transport) { t.maxRetries = n } }

// WithMaxWait bounds any one wait: for the limiter, for the server's hold
// or pacing, or before a retry. A request that would wait longer fails at
// once with an error wrapping [ErrWaitTooLong] (it is not sent), and a 429
// or 503 whose retry would come later is returned as it is. New fails
// if d is not positive.
//
// Default: 1 minute.
func WithMaxWait(d time.Duration) Option { return func(t *Transport) { t.maxWait = d } }

// WithMaxKeys bounds the number of keys whose server answers the
// transport remembers, least recently used first out: a client calling
// millions of hosts holds at most n. New fails if n is not positive.
//
// Default: 4096.
func WithMaxKeys(n int) Option { return func(t *Transport) { t.maxKeys = n } }

// WithObserver calls f with every [Event]: waits, retries, refusals and
// unreadable rate-limit fields. f is called on the request's goroutine,
// concurrently for concurrent requests; it must be quick and must not
// keep the Event's Request. New fails if f is nil: leave the option out
// for none.
//
// Default: none; [Transport.Stats] counts events either way.
func WithObserver(f func(Event)) Option {
	return func(t *Transport) {
		if f == nil {
			t.errs = append(t.errs, errors.New("clientlimit: WithObserver(nil): a function is required (leave the option out for none)"))
		}
		t.observer = f
	}
}

// check reports the first configuration mistake of the options applied.
func (t *Transport) check() error {
	switch {
	case len(t.errs) > 0:
		return t.errs[0]
	case t.key == nil:
		return fmt.Errorf("clientlimit: WithKey(nil): a key function is required")
	case t.cost == nil:
		return fmt.Errorf("clientlimit: WithCost(nil): a cost function is required")
	case t.maxRetries < 0:
		return fmt.Errorf("clientlimit: WithMaxRetries(%d): must not be negative", t.maxRetries)
	case t.maxWait <= 0:
		return fmt.Errorf("clientlimit: WithMaxWait(%v): must be positive", t.maxWait)
	case t.maxKeys <= 0:
		return fmt.Errorf("clientlimit: WithMaxKeys(%d): must be positive", t.maxKeys)
	case t.rl == nil && t.routeGiven:
		return errors.New("clientlimit: New: WithRoute without a rule set: only a rule set (an httplimit.RequestLimiter given to WithLimiter) reads the route")
	}
	if t.rl != nil {
		var errs []error
		if t.keyGiven {
			errs = append(errs, errors.New("clientlimit: New: WithKey with a rule set (an httplimit.RequestLimiter), whose limits have keys of their own"))
		}
		if t.costGiven {
			errs = append(errs, errors.New("clientlimit: New: WithCost with a rule set (an httplimit.RequestLimiter), whose limits have costs of their own"))
		}
		return errors.Join(errs...)
	}
	return nil
}
