package clientlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/bodyfield"
	"github.com/ratekit/ratekit/keyfunc"
)

// A rule set on the client side: WithLimiter given an
// httplimit.RequestLimiter (rules.Limiter) decides each outgoing request
// by its rule, through the keyfunc.Request view below, and waits as
// core.Wait does. See docs/client.md, "A rule set".
//
// The waiting is core.Wait's own, not a copy of it: a ruleWait is a
// core.Limiter whose AllowN decides the one request it was made for, and
// whose Refund undoes the last decision, so core.Wait's loop (RetryAfter
// plus jitter, a Delay slept, units given back when the context ends
// during one, a deadline that comes too early refused at once) applies
// unchanged. Wait is given a cost of 1, which only sets its jitter's
// bound (the time n units take to free up): for a rule whose cost is c,
// the jitter is at most the time of one unit instead of c, a shorter
// spread, never a longer wait.

// HostKey keys an outgoing request by the host it is for: its Host, or
// its URL's host when it has none, port included, as the [Transport]
// keys the server's answers. It is the key function of a rule set's
// limit per host, registered under a name of your choice:
//
//	src, err := rules.Open("rules.yaml", rules.WithKeyFunc("host", clientlimit.HostKey))
//
// and then "key: host" in the file. It reads the request's Host header,
// which the Transport's view of an outgoing request gives; a server's
// view of a request has none, so it is for the client side. A request
// without one is an error wrapping [keyfunc.ErrNoKey]. Unlike the
// header:Host key spec, which hashes what it reads, it keys by the host
// itself, allocating nothing.
func HostKey(r keyfunc.Request) (string, error) {
	if h := r.Header("Host"); len(h) > 0 && h[0] != "" {
		return h[0], nil
	}
	return "", fmt.Errorf("%w: no host", keyfunc.ErrNoKey)
}

var _ keyfunc.Func = HostKey

// ruleWait is the core.Limiter through which core.Wait decides one
// request by a RequestLimiter. It is pooled: one RoundTrip uses it, from
// one goroutine, and puts it back.
type ruleWait struct {
	rl   httplimit.RequestLimiter
	view outgoing
	last httplimit.RequestDecision // the decision not yet released
	rule string                    // the rule the last decision matched
}

var ruleWaits = sync.Pool{New: func() any { return new(ruleWait) }}

func getRuleWait(rl httplimit.RequestLimiter, req *http.Request, route func(*http.Request) string) *ruleWait {
	w := ruleWaits.Get().(*ruleWait)
	w.rl = rl
	w.view = outgoing{r: req, route: route}
	return w
}

// put releases the last decision and puts w back in the pool.
func (w *ruleWait) put() {
	w.release()
	*w = ruleWait{}
	ruleWaits.Put(w)
}

// release lets the RequestLimiter reuse what the last decision holds.
func (w *ruleWait) release() {
	if r, ok := w.last.Undo.(interface{ Release() }); ok {
		r.Release()
	}
	w.last = httplimit.RequestDecision{}
}

// AllowN decides the request by its rule, with ctx (core.Wait's, bounded
// by MaxWait) as its context. key and n are not read: the rule set says
// the request's keys and costs. A request no rule limits is allowed.
func (w *ruleWait) AllowN(ctx context.Context, _ string, _ int64) (core.Decision, error) {
	w.release()
	w.view.ctx = ctx
	v, err := w.rl.DecideRequest(&w.view)
	w.last, w.rule = v, v.Rule
	if err != nil {
		return v.Decision.Decision, err
	}
	if len(v.Decision.Layers) == 0 {
		return core.Decision{Allowed: true}, nil
	}
	return v.Decision.Decision, nil
}

// Refund undoes the last decision, which core.Wait calls when the
// context ends during an allowed decision's Delay.
func (w *ruleWait) Refund(ctx context.Context, _ string, _ int64, elapsed time.Duration) error {
	if w.last.Undo == nil {
		return nil
	}
	return w.last.Undo.Undo(ctx, elapsed)
}

var errRuleWait = errors.New("clientlimit: a rule set's request decision has no Peek nor Reset")

// Peek is not used: core.Wait never peeks.
func (w *ruleWait) Peek(context.Context, string, int64) (core.Decision, error) {
	return core.Decision{}, errRuleWait
}

// Reset is not used: core.Wait never resets.
func (w *ruleWait) Reset(context.Context, string) error { return errRuleWait }

var _ core.Refunder = (*ruleWait)(nil)

// outgoing is the keyfunc.Request view of an outgoing request, as the
// Transport's rule set reads it (see [WithLimiter]).
type outgoing struct {
	r     *http.Request
	ctx   context.Context
	route func(*http.Request) string // nil: the URL's path
	host  [1]string                  // Header("Host")'s one value
}

var _ keyfunc.Request = (*outgoing)(nil)

// RemoteAddr is the URL's host, port included when the URL has one: the
// server the request is for (not the proxy it may go through). The "peer"
// and "ip" key specs key by it when it is an IP address, and fail with
// keyfunc.ErrNoKey for a host name.
func (o *outgoing) RemoteAddr() string { return o.r.URL.Host }

// Header is the request's header; Host, which an outgoing request holds
// apart, is its Host (or its URL's host when it has none), as a server
// reads it.
func (o *outgoing) Header(name string) []string {
	if strings.EqualFold(name, "Host") {
		h := o.r.Host
		if h == "" {
			h = o.r.URL.Host
		}
		if h == "" {
			return nil
		}
		o.host[0] = h
		return o.host[:]
	}
	return o.r.Header.Values(name)
}

// Method is the request's method, GET when it has none (as net/http
// sends it).
func (o *outgoing) Method() string {
	if o.r.Method == "" {
		return http.MethodGet
	}
	return o.r.Method
}

// Route is what WithRoute's function returns, by default the URL's path
// ("/" for none). Unlike a server's view, it may be a path, not a
// pattern: the URL is the program's own (see [WithRoute]).
func (o *outgoing) Route() string {
	if o.route != nil {
		return o.route(o.r)
	}
	if p := o.r.URL.Path; p != "" {
		return p
	}
	return "/"
}

// Context is the context the request waits under: the request's, bounded
// by MaxWait.
func (o *outgoing) Context() context.Context {
	if o.ctx != nil {
		return o.ctx
	}
	return o.r.Context()
}

// Field reads the URL's query, as every view reads a query (a field given
// twice with different values wraps keyfunc.ErrInvalidKey), and never the
// body: a RoundTripper must not read nor replace its caller's body, which
// may be a stream sent as it is read.
func (o *outgoing) Field(name string) (string, error) {
	return bodyfield.Field("", nil, o.r.URL.RawQuery, name)
}
