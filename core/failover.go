package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/internal/failover"
)

// Failover is a [Limiter] that decides by a remote limiter (such as the
// Redis store) while it works and by an [ErrorPolicy] when it does not. The
// HTTP middleware and the RPC interceptors build on it, so a request gets
// the same answer under any of them.
//
// An outage is any error of the remote limiter but the caller's own
// ([CallerError]), which is returned as it is. Each outage error goes to the
// [WithErrorHook] hook, and the error policy decides the request:
//
//   - [FailOpen]: allowed with a nil error, as a new key would be
//     (Remaining is the policy's capacity less n, ResetAfter 0);
//   - [Fallback]: the local limiter's Decision;
//   - [FailClosed], or a Fallback limiter that fails too: an
//     [UnavailableError] saying when to retry.
//
// Limit and Policy are those the remote limiter reports ([PolicyReporter]),
// or zero if it reports none (FailOpen then accepts any cost).
//
// A circuit breaker ([WithBreaker], default 3 consecutive outages and a 5 s
// cool-down) stops calling a failing store: requests are decided by the
// error policy at once until, after each cool-down, one request probes the
// store and its success closes the breaker.
//
// A Failover passes on its remote limiter's [LayeredLimiter] and [Refunder]
// capabilities. It is safe for concurrent use. Create one with
// [NewFailover].
type Failover struct {
	// Why every Failover has AllowLayers and PeekLayers: docs/failure.md.

	remote    Limiter
	local     Limiter        // nil unless the error policy is Fallback
	remoteLay LayeredLimiter // remote, when it is layered
	localLay  LayeredLimiter // local, when it is layered
	remoteRef Refunder       // remote, when it can refund
	localRef  Refunder       // local, when it can refund
	onError   ErrorPolicy
	pol       PolicyReporter // remote, when it knows its policy (which may change: Memory.SetPolicy)

	// share is FallbackShare's instances, whose local Memory follows the
	// remote's policy: shared is the remote policy it was last built or
	// set from, changed under shareMu.
	share     int
	shared    atomic.Pointer[Policy]
	shareMu   sync.Mutex
	failures  int64
	coolDown  time.Duration
	timeout   time.Duration
	clock     Clock
	hook      func(error)
	onBreaker func(open bool)

	fails     atomic.Int64 // consecutive outage errors
	openUntil atomic.Int64 // Unix ns when the next probe may go; 0 when closed (one load a request)
	probing   atomic.Bool  // a probe is in flight
}

var (
	_ Limiter        = (*Failover)(nil)
	_ LayeredLimiter = (*Failover)(nil)
	_ Refunder       = (*Failover)(nil)
)

// ErrBreakerOpen is returned by [Failover.Reset] when the circuit breaker is
// open and the remote store was therefore not called, and wrapped by the
// [UnavailableError] of a request refused then.
var ErrBreakerOpen = errors.New("circuit breaker open: the store was not called")

// FailoverOption configures a [Failover]: [WithErrorPolicy], [WithBreaker],
// [WithErrorHook], [WithBreakerHook], [WithTimeout] or [WithClock]
// (observe.FailoverHooks returns the two hooks that report to an Observer).
type FailoverOption interface{ applyFailover(*Failover) }

// WithErrorPolicy sets what a request gets when the remote limiter
// cannot decide it: [FailOpen], [FailClosed] or [Fallback] (see
// [ErrorPolicy]).
//
// Default: [FailOpen].
func WithErrorPolicy(p ErrorPolicy) FailoverOption {
	return failoverOption(func(f *Failover) { f.onError = p })
}

// WithBreaker opens the circuit breaker after failures consecutive outage
// errors (at least 1), and lets one request probe the store after coolDown
// (positive). Default: 3 failures, 5 s.
func WithBreaker(failures int, coolDown time.Duration) FailoverOption {
	return failoverOption(func(f *Failover) { f.failures, f.coolDown = int64(failures), coolDown })
}

// WithErrorHook sets a hook called with every outage error, from the
// goroutine of the request that met it; it must be safe for concurrent use
// and should not block (log, count). Default: none.
func WithErrorHook(hook func(error)) FailoverOption {
	return failoverOption(func(f *Failover) { f.hook = hook })
}

// WithBreakerHook sets a hook called with true when the circuit breaker
// opens and with false when it closes, once per transition, from the
// goroutine of the request that caused it; it must be safe for concurrent
// use and should not block (log, count). Default: none.
func WithBreakerHook(hook func(open bool)) FailoverOption {
	return failoverOption(func(f *Failover) { f.onBreaker = hook })
}

// WithTimeout bounds each call to the remote limiter: its context gets
// this timeout, and a call that runs out is an outage. Default (or 0): only
// the caller's context and the remote limiter's own timeouts.
func WithTimeout(d time.Duration) FailoverOption {
	return failoverOption(func(f *Failover) { f.timeout = d })
}

// NewFailover returns a limiter that decides by remote while it works and by
// the error policy (default [FailOpen]) when it fails. It fails if an option
// is invalid.
func NewFailover(remote Limiter, opts ...FailoverOption) (*Failover, error) {
	if remote == nil {
		return nil, errors.New("core: NewFailover: a remote limiter is required")
	}
	f := &Failover{remote: remote, failures: 3, coolDown: 5 * time.Second, clock: SystemClock{}}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("core: NewFailover: option %d is nil", i+1)
		}
		opt.applyFailover(f)
	}
	onError, err := f.onError.resolve(remote, f.clock)
	if err != nil {
		return nil, fmt.Errorf("core: NewFailover: %w", err)
	}
	f.onError = onError
	f.local = f.onError.local
	switch {
	case f.onError.fallback && f.local == nil:
		return nil, errors.New("core: NewFailover: Fallback(nil): a local limiter is required")
	case f.failures < 1:
		return nil, fmt.Errorf("core: NewFailover: WithBreaker(%d, ...): at least 1 failure", f.failures)
	case f.coolDown <= 0:
		return nil, fmt.Errorf("core: NewFailover: WithBreaker(..., %v): the cool-down must be positive", f.coolDown)
	case f.timeout < 0:
		return nil, fmt.Errorf("core: NewFailover: WithTimeout(%v): must not be negative", f.timeout)
	case f.clock == nil:
		return nil, errors.New("core: NewFailover: WithClock(nil): a clock is required")
	}
	f.pol, _ = As[PolicyReporter](remote)
	if f.share = f.onError.share; f.share > 0 && f.pol != nil {
		p := f.pol.Policy()
		f.shared.Store(&p)
	}
	f.remoteLay, _ = As[LayeredLimiter](remote)
	f.localLay, _ = As[LayeredLimiter](f.local)
	f.remoteRef = refunderOf(remote)
	if f.local != nil {
		f.localRef = refunderOf(f.local)
	}
	return f, nil
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (f *Failover) Allow(ctx context.Context, key string) (Decision, error) {
	return f.AllowN(ctx, key, 1)
}

// AllowN returns the remote limiter's Decision, or its error when that is
// the caller's own ([CallerError]). In an outage, or while the breaker is
// open, the error policy decides: under [FailOpen] allowed as a new key would
// be, with a nil error; under [Fallback] by the local limiter; under
// [FailClosed], or when the local limiter fails too, refused with an
// [UnavailableError] saying when to retry.
func (f *Failover) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	ld, _, _, err := f.check(ctx, key, n, Limiter.AllowN, nil, false)
	return ld.Decision, err
}

// Peek asks the remote limiter what AllowN would decide and, when it fails
// or the breaker is open, answers by the error policy (under [FailOpen],
// a new key's state: every unit left). It counts nothing, locally either.
func (f *Failover) Peek(ctx context.Context, key string, n int64) (Decision, error) {
	ld, by, _, err := f.check(ctx, key, n, Limiter.Peek, nil, false)
	return f.peekOpen(ld, by, err).Decision, err
}

// AllowLayers is AllowN that also returns every layer's Decision: the
// remote limiter's layers or, in an outage, the fallback limiter's; a
// limiter that is not layered, and the error policy's Decision, count as
// one layer, [MostRestrictive] of that one Decision, which HTTP middleware
// writes exactly as the Decision alone. See [LayeredLimiter].
func (f *Failover) AllowLayers(ctx context.Context, key string, n int64) (LayeredDecision, error) {
	ld, _, _, err := f.check(ctx, key, n, Limiter.AllowN, LayeredLimiter.AllowLayers, true)
	return ld, err
}

// PeekLayers reports what AllowLayers would decide now, counting nothing,
// locally either.
func (f *Failover) PeekLayers(ctx context.Context, key string, n int64) (LayeredDecision, error) {
	ld, by, _, err := f.check(ctx, key, n, Limiter.Peek, LayeredLimiter.PeekLayers, true)
	return f.peekOpen(ld, by, err), err
}

// peekOpen returns ld, which check decided, as a Peek reports it: the
// Decision of [FailOpen] (by nil, allowed), made for AllowN with n units
// counted, becomes a new key's state, with nothing counted.
func (f *Failover) peekOpen(ld LayeredDecision, by Limiter, err error) LayeredDecision {
	if by != nil || err != nil || !ld.Allowed || f.pol == nil {
		return ld
	}
	c := f.pol.Policy().Capacity()
	ld.Remaining = c
	for i := range ld.Layers {
		ld.Layers[i].Remaining = c
	}
	return ld
}

// Reset forgets key in the local fallback limiter, if any, and in the
// remote one. It returns the remote error, or [ErrBreakerOpen] (wrapped)
// when the breaker kept the store from being called.
func (f *Failover) Reset(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("core: %w", ErrEmptyKey)
	}
	if f.local != nil {
		if err := f.local.Reset(ctx, key); err != nil {
			return err
		}
	}
	call, probe := f.admit()
	if !call {
		return fmt.Errorf("core: failover: %w", ErrBreakerOpen)
	}
	rctx, cancel := f.remoteContext(ctx)
	err := f.remote.Reset(rctx, key)
	cancel()
	f.record(ctx, err, probe)
	return err
}

// Refund gives back n units in the remote limiter (see [Refunder]). It
// returns an error wrapping [ErrNoRefund] when the remote limiter cannot
// refund (see [As]), whatever the local one can.
//
// A refund is a call to the store like any other: its outage errors go to
// the [WithErrorHook] hook and count towards opening the breaker. When the
// remote refund fails with an outage error, or the open breaker keeps the
// store from being called, the request was most likely decided during the
// outage, by the error policy: with [Fallback], the units are given back in
// the local limiter, which is what decided then, and Refund returns its
// error (nil for a [Memory]). That local refund is a guess: for a request
// the remote limiter counted just before the outage, the local limiter
// holds nothing of it and gives back up to n units of requests it decided
// itself. Without a local limiter that can refund, Refund returns the
// outage error, or [ErrBreakerOpen] (wrapped), and the units stay counted
// remotely, if they were.
func (f *Failover) Refund(ctx context.Context, key string, n int64, elapsed time.Duration) error {
	if f.remoteRef == nil {
		return noRefund("failover", f.remote)
	}
	if c := f.capacity(); key == "" || n <= 0 || n > c || elapsed < 0 {
		return checkRefund(key, n, c, elapsed)
	}
	call, probe := f.admit()
	var err error
	if call {
		rctx, cancel := f.remoteContext(ctx)
		err = f.remoteRef.Refund(rctx, key, n, elapsed)
		cancel()
		if !f.record(ctx, err, probe) {
			return err
		}
	} else {
		err = fmt.Errorf("core: failover: %w", ErrBreakerOpen)
	}
	if f.local != nil && f.localRef != nil {
		return f.localRef.Refund(ctx, key, n, elapsed)
	}
	return err
}

// Unwrap returns the remote limiter, the one Failover passes requests to
// while it works (see [Wrapper]).
func (f *Failover) Unwrap() Limiter { return f.remote }

// Policy returns the remote limiter's policy, or the zero Policy when it
// has none (see [PolicyReporter]).
func (f *Failover) Policy() Policy {
	if f.pol == nil {
		return Policy{}
	}
	return f.pol.Policy()
}

// capacity returns the remote policy's capacity, or MaxInt64 when it is
// unknown.
func (f *Failover) capacity() int64 {
	if f.pol == nil {
		return math.MaxInt64
	}
	return f.pol.Policy().Capacity()
}

type (
	decideFunc func(l Limiter, ctx context.Context, key string, n int64) (Decision, error)
	layersFunc func(l LayeredLimiter, ctx context.Context, key string, n int64) (LayeredDecision, error)
)

// check decides a request: by the remote limiter while it works, else by
// the error policy. It asks a limiter by lop when lop is set and the
// limiter is layered, else by op; with wrap, a Decision asked by op counts
// as one layer ([oneLayer]), without, it comes alone (no Layers). It
// returns the limiter that decided (f itself when the remote one did, the
// local fallback, or nil for the error policy's own Decision), and outage, the store error
// the request was decided despite, when err does not already carry it.
func (f *Failover) check(ctx context.Context, key string, n int64, op decideFunc, lop layersFunc, wrap bool) (ld LayeredDecision, by Limiter, outage, err error) {
	call, probe := f.admit()
	var cause error
	if call {
		rctx, cancel := f.remoteContext(ctx)
		ld, err = ask(rctx, f.remote, f.remoteLay, key, n, op, lop, wrap)
		cancel()
		if !f.record(ctx, err, probe) {
			return ld, f, nil, err
		}
		cause = err
	}
	if f.local != nil {
		if f.share > 0 {
			f.followShare()
		}
		ld, err = ask(ctx, f.local, f.localLay, key, n, op, lop, wrap)
		if err != nil && !CallerError(ctx, err) && !unavailable(err) {
			err = &UnavailableError{RetryAfter: f.retryAfter(), Err: err}
		}
		return ld, f.local, cause, err
	}
	p, c := f.Policy(), int64(math.MaxInt64)
	if f.pol != nil {
		c = p.Capacity()
	}
	d := Decision{Limit: p.Limit, Policy: p}
	switch err = checkRequest(key, n, c); {
	case err != nil:
	case f.onError.closed:
		if cause == nil {
			cause = errBreakerOpen
		}
		err, cause = &UnavailableError{RetryAfter: f.retryAfter(), Err: cause}, nil
	default:
		d.Allowed = true
		if f.pol != nil {
			d.Remaining = c - n
		}
	}
	if wrap {
		return oneLayer(d, err), nil, cause, err
	}
	return LayeredDecision{Decision: d}, nil, cause, err
}

func init() {
	failover.Check = func(f *Failover, ctx context.Context, key string, n int64) (LayeredDecision, Limiter, error, error) {
		return f.check(ctx, key, n, Limiter.AllowN, LayeredLimiter.AllowLayers, false)
	}
	failover.Local = func(f *Failover) Limiter { return f.local }
	failover.Closed = func(f *Failover) bool { return f.onError.closed }
}

// errBreakerOpen is the cause of a refusal while the breaker is open.
var errBreakerOpen = fmt.Errorf("core: failover: %w", ErrBreakerOpen)

// ask asks l, by lop when it is set and lay (then l) is not nil, else by
// op, as one layer with wrap.
func ask(ctx context.Context, l Limiter, lay LayeredLimiter, key string, n int64, op decideFunc, lop layersFunc, wrap bool) (LayeredDecision, error) {
	if lop != nil && lay != nil {
		return lop(lay, ctx, key, n)
	}
	d, err := op(l, ctx, key, n)
	if wrap {
		return oneLayer(d, err), err
	}
	return LayeredDecision{Decision: d}, err
}

// retryAfter is the RetryAfter of an [UnavailableError]: the time until
// the breaker lets a request through to the store when it is open, else
// [failClosedRetry].
func (f *Failover) retryAfter() time.Duration {
	if until := f.openUntil.Load(); until != 0 {
		return max(time.Duration(until-f.clock.Now().UnixNano()), time.Microsecond)
	}
	return failClosedRetry
}

// failClosedRetry is an [UnavailableError]'s RetryAfter while the breaker
// is closed: the store is asked again by the next request.
const failClosedRetry = time.Second

// oneLayer returns the [LayeredDecision] of a limiter of one layer that
// returned d and err: [MostRestrictive] of d alone or, with an error, d
// with no Layers, as a layered limiter's errors have.
func oneLayer(d Decision, err error) LayeredDecision {
	if err != nil {
		return LayeredDecision{Decision: d}
	}
	return MostRestrictive([]Decision{d})
}

// admit reports whether the remote store may be called now, and whether
// that call is the breaker's probe.
func (f *Failover) admit() (call, probe bool) {
	until := f.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if f.clock.Now().UnixNano() < until || !f.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

// record accounts for the outcome of a remote call and reports whether it
// was an outage, to be decided by the error policy.
func (f *Failover) record(ctx context.Context, err error, probe bool) (outage bool) {
	if probe {
		defer f.probing.Store(false)
	}
	if err != nil && (CallerError(ctx, err) || unavailable(err)) {
		return false // says nothing about the store, or was decided inside
	}
	if err == nil {
		if f.fails.Load() != 0 {
			f.fails.Store(0)
		}
		if probe || f.openUntil.Load() != 0 {
			f.setOpenUntil(0)
		}
		return false
	}
	if f.hook != nil {
		f.hook(err)
	}
	if probe || f.fails.Add(1) >= f.failures {
		f.setOpenUntil(f.clock.Now().Add(f.coolDown).UnixNano())
	}
	return true
}

// setOpenUntil sets when the next probe may go (0: the breaker is closed)
// and tells the WithBreakerHook hook if that opened or closed the breaker.
func (f *Failover) setOpenUntil(until int64) {
	old := f.openUntil.Swap(until)
	if f.onBreaker != nil && (old == 0) != (until == 0) {
		f.onBreaker(until != 0)
	}
}

// BreakerOpen reports whether the circuit breaker is open: the store is not
// being called, except by one probe after each cool-down.
func (f *Failover) BreakerOpen() bool { return f.openUntil.Load() != 0 }

func (f *Failover) remoteContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.timeout > 0 {
		return context.WithTimeout(ctx, f.timeout)
	}
	return ctx, func() {}
}

// UnavailableError is the error of a request the error policy refuses: a
// [Failover] failing closed ([FailClosed]), or whose [Fallback] limiter
// failed too. The request was not decided, which is why it is an error
// rather than a denying [Decision]: the caller exceeded nothing. The HTTP
// middleware answers it with 503 Service Unavailable and the RPC
// interceptors with Unavailable, both saying to retry after RetryAfter.
type UnavailableError struct {
	// RetryAfter is when to try again: while the circuit breaker is open,
	// the time until it lets a request through to the store; else one
	// second, since the next request asks the store again.
	RetryAfter time.Duration
	// Err is why: the store's error, the fallback limiter's, or
	// [ErrBreakerOpen] (wrapped) when the store was not called.
	Err error
}

// Error returns "core: limiter unavailable: " and Err's text.
func (e *UnavailableError) Error() string {
	return "core: limiter unavailable: " + e.Err.Error()
}

// Unwrap returns Err.
func (e *UnavailableError) Unwrap() error { return e.Err }

// unavailable reports whether err is, or wraps, an [UnavailableError]: a
// request refused by a Failover's error policy.
func unavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// followShare sets FallbackShare's local limiter to the share of the
// remote's policy in force, when a SetPolicy has changed it since: the
// share follows the limit it divides. It runs on the outage path only. A
// policy the local limiter cannot take (another algorithm) is reported to
// the error hook, and the share it has stays.
func (f *Failover) followShare() {
	p := f.pol.Policy()
	if last := f.shared.Load(); last != nil && *last == p {
		return
	}
	f.shareMu.Lock()
	defer f.shareMu.Unlock()
	if last := f.shared.Load(); last != nil && *last == p {
		return
	}
	if err := f.local.(*Memory).SetPolicy(sharePolicy(p, f.share)); err != nil {
		if f.hook != nil {
			f.hook(fmt.Errorf("core: FallbackShare: follow the remote's policy %v: %w", p, err))
		}
	}
	f.shared.Store(&p)
}
