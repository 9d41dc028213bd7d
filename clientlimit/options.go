package clientlimit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/core"
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
// New fails if l is nil: leave the option out for no limiter.
//
// Default: none; only the server's answers slow requests down.
func WithLimiter(l core.Limiter) Option {
	return func(t *Transport) {
		if l == nil {
			t.errs = append(t.errs, errors.New("clientlimit: WithLimiter(nil): a limiter is required (leave the option out for none)"))
		}
		t.limiter = l
	}
}

// WithKey sets the function that names the quota a request counts
// against: its limiter key and the key under which the server's answers
// hold and pace the next requests. It must return a non-empty string: a
// request it gives "" fails, unsent, with an error wrapping
// [core.ErrEmptyKey]. New fails if f is nil.
//
// Default: the request URL's host, port included (req.URL.Host).
func WithKey(f func(*http.Request) string) Option { return func(t *Transport) { t.key = f } }

// WithCost sets the function that says how many units a request takes from
// the [WithLimiter] limiter. It must return a positive number: a request
// it gives less fails, unsent, with the limiter's error (see [core.Wait]).
// New fails if f is nil.
//
// Default: 1 per request.
func WithCost(f func(*http.Request) int64) Option { return func(t *Transport) { t.cost = f } }

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
	}
	return nil
}
