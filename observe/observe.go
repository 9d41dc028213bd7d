// Package observe reports what ratekit limiters decide, for metrics, logs
// and trying a policy before enforcing it.
//
// Every report is an [Event] told to an [Observer] ([ObserverFunc] for a
// function, [Observers] for several, [PolicyObserver] for one that
// prepares per policy):
//
//   - [New] wraps a [core.Limiter] in a [Limiter] that reports every call:
//     the policy, the key's class, the Decision, the latency and the error.
//   - [NewShadow] enforces one limiter and reports what a candidate would
//     have decided, so that a new limit can be watched on live traffic.
//   - [FailoverHooks] reports a [core.Failover]'s store errors and circuit
//     breaker transitions.
//   - [NewSlog] is an Observer that logs denials and store errors through
//     log/slog, with keys hashed by [KeyHash], never in the clear.
//
// A rule set's limiter (rules.NewObservedLimiter) reports to an Observer
// too: an Event per limit a request reaches, named by [Event.Rule] and
// [Event.Policy].
//
// An Event says what happened ([Op]) and what it came to ([Event.Outcome],
// an [Outcome]). [New] and [NewShadow] take the options [WithPolicyName],
// [WithKeyClass], [WithRawKey] and [WithClock]; [NewSlog] takes the salt of
// its [KeyHash]. A Limiter and a Shadow pass on the capabilities of the
// limiter they enforce ([core.As]). Prometheus and OpenTelemetry metrics are
// Observers in the ratekitprom and ratekitotel modules.
package observe

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keyfallback"
)

// Op says what an [Event] reports: a call to a [core.Limiter] method, or
// something a [core.Failover] saw.
type Op uint8

const (
	// OpAllow reports a call to AllowN.
	OpAllow Op = iota
	// OpPeek reports a call to Peek.
	OpPeek
	// OpReset reports a call to Reset: the Event has no Decision.
	OpReset
	// OpStoreError reports an outage error that a [core.Failover] met and
	// decided by its failure mode, so that its caller got no error; Err is
	// the store's error. See [FailoverHooks].
	OpStoreError
	// OpBreakerOpen reports that a [core.Failover]'s circuit breaker opened.
	OpBreakerOpen
	// OpBreakerClose reports that a [core.Failover]'s circuit breaker closed.
	OpBreakerClose
	// OpRefund reports a call to Refund (see [core.Refunder]): the Event has no
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

// Event is one thing an [Observer] is told: a decision of a [Limiter] or
// [Shadow] limiter, or of one limit of a rules Limiter's rule set, or a
// store error or breaker transition of a [core.Failover] (see
// [FailoverHooks]).
type Event struct {
	// Op says what happened.
	Op Op

	// Policy is the name of the policy the event is about: the name given
	// with [WithPolicyName], else that of the limiter's Policy method, else
	// the Decision's Policy.Name. It may be empty for an unnamed policy.
	// For an event of a rules Limiter, it is the limit's name, which is
	// its policy's.
	Policy string

	// Rule is the name of the rule, in a rules Limiter's rule set, whose
	// limit the event is about: Rule and Policy name the limit, whose ID
	// is Rule + "/" + Policy. Both come from the rule set, never from a
	// request. Empty for the events of limiters outside a rule set.
	Rule string

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
	Decision core.Decision

	// Latency is how long the limiter took to decide, on the observing
	// limiter's clock ([WithClock]); 0 for Failover events. For a rule
	// set's enforced limit, the time its rule's limits took to decide, on
	// their clock; 0 for its shadow limits.
	Latency time.Duration

	// Err is the error the call returned, or the store's error for
	// OpStoreError; nil otherwise.
	Err error

	// Shadow reports a decision of a [Shadow] limiter's candidate policy,
	// or of a rule set's shadow limit: what it would have decided, had it
	// been enforced. Nothing was enforced by it.
	Shadow bool

	// KeyFallback reports a request that an HTTP or RPC adapter keyed by
	// its fallback key function (httplimit.FallbackKey), its own key being
	// missing or unusable: a limit meant per account, say, applied per
	// address. The metrics count such decisions apart.
	KeyFallback bool
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
// ahead of time. [New], [NewShadow] and [FailoverHooks] call
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
// order, such as a metrics observer and a [Slog]. Nil observers are
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

// Option configures a [Limiter] or a [Shadow]: [WithPolicyName],
// [WithKeyClass], [WithRawKey] or [WithClock].
type Option func(*options)

type options struct {
	policy    string
	hasPolicy bool
	keyClass  func(key string) string
	rawKey    bool
	clock     core.Clock
}

// WithPolicyName sets the policy name events carry, such as "api" or, for a
// [Shadow] candidate, "api-v2". Default: the name of the limiter's policy
// when it has a Policy method (both stores do), else the name of each
// Decision's policy.
func WithPolicyName(name string) Option {
	return Option(func(o *options) { o.policy, o.hasPolicy = name, true })
}

// WithKeyClass sets a function that maps a key to its class, such as
// "ip" or "api-key", for [Event.KeyClass]. Its results must come from a
// small, fixed set: they may become log fields or metric labels. It must be
// safe for concurrent use and quick. Default: no key class.
func WithKeyClass(f func(key string) string) Option {
	return Option(func(o *options) { o.keyClass = f })
}

// WithRawKey hands the raw key to the observer in [Event.Key], for an
// observer that hashes it (a [Slog] logs [KeyHash] of it, never the
// key itself). Default: events carry no key.
func WithRawKey() Option {
	return Option(func(o *options) { o.rawKey = true })
}

// WithClock sets the clock latency is measured on (monotonically on
// [core.SystemClock], with one clock read at the start of a call and one at
// its end). It should be the observed limiter's clock. It fails the
// constructor if c is nil. Default: [core.SystemClock].
func WithClock(c core.Clock) Option {
	return Option(func(o *options) { o.clock = c })
}

// observer is what Limiter and Shadow share: the observer, the options,
// and a stopwatch.
type observer struct {
	obs      Observer
	policy   string
	fixed    bool // policy is fixed: from WithPolicyName or a Policy method
	keyClass func(string) string
	rawKey   bool
	clock    core.Clock
	base     time.Time
	system   bool
}

func newObserver(name string, l core.Limiter, obs Observer, opts []Option) (observer, error) {
	if l == nil {
		return observer{}, errors.New("observe: " + name + ": a limiter is required")
	}
	if obs == nil {
		return observer{}, errors.New("observe: " + name + ": an observer is required")
	}
	o := options{clock: core.SystemClock{}}
	for i, opt := range opts {
		if opt == nil {
			return observer{}, fmt.Errorf("observe: %s: option %d is nil", name, i+1)
		}
		opt(&o)
	}
	if o.clock == nil {
		return observer{}, errors.New("observe: " + name + ": WithClock(nil): a clock is required")
	}
	w := observer{obs: obs, policy: o.policy, fixed: o.hasPolicy, keyClass: o.keyClass, rawKey: o.rawKey, clock: o.clock}
	if !w.fixed {
		if p, ok := core.As[core.PolicyReporter](l); ok && p.Policy().Name != "" {
			w.policy, w.fixed = p.Policy().Name, true
		}
	}
	if w.fixed {
		w.obs = observerFor(obs, w.policy)
	}
	w.base = o.clock.Now()
	_, w.system = o.clock.(core.SystemClock)
	return w, nil
}

// now returns the stopwatch's reading in nanoseconds since construction:
// monotonic on the system clock, which costs one clock read.
func (w *observer) now() int64 {
	switch {
	case w.system:
		return int64(time.Since(w.base))
	}
	return int64(w.clock.Now().Sub(w.base))
}

// report tells the observer about one call that started at start.
func (w *observer) report(ctx context.Context, op Op, key string, n int64, d core.Decision, err error, start int64, shadow bool) {
	w.reportTook(ctx, op, key, n, d, err, w.now()-start, shadow)
}

// reportTook tells the observer about one call that took took ns.
func (w *observer) reportTook(ctx context.Context, op Op, key string, n int64, d core.Decision, err error, took int64, shadow bool) {
	e := Event{Op: op, Policy: w.policy, Cost: n, Decision: d, Err: err, Shadow: shadow, KeyFallback: keyfallback.In(ctx)}
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

// Limiter is a [core.Limiter] that decides by another and tells an [Observer]
// about every call: the policy name, the key's class (never the key itself
// unless [WithRawKey] says so), the Decision, the time the limiter took
// and the error. It changes no decision and returns what the limiter
// returned.
//
// Wrap the outermost limiter a request goes through (a [core.Layered] limiter,
// not its layers; a [core.Failover], not its remote limiter), once: a
// Limiter is not a [core.Memory] and cannot be a layer. Its cost is two
// clock reads and the observer's own; a limiter that is not wrapped pays
// nothing.
//
// A Limiter is safe for concurrent use. Create one with [New].
type Limiter struct {
	l   core.Limiter
	lay core.LayeredLimiter // l, when it is layered
	pol core.Policy         // l's, when it has one
	ref core.Refunder       // l, when it can refund
	w   observer
}

var (
	_ core.Limiter        = (*Limiter)(nil)
	_ core.LayeredLimiter = (*Limiter)(nil)
	_ core.Refunder       = (*Limiter)(nil)
)

// New returns a limiter that decides by l and reports every call to
// obs. It fails if l or obs is nil or an option is invalid.
func New(l core.Limiter, obs Observer, opts ...Option) (*Limiter, error) {
	w, err := newObserver("New", l, obs, opts)
	if err != nil {
		return nil, err
	}
	o := &Limiter{l: l, w: w}
	o.ref, _ = core.As[core.Refunder](l)
	o.lay, _ = core.As[core.LayeredLimiter](l)
	if p, ok := core.As[core.PolicyReporter](l); ok {
		o.pol = p.Policy()
	}
	return o, nil
}

// Policy returns the observed limiter's policy, or the zero Policy when it
// has none (see [core.PolicyReporter]).
func (o *Limiter) Policy() core.Policy { return o.pol }

// Allow is shorthand for AllowN(ctx, key, 1).
func (o *Limiter) Allow(ctx context.Context, key string) (core.Decision, error) {
	return o.AllowN(ctx, key, 1)
}

// AllowN returns what the observed limiter's AllowN returns, after
// reporting it as an [OpAllow] event.
func (o *Limiter) AllowN(ctx context.Context, key string, n int64) (core.Decision, error) {
	start := o.w.now()
	d, err := o.l.AllowN(ctx, key, n)
	o.w.report(ctx, OpAllow, key, n, d, err, start, false)
	return d, err
}

// Peek returns what the observed limiter's Peek returns, after reporting it
// as an [OpPeek] event.
func (o *Limiter) Peek(ctx context.Context, key string, n int64) (core.Decision, error) {
	start := o.w.now()
	d, err := o.l.Peek(ctx, key, n)
	o.w.report(ctx, OpPeek, key, n, d, err, start, false)
	return d, err
}

// AllowLayers returns what the observed limiter's AllowLayers returns,
// when it is a [core.LayeredLimiter], after reporting its Decision as an
// [OpAllow] event, as AllowN does. A limiter that is not layered counts as
// one layer: AllowLayers returns [core.MostRestrictive] of its AllowN Decision,
// which HTTP middleware writes exactly as the Decision alone, at the cost of
// one allocation more than AllowN. [core.As] finds a [core.LayeredLimiter]
// in a Limiter only when the observed limiter is one.
func (o *Limiter) AllowLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	start := o.w.now()
	ld, err := layersOf(ctx, o.l, o.lay, key, n, true)
	o.w.report(ctx, OpAllow, key, n, ld.Decision, err, start, false)
	return ld, err
}

// PeekLayers reports what AllowLayers would decide now, counting nothing,
// after reporting its Decision as an [OpPeek] event.
func (o *Limiter) PeekLayers(ctx context.Context, key string, n int64) (core.LayeredDecision, error) {
	start := o.w.now()
	ld, err := layersOf(ctx, o.l, o.lay, key, n, false)
	o.w.report(ctx, OpPeek, key, n, ld.Decision, err, start, false)
	return ld, err
}

// Reset returns what the observed limiter's Reset returns, after reporting
// it as an [OpReset] event.
func (o *Limiter) Reset(ctx context.Context, key string) error {
	start := o.w.now()
	err := o.l.Reset(ctx, key)
	o.w.report(ctx, OpReset, key, 0, core.Decision{}, err, start, false)
	return err
}

// FailoverHooks returns the options of [core.NewFailover] that report the
// Failover's outage errors ([OpStoreError]) and circuit breaker transitions
// ([OpBreakerOpen], [OpBreakerClose]) to obs as events of the named policy,
// with a background context: [core.WithErrorHook] and
// [core.WithBreakerHook]. A [Limiter] around the Failover does not see
// those errors: the Failover decides such requests by its error policy and
// returns no error. They replace hooks set before them, and hooks set after
// them replace theirs; to keep a hook of your own, call it from an
// [ObserverFunc] in obs.
//
//	opts := append(observe.FailoverHooks(obs, "api"), core.WithErrorPolicy(core.FallbackShare(4)))
//	f, err := core.NewFailover(remote, opts...)
func FailoverHooks(obs Observer, policy string) []core.FailoverOption {
	if obs == nil {
		return nil
	}
	obs = observerFor(obs, policy)
	return []core.FailoverOption{
		core.WithErrorHook(func(err error) {
			obs.Observe(context.Background(), Event{Op: OpStoreError, Policy: policy, Err: err})
		}),
		core.WithBreakerHook(func(open bool) {
			op := OpBreakerClose
			if open {
				op = OpBreakerOpen
			}
			obs.Observe(context.Background(), Event{Op: op, Policy: policy})
		}),
	}
}

// Refund returns what the observed limiter's Refund returns, after
// reporting it as an [OpRefund] event. When the observed limiter cannot
// refund (see [core.As]), it returns, and reports, an error wrapping
// [core.ErrNoRefund].
func (o *Limiter) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	start := o.w.now()
	var err error
	if o.ref != nil {
		err = o.ref.Refund(ctx, key, n, elapsed)
	} else {
		err = noRefund("observed", o.l)
	}
	o.w.report(ctx, OpRefund, key, n, core.Decision{}, err, start, false)
	return err
}

// Unwrap returns the observed limiter, the one Limiter passes requests
// to (see [core.Wrapper]).
func (o *Limiter) Unwrap() core.Limiter { return o.l }

// layersOf asks l for every layer's Decision: by AllowLayers or PeekLayers
// when l is layered (lay, not nil, is then l), else by AllowN or Peek, as
// one layer: [core.MostRestrictive] of its Decision or, with an error, the
// Decision with no Layers, as a layered limiter's errors have.
func layersOf(ctx context.Context, l core.Limiter, lay core.LayeredLimiter, key string, n int64, allow bool) (core.LayeredDecision, error) {
	if lay != nil {
		if allow {
			return lay.AllowLayers(ctx, key, n)
		}
		return lay.PeekLayers(ctx, key, n)
	}
	var d core.Decision
	var err error
	if allow {
		d, err = l.AllowN(ctx, key, n)
	} else {
		d, err = l.Peek(ctx, key, n)
	}
	if err != nil {
		return core.LayeredDecision{Decision: d}, err
	}
	return core.MostRestrictive([]core.Decision{d}), nil
}

// noRefund returns core.ErrNoRefund, wrapped, naming the limiter that
// cannot refund.
func noRefund(who string, l core.Limiter) error {
	return fmt.Errorf("observe: %s: %T: %w", who, l, core.ErrNoRefund)
}
