package core

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Op says what an [Event] reports: a call to a [Limiter] method, or
// something a [Failover] saw.
type Op uint8

const (
	// OpAllow reports a call to AllowN.
	OpAllow Op = iota
	// OpPeek reports a call to Peek.
	OpPeek
	// OpReset reports a call to Reset: the Event has no Decision.
	OpReset
	// OpStoreError reports an outage error that a [Failover] met and
	// decided by its failure mode, so that its caller got no error; Err is
	// the store's error. See [WithObserver].
	OpStoreError
	// OpBreakerOpen reports that a [Failover]'s circuit breaker opened.
	OpBreakerOpen
	// OpBreakerClose reports that a [Failover]'s circuit breaker closed.
	OpBreakerClose
	// OpRefund reports a call to Refund (see [Refunder]): the Event has no
	// Decision; Cost is the units given back.
	OpRefund
)

var opNames = [...]string{
	OpAllow:        "allow",
	OpPeek:         "peek",
	OpReset:        "reset",
	OpStoreError:   "store-error",
	OpBreakerOpen:  "breaker-open",
	OpBreakerClose: "breaker-close",
	OpRefund:       "refund",
}

// String returns the op's name, such as "allow" or "breaker-open".
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Outcome is what an [Event] came to: allowed, denied or an error.
type Outcome uint8

const (
	// OutcomeAllowed is an allowed Decision (and a Reset that succeeded).
	OutcomeAllowed Outcome = iota
	// OutcomeDenied is a denied Decision.
	OutcomeDenied
	// OutcomeError is a call that returned an error, whatever its Decision.
	OutcomeError
)

var outcomeNames = [...]string{OutcomeAllowed: "allowed", OutcomeDenied: "denied", OutcomeError: "error"}

// String returns "allowed", "denied" or "error".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Event is one thing an [Observer] is told: a decision of an [Observed] or
// [Shadow] limiter, or a store error or breaker transition of a [Failover]
// (see [WithObserver]).
type Event struct {
	// Op says what happened.
	Op Op

	// Policy is the name of the policy the event is about: the name given
	// with [WithPolicyName], else that of the limiter's Policy method, else
	// the Decision's Policy.Name. It may be empty for an unnamed policy.
	Policy string

	// KeyClass is what the [WithKeyClass] function made of the key, such
	// as "ip" or "api-key": a label from a small, fixed set. Empty without
	// such a function, and for Failover events.
	KeyClass string

	// Key is the raw key, only with [WithRawKey]; empty otherwise, and
	// for Failover events. An observer that writes it anywhere should hash
	// it first (see [KeyHash]).
	Key string

	// Cost is the n of AllowN, Peek or Refund; 0 for the other ops.
	Cost int64

	// Decision is what AllowN or Peek returned; zero for the other ops.
	Decision Decision

	// Latency is how long the limiter took to decide, on the observing
	// limiter's clock ([WithClock]); 0 for Failover events.
	Latency time.Duration

	// Err is the error the call returned, or the store's error for
	// OpStoreError; nil otherwise.
	Err error

	// Shadow reports a decision of a [Shadow] limiter's candidate policy:
	// what it would have decided, had it been enforced. Nothing was
	// enforced by it.
	Shadow bool
}

// Outcome returns OutcomeError when e.Err is set, else OutcomeDenied for a
// denied AllowN or Peek, else OutcomeAllowed.
func (e *Event) Outcome() Outcome {
	switch {
	case e.Err != nil:
		return OutcomeError
	case (e.Op == OpAllow || e.Op == OpPeek) && !e.Decision.Allowed:
		return OutcomeDenied
	}
	return OutcomeAllowed
}

// CallerError reports whether err is the caller's doing rather than a
// store's: an empty key, a cost that is not positive or can never fit
// ([ErrEmptyKey], [ErrInvalidCost], [ErrCostTooHigh]), a negative elapsed
// time or a limiter that cannot refund ([ErrInvalidElapsed],
// [ErrNoRefund]), or a context that was cancelled or ran out. Observers log
// store errors louder than these.
func CallerError(err error) bool {
	return errors.Is(err, ErrEmptyKey) || errors.Is(err, ErrInvalidCost) || errors.Is(err, ErrCostTooHigh) ||
		errors.Is(err, ErrInvalidElapsed) || errors.Is(err, ErrNoRefund) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// An Observer is told about every [Event] of the limiters it observes.
//
// Observe is called on the goroutine of the request, after the limiter
// decided and before its caller sees the Decision, so it must be quick
// (count, or log at a level that is usually off) and must not block. It
// must be safe for concurrent use.
type Observer interface {
	// Observe is told about one event; ctx is the request's context (a
	// background context for Failover events).
	Observe(ctx context.Context, e Event)
}

// A PolicyObserver is an [Observer] that can prepare, once, for the events
// of one policy, such as a metrics observer resolving that policy's series
// ahead of time. [NewObserved], [NewShadow] and [WithObserver] call
// ObserverFor once when they know the policy name of every event they will
// report, and report to the Observer it returns instead.
type PolicyObserver interface {
	Observer
	// ObserverFor returns an Observer for the events whose Policy is
	// policy; it may still be given others and must then handle them as
	// the PolicyObserver would.
	ObserverFor(policy string) Observer
}

// observerFor returns obs prepared for policy, when it can be.
func observerFor(obs Observer, policy string) Observer {
	if p, ok := obs.(PolicyObserver); ok {
		if o := p.ObserverFor(policy); o != nil {
			return o
		}
	}
	return obs
}

// ObserverFunc is a function that is an [Observer].
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Observers returns an [Observer] that tells each of obs every event, in
// order, such as a metrics observer and a [SlogObserver]. Nil observers are
// skipped.
func Observers(obs ...Observer) Observer {
	var list multiObserver
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	if len(list) == 1 {
		return list[0]
	}
	return list
}

type multiObserver []Observer

func (m multiObserver) Observe(ctx context.Context, e Event) {
	for _, o := range m {
		o.Observe(ctx, e)
	}
}

// ObserverFor prepares each observer for policy.
func (m multiObserver) ObserverFor(policy string) Observer {
	bound := make(multiObserver, len(m))
	for i, o := range m {
		bound[i] = observerFor(o, policy)
	}
	return bound
}

// ObserveOption configures an [Observed] or [Shadow] limiter:
// [WithPolicyName], [WithKeyClass], [WithRawKey] or [WithClock].
type ObserveOption interface{ applyObserve(*observeOptions) }

type observeOptions struct {
	policy    string
	hasPolicy bool
	keyClass  func(key string) string
	rawKey    bool
	clock     Clock
}

// WithPolicyName sets the policy name events carry, such as "api" or, for a
// [Shadow] candidate, "api-v2". Default: the name of the limiter's policy
// when it has a Policy method (both stores do), else the name of each
// Decision's policy.
func WithPolicyName(name string) ObserveOption {
	return observeOption(func(o *observeOptions) { o.policy, o.hasPolicy = name, true })
}

// WithKeyClass sets a function that maps a key to its class, such as
// "ip" or "api-key", for [Event.KeyClass]. Its results must come from a
// small, fixed set: they may become log fields or metric labels. It must be
// safe for concurrent use and quick. Default: no key class.
func WithKeyClass(f func(key string) string) ObserveOption {
	return observeOption(func(o *observeOptions) { o.keyClass = f })
}

// WithRawKey hands the raw key to the observer in [Event.Key], for an
// observer that hashes it (a [SlogObserver] logs [KeyHash] of it, never the
// key itself). Default: events carry no key.
func WithRawKey() ObserveOption {
	return observeOption(func(o *observeOptions) { o.rawKey = true })
}

// observer is what Observed and Shadow share: the observer, the options,
// and a stopwatch.
type observer struct {
	obs      Observer
	policy   string
	fixed    bool // policy is fixed: from WithPolicyName or a Policy method
	keyClass func(string) string
	rawKey   bool
	clock    Clock
	base     time.Time
	system   bool
	nanos    nanoClock
}

func newObserver(name string, l Limiter, obs Observer, opts []ObserveOption) (observer, error) {
	if l == nil {
		return observer{}, errors.New("core: " + name + ": a limiter is required")
	}
	if obs == nil {
		return observer{}, errors.New("core: " + name + ": an observer is required")
	}
	o := observeOptions{clock: SystemClock{}}
	for _, opt := range opts {
		if opt == nil {
			return observer{}, errors.New("core: " + name + ": nil option")
		}
		opt.applyObserve(&o)
	}
	if o.clock == nil {
		return observer{}, errors.New("core: " + name + ": WithClock(nil): a clock is required")
	}
	w := observer{obs: obs, policy: o.policy, fixed: o.hasPolicy, keyClass: o.keyClass, rawKey: o.rawKey, clock: o.clock}
	if !w.fixed {
		if p, ok := policyOf(l); ok && p.Name != "" {
			w.policy, w.fixed = p.Name, true
		}
	}
	if w.fixed {
		w.obs = observerFor(obs, w.policy)
	}
	w.base = o.clock.Now()
	_, w.system = o.clock.(SystemClock)
	w.nanos, _ = o.clock.(nanoClock)
	return w, nil
}

// now returns the stopwatch's reading in nanoseconds since construction:
// monotonic on the system clock, which costs one clock read.
func (w *observer) now() int64 {
	switch {
	case w.system:
		return int64(time.Since(w.base))
	case w.nanos != nil:
		return w.nanos.unixNano()
	}
	return int64(w.clock.Now().Sub(w.base))
}

// report tells the observer about one call that started at start.
func (w *observer) report(ctx context.Context, op Op, key string, n int64, d Decision, err error, start int64, shadow bool) {
	w.reportTook(ctx, op, key, n, d, err, w.now()-start, shadow)
}

// reportTook tells the observer about one call that took took ns.
func (w *observer) reportTook(ctx context.Context, op Op, key string, n int64, d Decision, err error, took int64, shadow bool) {
	e := Event{Op: op, Policy: w.policy, Cost: n, Decision: d, Err: err, Shadow: shadow}
	e.Latency = time.Duration(max(took, 0))
	if !w.fixed {
		e.Policy = d.Policy.Name
	}
	if w.keyClass != nil {
		e.KeyClass = w.keyClass(key)
	}
	if w.rawKey {
		e.Key = key
	}
	w.obs.Observe(ctx, e)
}

// Observed is a [Limiter] that decides by another and tells an [Observer]
// about every call: the policy name, the key's class (never the key itself
// unless [WithRawKey] says so), the Decision, the time the limiter took
// and the error. It changes no decision and returns what the limiter
// returned.
//
// Wrap the outermost limiter a request goes through (a [Layered] limiter,
// not its layers; a [Failover], not its remote limiter), once: an Observed
// is not a [Memory] and cannot be a layer. Its cost is two clock reads and
// the observer's own, or one clock read over a Memory on the same clock
// (the Memory's own reading starts the stopwatch); a limiter that is not
// wrapped pays nothing.
//
// An Observed is safe for concurrent use. Create one with [NewObserved].
type Observed struct {
	l   Limiter
	lay LayeredLimiter // l, when it is layered
	mem *Memory        // l, when it is a Memory on the observer's clock
	ref Refunder       // l, when it can refund
	w   observer
}

var (
	_ Limiter        = (*Observed)(nil)
	_ LayeredLimiter = (*Observed)(nil)
	_ Refunder       = (*Observed)(nil)
)

// NewObserved returns a limiter that decides by l and reports every call to
// obs. It fails if l or obs is nil or an option is invalid.
func NewObserved(l Limiter, obs Observer, opts ...ObserveOption) (*Observed, error) {
	w, err := newObserver("NewObserved", l, obs, opts)
	if err != nil {
		return nil, err
	}
	o := &Observed{l: l, w: w, ref: refunderOf(l)}
	o.lay, _ = AsLayered(l)
	if m, ok := l.(*Memory); ok && (m.system && w.system || m.nanos != nil && m.nanos == w.nanos) {
		// Time the call with the limiter's own clock readings: the one it
		// decides by starts the stopwatch, one clock read instead of two.
		o.mem = m
	}
	return o, nil
}

// Policy returns the observed limiter's policy, when it has a Policy
// method that returns a valid Policy, else the zero Policy (as
// [DenialCache.Policy] does).
func (o *Observed) Policy() Policy {
	p, _ := policyOf(o.l)
	return p
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (o *Observed) Allow(ctx context.Context, key string) (Decision, error) {
	return o.AllowN(ctx, key, 1)
}

// AllowN returns what the observed limiter's AllowN returns, after
// reporting it as an [OpAllow] event.
func (o *Observed) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	if o.mem != nil {
		start := o.mem.nowNs()
		var d Decision
		err := o.mem.decideInto(&d, key, n, true, micros(start))
		o.w.reportTook(ctx, OpAllow, key, n, d, err, o.mem.nowNs()-start, false)
		return d, err
	}
	start := o.w.now()
	d, err := o.l.AllowN(ctx, key, n)
	o.w.report(ctx, OpAllow, key, n, d, err, start, false)
	return d, err
}

// Peek returns what the observed limiter's Peek returns, after reporting it
// as an [OpPeek] event.
func (o *Observed) Peek(ctx context.Context, key string, n int64) (Decision, error) {
	if o.mem != nil {
		start := o.mem.nowNs()
		var d Decision
		err := o.mem.decideInto(&d, key, n, false, micros(start))
		o.w.reportTook(ctx, OpPeek, key, n, d, err, o.mem.nowNs()-start, false)
		return d, err
	}
	start := o.w.now()
	d, err := o.l.Peek(ctx, key, n)
	o.w.report(ctx, OpPeek, key, n, d, err, start, false)
	return d, err
}

// AllowLayers returns what the observed limiter's AllowLayers returns,
// when it is a [LayeredLimiter], after reporting its Decision as an
// [OpAllow] event, as AllowN does. A limiter that is not layered counts as
// one layer: AllowLayers returns [MostRestrictive] of its AllowN Decision,
// which HTTP middleware writes exactly as the Decision alone. (An Observed
// has these methods whatever it observes, so that observing a layered
// limiter does not hide its layers; see [Failover] for why. Over a limiter
// that is not layered they cost one allocation more than AllowN.)
func (o *Observed) AllowLayers(ctx context.Context, key string, n int64) (LayeredDecision, error) {
	start := o.w.now()
	ld, err := layersOf(ctx, o.l, o.lay, key, n, Limiter.AllowN, LayeredLimiter.AllowLayers)
	o.w.report(ctx, OpAllow, key, n, ld.Decision, err, start, false)
	return ld, err
}

// PeekLayers reports what AllowLayers would decide now, counting nothing,
// after reporting its Decision as an [OpPeek] event.
func (o *Observed) PeekLayers(ctx context.Context, key string, n int64) (LayeredDecision, error) {
	start := o.w.now()
	ld, err := layersOf(ctx, o.l, o.lay, key, n, Limiter.Peek, LayeredLimiter.PeekLayers)
	o.w.report(ctx, OpPeek, key, n, ld.Decision, err, start, false)
	return ld, err
}

// Reset returns what the observed limiter's Reset returns, after reporting
// it as an [OpReset] event.
func (o *Observed) Reset(ctx context.Context, key string) error {
	start := o.w.now()
	err := o.l.Reset(ctx, key)
	o.w.report(ctx, OpReset, key, 0, Decision{}, err, start, false)
	return err
}

// policyOf returns l's policy and whether it is known: l has a Policy
// method and it returns a valid Policy. The wrappers' Policy methods
// ([DenialCache.Policy], [Leased.Policy], [Observed.Policy],
// [Shadow.Policy]) return the zero Policy when they do not know theirs,
// which must not be taken for a policy with a capacity of 0. It returns
// the zero Policy when the policy is unknown.
func policyOf(l Limiter) (Policy, bool) {
	if p, ok := l.(interface{ Policy() Policy }); ok {
		if pol := p.Policy(); pol.Validate() == nil {
			return pol, true
		}
	}
	return Policy{}, false
}

// WithObserver returns a [FailoverOption] that reports the Failover's
// outage errors ([OpStoreError]) and circuit breaker transitions
// ([OpBreakerOpen], [OpBreakerClose]) to obs as events of the named policy,
// with a background context. An [Observed] limiter around the Failover does
// not see those errors: the Failover decides such requests by its error
// policy and returns no error.
//
// It keeps the hooks set before it by [WithStoreErrorHook] and
// [WithBreakerHook] (and calls them first); one of those set after it
// replaces its own.
func WithObserver(obs Observer, policy string) FailoverOption {
	return failoverOption(func(f *Failover) {
		if obs == nil {
			return
		}
		obs = observerFor(obs, policy)
		prevErr, prevBreaker := f.hook, f.onBreaker
		f.hook = func(err error) {
			if prevErr != nil {
				prevErr(err)
			}
			obs.Observe(context.Background(), Event{Op: OpStoreError, Policy: policy, Err: err})
		}
		f.onBreaker = func(open bool) {
			if prevBreaker != nil {
				prevBreaker(open)
			}
			op := OpBreakerClose
			if open {
				op = OpBreakerOpen
			}
			obs.Observe(context.Background(), Event{Op: op, Policy: policy})
		}
	})
}

// Refund returns what the observed limiter's Refund returns, after
// reporting it as an [OpRefund] event. When the observed limiter cannot
// refund (see [AsRefunder]), it returns, and reports, an error wrapping
// [ErrNoRefund].
func (o *Observed) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	start := o.w.now()
	var err error
	if o.ref != nil {
		err = o.ref.Refund(ctx, key, n, elapsed)
	} else {
		err = noRefund("observed", o.l)
	}
	o.w.report(ctx, OpRefund, key, n, Decision{}, err, start, false)
	return err
}

// Unwrap returns the observed limiter, the one Observed passes requests
// to (see [AsLayered] and [AsRefunder]).
func (o *Observed) Unwrap() Limiter { return o.l }
