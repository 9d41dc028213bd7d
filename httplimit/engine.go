package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/inflight"
	"github.com/ratekit/ratekit/internal/ctxsleep"
	"github.com/ratekit/ratekit/internal/failover"
	"github.com/ratekit/ratekit/internal/httpview"
	"github.com/ratekit/ratekit/internal/keyfallback"
	"github.com/ratekit/ratekit/internal/memtime"
	"github.com/ratekit/ratekit/keyfunc"
)

// Engine is the rate-limiting behaviour shared by every adapter, written once:
// it keys a request, asks the limiter, and says what the adapter must write.
// Adapters call [Engine.Check] before the handler, write the [Result] the
// framework's way, and call [Result.Done] after the handler. Create one with
// [New].
//
// Allowed requests get the rate headers of [WithHeaders] (by default
// [IETFHeaders], one member per layer when the limiter is a
// [core.LayeredLimiter]; [HeaderStyle] gives their values). A denied request
// gets 429 Too Many Requests with Retry-After, Cache-Control: no-store and an
// application/problem+json body of type [ProblemRateLimited]; the handler is
// not called. The other refusals are listed with the problem types. A failing
// limiter is decided by a [core.Failover] over it, with the [WithErrorPolicy]
// policy and no circuit breaker of its own (give it a Failover as the limiter
// for one). Check waits a leaky bucket's Delay; when the request's context
// ends first it gives up, and the slot stays taken.
//
// Nothing a request carries makes the Engine panic, and no error text is
// ever written to a client. An Engine is safe for concurrent use.
type Engine struct {
	f     *core.Failover      // over the limiter: decides every request
	mem   *core.Memory        // the limiter, when it is one: asked directly
	lay   core.LayeredLimiter // the limiter, when it is layered
	rl    RequestLimiter      // the limiter, when it decides whole requests
	cfg   config
	last  atomic.Pointer[policyHeaders]
	lastL [8]atomic.Pointer[layerHeaders]

	// base is the clock's time at New, from which now counts; system is
	// set when the clock is core.SystemClock.
	base   time.Time
	system bool

	// closed is set when the error policy is FailClosed: a request whose
	// in-flight limiter fails is refused (WithInFlight).
	closed bool

	// memTime is set when mem reads the system clock as the engine does:
	// a request's start is then the limiter's own reading.
	memTime bool

	// With WithSettle: the limiter and the failover's fallback limiter
	// (local, nil without one) as Settlers.
	settler, localSettler core.Settler
	local                 core.Limiter

	// The names of the fields written for a browser's script to read,
	// and them as one Access-Control-Expose-Headers value.
	exposedNames []string
	exposed      []string
}

// New returns the engine enforcing l with opts. It fails if l is nil or an
// option is invalid, such as [core.Fallback](nil).
func New(l core.Limiter, opts ...Option) (*Engine, error) {
	if l == nil {
		return nil, errors.New("httplimit: New: a limiter is required")
	}
	e := &Engine{cfg: config{headers: IETFHeaders, clock: core.SystemClock{}}}
	c := &e.cfg
	if err := c.apply(opts); err != nil {
		return nil, err
	}
	if c.lockout != nil {
		if _, ok := l.(RequestLimiter); ok {
			return nil, errors.New("httplimit: WithBlock: not for a rule set")
		}
		b, err := core.NewBlocking(l, c.lockout)
		if err != nil {
			return nil, fmt.Errorf("httplimit: WithBlock: %w", err)
		}
		l = b
	}
	// The failover composition decides a store failure, once for every
	// adapter; the middleware's has no breaker (MaxInt failures).
	f, err := core.NewFailover(l, core.WithErrorPolicy(c.onError), core.WithClock(c.clock), core.WithBreaker(math.MaxInt, time.Second))
	if err != nil {
		return nil, fmt.Errorf("httplimit: WithErrorPolicy: %w", err)
	}
	e.f = f
	e.closed = closedOf(f)
	if e.rl, _ = l.(RequestLimiter); e.rl != nil {
		if err := c.checkRequestLimiter(); err != nil {
			return nil, err
		}
	}
	// A Memory limiter has no store to fail: its only errors are the
	// caller's, which the composition passes through as they are, so it
	// is asked directly, without the composition's work per request.
	e.mem, _ = l.(*core.Memory)
	e.lay, _ = core.As[core.LayeredLimiter](l)
	if err := c.keyPolicies(); err != nil {
		return nil, err
	}
	if c.maxBody <= 0 {
		c.maxBody = keyfunc.DefaultMaxBodyBytes
	}
	if err := c.checkCountIf(l, f); e.rl == nil && err != nil {
		return nil, err
	}
	if err := e.checkSettle(l); err != nil {
		return nil, err
	}
	e.base = c.clock.Now()
	_, e.system = c.clock.(core.SystemClock)
	// Both on the system clock: the limiter's reading serves.
	e.memTime = e.mem != nil && e.system && memSystem(e.mem)
	e.exposedNames = exposedNames(c.headers)
	e.exposed = []string{strings.Join(e.exposedNames, ", ")}
	return e, nil
}

// apply applies opts to c and checks them, a nil option first; it sets
// the default key function, [keyfunc.PeerIP].
func (c *config) apply(opts []Option) error {
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("httplimit: New: option %d is nil", i+1)
		}
		o(c)
	}
	if len(c.errs) > 0 {
		return errors.Join(c.errs...)
	}
	if c.keyGiven = c.key != nil; !c.keyGiven {
		c.key = keyfunc.PeerIP
	}
	if c.clock == nil {
		return errors.New("httplimit: New: WithClock(nil): a clock is required")
	}
	return nil
}

// keyPolicies sets the default of [WithNoKey] and [WithInvalidKey],
// [RefuseKey], and checks that a [FallbackKey] has a function.
func (c *config) keyPolicies() error {
	if c.noKey.kind == keyDefault {
		c.noKey = RefuseKey()
	}
	if c.badKey.kind == keyDefault {
		c.badKey = RefuseKey()
	}
	for _, p := range []KeyPolicy{c.noKey, c.badKey} {
		if p.kind == keyFallback && p.fallback == nil {
			return errors.New("httplimit: FallbackKey(nil): a key function is required")
		}
	}
	return nil
}

// checkCountIf checks that, with [WithCountIf], l and f's fallback limiter
// can give units back.
func (c *config) checkCountIf(l core.Limiter, f *core.Failover) error {
	if c.countIf == nil {
		return nil
	}
	// Counting after the handler cannot hold under parallel requests:
	// the request is counted first and given back, which needs a
	// limiter that can give back.
	for _, lim := range []core.Limiter{l, localOf(f)} {
		if _, ok := core.As[core.Refunder](lim); lim != nil && !ok {
			return fmt.Errorf("httplimit: WithCountIf: %T cannot give units back (core.Refunder)", lim)
		}
	}
	return nil
}

// MustNew is like [New] but panics if l is nil or an option is invalid, for
// adapter constructors that return a handler: a configuration mistake is
// found when the server starts, as [http.Handle] panics on a nil handler.
func MustNew(l core.Limiter, opts ...Option) *Engine {
	e, err := New(l, opts...)
	if err != nil {
		panic(err)
	}
	return e
}

// MaxBodyBytes returns the bound on the request body a [keyfunc.Request]
// view may read and decode to find a field ([WithMaxBodyBytes]), for a
// user's own adapter. One for a net/http router passes
// keyfunc.FromHTTP(r, keyfunc.MaxBodyBytes(e.MaxBodyBytes())) to
// [Engine.Check]; one for another framework bounds its view's Field by it.
func (e *Engine) MaxBodyBytes() int64 { return e.cfg.maxBody }

// Result is what [Engine.Check] decided for one request: serve it (after
// setting the rate headers) or refuse it with a [Response]. An adapter uses
// it on the request's goroutine only.
type Result struct {
	e      *Engine
	req    keyfunc.Request
	lim    core.Limiter // the limiter that decided, to give back to in Done
	key    string
	cost   int64
	d      core.Decision
	layers []core.Decision // every layer's Decision, from a layered limiter
	layer  int             // d's layer in layers
	rate   bool            // write the rate headers of d
	denied bool            // d is a denial: r=0, t=Retry-After
	serve  bool
	charge bool // Done decides whether the request stays counted
	settle bool // Done settles the cost the handler reported (WithSettle)
	actual *actualCost
	// counted: a limiter counted the request, which is served; a limit
	// checked after this one that refuses it gives the units back
	// ([Result.After]).
	counted bool
	outer   *Result // the limit checked before this one on the request, if any
	// fallback marks a request keyed by its FallbackKey function: the
	// limiter is asked with a context that says so (internal/keyfallback),
	// for the observers that count it.
	fallback bool
	start    int64         // the engine's time (Engine.now) before the limiter counted it
	rule     string        // the rule a RequestLimiter matched
	undo     RequestUndoer // gives back what a RequestLimiter counted
	undone   bool          // undo was called
	resp     *Response     // when refusing
	retry    time.Duration // the Retry-After of a ProblemUnavailable or ProblemInFlight refusal
	// lease is the request's in-flight lease when held is set
	// (WithInFlight), given back by release.
	lease inflight.Lease
	held  bool
	// scratch is where the request's view keeps a *headerScratch across
	// requests (internal/httpview), nil for another view: WriteHeaders
	// then takes one from a pool.
	scratch *any
}

// Serve reports whether the handler should be called.
func (r *Result) Serve() bool { return r.serve }

// Response returns the response to write instead of calling the handler when
// [Result.Serve] is false; its headers are also visited by
// [Result.WriteHeaders] and written by [Result.WriteHTTP].
func (r *Result) Response() Response {
	if r.resp == nil {
		return Response{}
	}
	return *r.resp
}

// Problem returns why the request was refused, the zero Problem when it is
// served: for an adapter that answers in a protocol other than HTTP, such as
// gRPC, with a status of its own. A refusal written by a [WithDenied]
// function has only Type ([ProblemRateLimited]), Status and Policy set.
func (r *Result) Problem() Problem {
	switch {
	case r.serve || r.resp == nil:
		return Problem{}
	case r.resp.problem.Type != "":
		return r.resp.problem
	}
	return Problem{Type: ProblemRateLimited, Status: r.resp.Status, Policy: r.e.deniedName(r)}
}

// RetryAfter returns the Retry-After of a refusal in whole seconds (at
// least 1), or 0 when the response has none: the request is served, or
// retrying cannot help ([ProblemCostTooHigh], [ProblemInvalidKey]...).
func (r *Result) RetryAfter() int64 {
	switch {
	case r.serve || r.resp == nil:
		return 0
	case r.denied:
		return RetryAfterSeconds(r.d.RetryAfter)
	case r.resp.problem.Type == ProblemUnavailable, r.resp.problem.Type == ProblemInFlight:
		return RetryAfterSeconds(r.retry)
	}
	return 0
}

// Counting reports whether [Result.Done] needs the response status: the
// request was counted before the handler and is given back unless
// [WithCountIf] accepts the status. Adapters that must do extra work to
// learn the status do it only then.
func (r *Result) Counting() bool { return r.charge }

// WriteHeaders writes to h the headers to send before the handler runs or
// the refusal is written: the rate headers and, when refusing, the
// response's headers. The IETF RateLimit and RateLimit-Policy fields are
// added to (they are Lists: middleware stacked on one request each add
// their policy's member, outermost first); every other field is set,
// replacing any value already there.
//
// When the response already carries Access-Control-Allow-Origin, set by a
// CORS middleware that ran first, the names of Retry-After and of the rate
// headers of the [WithHeaders] style are added to
// Access-Control-Expose-Headers, each once, so that a browser's script can
// read them on a 429 as on any answer. That needs h to be an [http.Header]
// or a [HeaderReader].
func (r *Result) WriteHeaders(h HeaderWriter) {
	sc, pooled := r.headerScratch()
	if hh, ok := h.(http.Header); ok {
		if !r.writeFresh(hh, sc) {
			sc.hs.reset(hh, sc)
			r.writeHeaders(&sc.hs, sc.buf[:0])
			sc.hs = httpSink{}
		}
	} else {
		sc.ws.reset(h)
		r.writeHeaders(&sc.ws, sc.buf[:0])
		sc.ws.reset(nil)
	}
	if pooled {
		scratchPool.Put(sc)
	}
}

// headerScratch returns the memory to write the headers with: the one the
// request's view keeps, made once per view, or one from the pool (pooled
// true), which the caller puts back.
func (r *Result) headerScratch() (sc *headerScratch, pooled bool) {
	if r.scratch == nil {
		return scratchPool.Get().(*headerScratch), true
	}
	if sc, ok := (*r.scratch).(*headerScratch); ok {
		return sc, false
	}
	sc = newHeaderScratch()
	*r.scratch = sc
	return sc, false
}

func (r *Result) writeHeaders(h headerSink, buf []byte) {
	if r.rate {
		r.e.writeRateHeaders(h, r, buf)
	}
	if !r.serve {
		for k, v := range r.resp.Header {
			h.set(http.CanonicalHeaderKey(k), v)
		}
	}
	if r.rate || !r.serve {
		r.e.expose(h)
	}
}

// WriteHTTP writes the result to a net/http response writer: it sets the
// headers and, when refusing, writes the status and body. It reports whether
// the handler should be called.
func (r *Result) WriteHTTP(w http.ResponseWriter) (serve bool) {
	r.WriteHeaders(w.Header())
	if r.serve {
		return true
	}
	w.WriteHeader(r.resp.Status)
	w.Write(r.resp.Body)
	return false
}

// Done tells the engine the status the handler answered with. With
// [WithCountIf], the request was counted before the handler ran, and Done
// gives its units back to the limiter when the condition does not accept
// the status. With [WithSettle], a request that stays counted is settled
// at the cost its handler reported ([SetCost]). Call it after the handler
// whenever [Result.Serve] was true; extra calls do nothing. A handler that
// panics never reaches Done, and its request stays counted at its
// estimate (its in-flight lease goes back in [Result.Release]).
func (r *Result) Done(status int) {
	charge, settle := r.charge, r.settle && r.counted
	r.charge, r.settle = false, false
	if !charge || r.e.cfg.countIf(status) {
		if settle {
			r.settleCost()
		}
		return
	}
	elapsed := r.e.since(r.start)
	ctx := context.WithoutCancel(r.req.Context())
	if err := r.refund(ctx, elapsed); err != nil {
		r.e.report(r.req, fmt.Errorf("httplimit: give back an uncounted request: %w", err))
	}
}

// Check decides what req gets. It runs the skip, key and cost functions,
// asks the limiter, waits a leaky bucket's Delay, and reports errors and
// dry-run denials to their hooks.
//
// Caller errors ([core.CallerError]) are refused, never served: a key
// function's error or empty key as [WithNoKey] and [WithInvalidKey] say, a
// cost function's error or a cost below 1 with a 400 [ProblemInvalidCost],
// a cost above what the policy can ever allow with a 429
// [ProblemCostTooHigh]. The error policy ([WithErrorPolicy]) applies to a
// failing limiter only. With [WithInFlight], the request takes its lease
// before the limiter is asked, and a request Check refuses holds none.
func (e *Engine) Check(req keyfunc.Request) Result {
	res := Result{e: e, req: req}
	e.check(&res)
	return res
}

func init() {
	// The adapters decide into the Result their pooled writer holds:
	// returned by value, a Result is copied twice on every request.
	httpview.CheckInto = func(e *Engine, res *Result, req keyfunc.Request) {
		res.e, res.req = e, req
		res.keepScratch()
		e.check(res)
	}
}

// keepScratch makes res write its headers with the scratch its request's
// view keeps (internal/httpview.Request.Scratch), for an adapter whose
// pooled view keeps it across requests, as the adapters that decide
// through internal/httpview.CheckInto do; a view reset on every request
// would make a scratch for each.
func (res *Result) keepScratch() {
	if hr, ok := res.req.(*httpview.Request); ok {
		res.scratch = &hr.Scratch
	}
}

// check is Check deciding into *res, the zero Result but for its engine
// and request: a new one, or an adapter's pooled one, put back zero.
func (e *Engine) check(res *Result) {
	req := res.req
	// The view of the net/http adapters keeps the body bound and the
	// header slots; any other view brings its own bound.
	if hr, ok := req.(*httpview.Request); ok {
		hr.MaxBody = e.cfg.maxBody
	}
	if e.cfg.skip != nil && e.cfg.skip(req) {
		res.serve = true
		return
	}
	if e.rl != nil {
		if e.decideRequest(res) {
			e.outcome(res)
		}
		return
	}
	var ok bool
	if res.key, ok = e.key(res); !ok {
		return
	}
	if res.cost = 1; e.cfg.cost != nil {
		if res.cost, ok = e.cost(res); !ok {
			return
		}
	}
	if e.cfg.inflight != nil && !e.acquire(res) {
		return
	}
	if e.decide(res) {
		e.outcome(res)
	}
	if res.held && !res.serve {
		res.release() // refused by the rate limit: it holds no lease
	}
}

// acquire takes res's in-flight lease ([WithInFlight]) and reports whether
// the request goes on to its rate limit: it holds the lease, or is served
// without one (a dry run, or a failing in-flight limiter not failing
// closed); otherwise res is refused.
func (e *Engine) acquire(res *Result) bool {
	ctx := res.req.Context()
	d, err := e.cfg.inflight.Acquire(ctx, res.key)
	switch {
	case err != nil:
		e.report(res.req, fmt.Errorf("httplimit: in flight: %w", err))
		switch {
		case ctx.Err() != nil:
			res.refuse(canceledResponse(core.Decision{}))
		case errors.Is(err, inflight.ErrEmptyKey):
			res.refuse(invalidKeyResponse())
		case e.closed:
			res.retry = failClosedRetry
			res.refuse(unavailableResponse(res.retry))
		default:
			return true
		}
		return false
	case d.Allowed:
		res.lease, res.held = d.Lease, true
		return true
	case e.cfg.dryRun != nil:
		e.cfg.dryRun(res.req, core.Decision{Limit: d.Limit, RetryAfter: d.RetryAfter})
		return true
	}
	res.retry = d.RetryAfter
	res.refuse(inFlightResponse(d))
	return false
}

// release gives back r's in-flight lease, once.
func (r *Result) release() {
	if !r.held {
		return
	}
	r.held = false
	// The request's context, unless it has ended (the client went away):
	// the lease goes back all the same. WithoutCancel costs an allocation,
	// so only then.
	ctx := r.req.Context()
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	if err := r.e.cfg.inflight.Release(ctx, r.lease); err != nil {
		r.e.report(r.req, fmt.Errorf("httplimit: in flight: release: %w", err))
	}
}

// key runs the key function and returns the request's key, or false when
// it has none: res is then decided, served unlimited or refused, as
// [WithNoKey] and [WithInvalidKey] say. Every key error is reported, once:
// a request keyed by something else than its key function asked for, or
// not at all, is never silent.
func (e *Engine) key(res *Result) (string, bool) {
	req := res.req
	if !e.cfg.keyGiven && res.scratch != nil {
		if key, ok := res.peerKey(); ok {
			return key, true
		}
	}
	key, err := e.cfg.key(req)
	if err == nil && key == "" {
		err = fmt.Errorf("key function returned an empty key: %w", core.ErrEmptyKey)
	}
	if err == nil {
		return key, true
	}
	p := e.cfg.badKey
	if errors.Is(err, keyfunc.ErrNoKey) {
		p = e.cfg.noKey
	}
	switch p.kind {
	case keySkip:
		e.report(req, fmt.Errorf("%w: served unlimited (SkipKey): %w", ErrKeyFallback, err))
		res.serve = true
		return "", false
	case keyFallback:
		fkey, ferr := p.fallback(req)
		if ferr == nil && fkey == "" {
			ferr = core.ErrEmptyKey
		}
		if ferr == nil {
			e.report(req, fmt.Errorf("%w: keyed by the FallbackKey function: %w", ErrKeyFallback, err))
			res.fallback = true
			return fkey, true
		}
		e.report(req, fmt.Errorf("httplimit: key: %w; fallback key: %w", err, ferr))
	default:
		e.report(req, fmt.Errorf("httplimit: key: %w", err))
	}
	res.refuse(invalidKeyResponse())
	return "", false
}

// peerKey returns the key of the default key function, [keyfunc.PeerIP],
// for a request whose view keeps a scratch: a pure function of the peer's
// address, remembered there for the address it was found for last, which
// the next request on the view (often of the same connection) has too. It
// reports false, remembering nothing, when the peer is no IP address: the
// key function's error is then reported as usual.
func (res *Result) peerKey() (string, bool) {
	sc, _ := res.headerScratch()
	ra := res.req.RemoteAddr()
	if ra == sc.peer && sc.peerKey != "" {
		return sc.peerKey, true
	}
	key, err := keyfunc.PeerIP(res.req)
	if err != nil || key == "" {
		return "", false
	}
	sc.peer, sc.peerKey = ra, key
	return key, true
}

// cost runs the cost function (1 without one) and returns the request's
// cost, or false when it fails or is below 1: res is then refused.
func (e *Engine) cost(res *Result) (int64, bool) {
	if e.cfg.cost == nil {
		return 1, true
	}
	n, err := e.cfg.cost(res.req)
	if err == nil && n <= 0 {
		err = fmt.Errorf("cost %d: %w", n, core.ErrInvalidCost)
	}
	if err != nil {
		e.report(res.req, fmt.Errorf("httplimit: cost: %w", err))
		res.refuse(invalidCostResponse())
		return 0, false
	}
	return n, true
}

// checkFailover decides a request by a core.Failover, telling which limiter
// decided and the store error it was decided despite (internal/failover).
var checkFailover = failover.Check.(func(*core.Failover, context.Context, string, int64) (core.LayeredDecision, core.Limiter, error, error))

// localOf returns a core.Failover's fallback limiter, or nil
// (internal/failover).
var localOf = failover.Local.(func(*core.Failover) core.Limiter)

// closedOf reports whether a core.Failover fails closed
// (internal/failover).
var closedOf = failover.Closed.(func(*core.Failover) bool)

// decide asks the failover composition over the limiter for res.key and
// res.cost, and records the Decision in res.d, every layer's in
// res.layers, and the limiter that decided in res.lim (nil when the error
// policy decided alone). It reports the errors met, and returns false when
// the request was not decided: res is then refused.
func (e *Engine) decide(res *Result) bool {
	// res.start is the time before counting, for a refund after: with
	// WithCountIf, or when a limit checked later refuses the request.
	var err error
	var ctx context.Context // the request's, read only when a limiter takes it
	switch {
	case e.memTime:
		// The limiter's own reading of the system clock: one clock read
		// per request, not two.
		res.d, res.start, err = memAllow(e.mem, res.key, res.cost)
		res.lim = e.mem
		if err == nil {
			return true
		}
		ctx = limiterContext(res)
	case e.mem != nil:
		ctx = limiterContext(res)
		res.start = e.now()
		res.d, err = e.mem.AllowN(ctx, res.key, res.cost)
		res.lim = e.mem
	default:
		ctx = limiterContext(res)
		res.start = e.now()
		var ld core.LayeredDecision
		var outage error
		ld, res.lim, outage, err = checkFailover(e.f, ctx, res.key, res.cost)
		if outage != nil {
			e.report(res.req, outage)
		}
		if res.d = ld.Decision; err == nil {
			res.setLayers(ld)
		}
	}
	if err == nil {
		return true
	}
	e.report(res.req, err)
	if errors.Is(err, core.ErrCostTooHigh) {
		res.refuse(costTooHighResponse(res.cost, res.d))
		e.peekState(res)
		return false
	}
	refuseError(res, ctx, err)
	return false
}

// limiterContext returns the context the limiter is asked with: the
// request's, which says so when the request is keyed by its FallbackKey.
func limiterContext(res *Result) context.Context {
	ctx := res.req.Context()
	if res.fallback {
		ctx = keyfallback.With(ctx) // one allocation, on this path only
	}
	return ctx
}

// refuseError refuses res for err, a limiter's error other than a cost
// above what it can ever allow.
func refuseError(res *Result, ctx context.Context, err error) {
	var u *core.UnavailableError
	switch {
	case errors.Is(err, core.ErrEmptyKey):
		res.refuse(invalidKeyResponse())
	case errors.Is(err, core.ErrInvalidCost):
		res.refuse(invalidCostResponse())
	case ctx.Err() != nil:
		// The client went away (or its deadline passed) while the
		// limiter was asked: nothing to serve it.
		res.refuse(canceledResponse(res.d))
	case errors.As(err, &u):
		res.retry = u.RetryAfter
		res.refuse(unavailableResponse(res.retry))
	default:
		// Not a store failure the composition decided: no answer is
		// known to be right, and none is served unchecked.
		res.retry = failClosedRetry
		res.refuse(unavailableResponse(res.retry))
	}
}

// peekState records the key's state as it is, counting nothing, so that a
// refusal that decided nothing (a cost above what the policy allows)
// carries the rate headers as every other answer does. A limiter that
// fails to answer leaves the refusal without them.
func (e *Engine) peekState(res *Result) {
	ctx := res.req.Context()
	var ld core.LayeredDecision
	var err error
	if e.lay != nil {
		ld, err = e.lay.PeekLayers(ctx, res.key, 1)
	} else {
		ld.Decision, err = e.f.Unwrap().Peek(ctx, res.key, 1)
	}
	if err != nil || ld.Limit <= 0 {
		return
	}
	res.setLayers(ld)
	res.rate = res.layersLimited()
}

// outcome settles a decided request: served (after a leaky bucket's
// Delay), or denied with 429 or the [WithDenied] response, or served all
// the same in a dry run.
func (e *Engine) outcome(res *Result) {
	// A Decision of the error policy, or without a policy (a Failover's
	// over a limiter whose policy it cannot know) has no limit to
	// describe: no rate headers then.
	d := &res.d
	res.rate = res.lim != nil && d.Limit > 0 && res.layersLimited()
	if d.Allowed {
		e.allowed(res)
		return
	}
	res.denied = true
	if e.cfg.dryRun != nil {
		e.cfg.dryRun(res.req, *d)
		res.serve = true
		return
	}
	res.refuse(e.deniedResponse(res))
}

// allowed serves an allowed request, once a leaky bucket's Delay has
// passed; a request whose context ends first is refused.
func (e *Engine) allowed(res *Result) {
	// Only what a limiter counted is given back, never the error policy's
	// Decision.
	res.charge = e.cfg.countIf != nil && res.lim != nil
	res.settle = e.cfg.settle && res.lim != nil
	if d := res.d.Delay; d > 0 && e.cfg.dryRun == nil && ctxsleep.Sleep(res.req.Context(), d) != nil {
		res.Done(0) // not served: give its units back if it was to be judged
		res.refuse(canceledResponse(res.d))
		return
	}
	res.serve, res.counted = true, res.lim != nil
}

// deniedResponse returns the response to a denied request: [DeniedResponse]
// naming the layer that denied, or the [WithDenied] function's, with
// Retry-After and Cache-Control: no-store.
func (e *Engine) deniedResponse(res *Result) Response {
	d := res.d
	if e.cfg.denied == nil {
		named := d // the problem names the layer as its RateLimit member does
		named.Policy.Name = e.deniedName(res)
		resp := DeniedResponse(named)
		resp.Header[hRetryAfter] = retryAfterValue(d.RetryAfter)
		return resp
	}
	resp := e.cfg.denied(res.req, d)
	if resp.Status == 0 {
		resp.Status = http.StatusTooManyRequests
	}
	h := http.Header{"Cache-Control": {"no-store"}, hRetryAfter: retryAfterValue(d.RetryAfter)}
	for k, v := range resp.Header {
		h[http.CanonicalHeaderKey(k)] = v
	}
	resp.Header = h
	return resp
}

// deniedName returns the name of the policy that denied res, as its
// RateLimit member names it.
func (e *Engine) deniedName(res *Result) string {
	if res.layers == nil {
		return PolicyName(res.d.Policy)
	}
	return e.layerHeadersFor(res.layers).names[res.layer]
}

// refuse makes r a refusal with resp.
func (r *Result) refuse(resp Response) {
	r.serve, r.charge, r.resp = false, false, &resp
}

// now returns the engine's time, in nanoseconds since New, for the elapsed
// time of a refund: on the system clock it reads the monotonic clock alone
// (time.Since), half the cost of a time.Now, which reads the wall clock
// too.
func (e *Engine) now() int64 {
	if e.system {
		return int64(time.Since(e.base))
	}
	return int64(e.cfg.clock.Now().Sub(e.base))
}

// since returns the time elapsed since start, a time of [Engine.now], or
// of the limiter's clock when memTime is set.
func (e *Engine) since(start int64) time.Duration {
	if e.memTime {
		return time.Duration(memNow(e.mem) - start)
	}
	return time.Duration(e.now() - start)
}

// memAllow, memNow and memSystem decide on a Memory limiter with the clock
// reading it decided at, read its clock, and say whether it is the system
// clock (internal/memtime).
var (
	memAllow  = memtime.Allow.(func(*core.Memory, string, int64) (core.Decision, int64, error))
	memNow    = memtime.Now.(func(*core.Memory) int64)
	memSystem = memtime.System.(func(*core.Memory) bool)
)

func (e *Engine) report(req keyfunc.Request, err error) {
	if e.cfg.errorHook != nil {
		e.cfg.errorHook(req, err)
	}
}
