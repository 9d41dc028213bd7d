// Package rpclimit is the part of ratekit's gRPC and Connect interceptors
// (grpclimit, connectlimit) that knows no RPC library: the options both
// take, the [keyfunc.Request] view of a call, one httplimit.Engine per
// limiter, and what a refusal becomes in RPC terms (a google.rpc.Code, the
// Retry-After in seconds, the policy, the rate headers as metadata).
//
// Per-method state is bounded whatever method names clients send. A call
// whose method the server does not serve ([Call.Unknown]: gRPC hands such
// calls to its UnknownServiceHandler) is the method [UnknownMethod] to
// everything the options give: the limiter, [Config.MethodFunc], the route
// key functions see, costs, skips and hooks. So a made-up name never mints
// a key or an entry. The methods the server serves are a set the program
// fixes; the entries [Config.MethodFunc]'s answers take are bounded by
// [MaxMethods] all the same, should an adapter ever pass on a client's
// name as a served one.
//
// The interceptors live in modules of their own that import this package:
// a change to it must keep compiling their released versions, or they must
// require the root version that makes it.
package rpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/inflight"
	"github.com/ratekit/ratekit/keyfunc"
)

// The google.rpc.Code values a refusal maps to; gRPC's codes.Code and
// Connect's connect.Code use the same numbers.
const (
	CodeOK                uint32 = 0
	CodeCanceled          uint32 = 1
	CodeInvalidArgument   uint32 = 3
	CodeDeadlineExceeded  uint32 = 4
	CodeResourceExhausted uint32 = 8
	CodeUnavailable       uint32 = 14
)

// UnknownMethod is the full method name every call to a method the server
// does not serve is known by ([Call.Unknown]). No service can register it:
// "*" is not a protobuf name. Config.Methods may name it to give those calls
// a limiter of their own.
const UnknownMethod = "/*/*"

// MaxMethods is how many methods, at most, keep the limiter
// [Config.MethodFunc] picked for them: far more than a server serves. Past
// it, the calls of a method met for the first time are limited as
// [UnknownMethod], and the error hook is told once.
const MaxMethods = 4096

// Config is what the interceptors' options set. The zero Config limits
// every call with the default limiter, keyed by its peer's address.
type Config struct {
	// Methods holds per-method limiters by full method name
	// ("/pkg.Service/Method"); a method not in it uses the default limiter.
	// A method named here is one the server serves, whatever [Call.Unknown]
	// says: the way to limit a proxied method apart.
	Methods map[string]core.Limiter
	// MethodFunc, if set, picks the limiter of a method not in Methods, once
	// per method, at its first call; nil from it means the default limiter.
	// It is asked once for all the methods the server does not serve, with
	// [UnknownMethod].
	MethodFunc func(method string) core.Limiter
	// Key keys a call (keyfunc's functions see the peer address as
	// RemoteAddr, the metadata as headers and the method as the route).
	Key keyfunc.Func
	// Cost is the units a call (or, with PerMessage, a message) costs.
	Cost func(ctx context.Context, method string) (int64, error)
	// Skip exempts a call from the limit.
	Skip func(ctx context.Context, method string) bool
	// ErrorPolicy is what a call gets when the limiter fails; nil: fail
	// open, as in HTTP.
	ErrorPolicy *core.ErrorPolicy
	// DryRun, when set, serves denied calls and reports them to DryRunFunc
	// (which may be nil).
	DryRun     bool
	DryRunFunc func(ctx context.Context, method string, d core.Decision)
	// CountIf, when set, counts a call before the handler and gives it
	// back unless CountIf accepts the code the handler ended with; see
	// [CountIf].
	CountIf func(code uint32) bool
	// ErrorHook receives every error met while limiting a call.
	ErrorHook func(ctx context.Context, method string, err error)
	// Clock is the clock CountIf's refunds measure elapsed time by, and a
	// core.FallbackShare policy's limiter decides by; nil: the system
	// clock, unless ClockSet.
	Clock core.Clock
	// ClockSet reports that the WithClock option was given, so that a nil
	// Clock is a configuration mistake.
	ClockSet bool
	// PerMessage charges every message a client streams, not only the
	// stream's start (the interceptors read it; Check does not).
	PerMessage bool
	// InFlight caps the calls in flight per key (httplimit.WithInFlight);
	// InFlightSet reports that the option was given, so that a nil one
	// is a configuration mistake. It does not go with PerMessage.
	InFlight    inflight.Limiter
	InFlightSet bool
	// Settle settles a call's cost after its handler ran, at what the
	// handler reported with httplimit.SetCost (httplimit.WithSettle); the
	// interceptors pass the handler [Verdict.Context]. It does not go with
	// PerMessage.
	Settle bool
	// NilFuncs names the options given a nil function, each a
	// configuration mistake New reports.
	NilFuncs []string
}

// Need records in c that option was given a nil function, when isNil.
func (c *Config) Need(option string, isNil bool) {
	if isNil {
		c.NilFuncs = append(c.NilFuncs, option)
	}
}

// CountIf returns f over the uint32 codes of [Config.CountIf], for gRPC's
// codes.Code and Connect's connect.Code alike; nil for nil.
func CountIf[C ~uint32](f func(C) bool) func(uint32) bool {
	if f == nil {
		return nil
	}
	return func(code uint32) bool { return f(C(code)) }
}

// Limiter checks calls against their method's limiter. It is safe for
// concurrent use.
type Limiter struct {
	def     *httplimit.Engine
	methods map[string]*httplimit.Engine // fixed at New
	fn      func(string) core.Limiter
	// byFunc holds fn's answers: method -> *httplimit.Engine. Its methods
	// are those the server serves, and UnknownMethod for all the others;
	// funcN counts its entries but UnknownMethod's, at most MaxMethods.
	byFunc sync.Map
	funcN  atomic.Int64
	full   atomic.Bool // the hook was told byFunc is full
	opts   []httplimit.Option
	hook   func(keyfunc.Request, error)
	// PerMessage is Config.PerMessage.
	PerMessage bool
}

// New returns a Limiter for the default limiter l and cfg; who names the
// constructor in errors ("grpclimit: UnaryServerInterceptor").
func New(who string, l core.Limiter, cfg Config) (*Limiter, error) {
	if l == nil {
		return nil, fmt.Errorf("%s: a limiter is required", who)
	}
	if cfg.ClockSet && cfg.Clock == nil {
		return nil, fmt.Errorf("%s: WithClock(nil): a clock is required", who)
	}
	if len(cfg.NilFuncs) > 0 {
		return nil, fmt.Errorf("%s: %s(nil): a function is required", who, cfg.NilFuncs[0])
	}
	switch {
	case cfg.InFlightSet && cfg.InFlight == nil:
		return nil, fmt.Errorf("%s: WithInFlight(nil): a limiter is required", who)
	case cfg.InFlight != nil && cfg.PerMessage:
		// A message would take a lease of its own, held to the stream's
		// end: the cap would count messages, not calls.
		return nil, fmt.Errorf("%s: WithInFlight with WithPerMessage: the cap counts calls, not messages", who)
	case cfg.Settle && cfg.PerMessage:
		// Each message is charged at its own cost as it arrives: there is
		// no one estimate for the handler's report to settle.
		return nil, fmt.Errorf("%s: WithSettle with WithPerMessage: a stream charged per message has no one cost to settle", who)
	}
	var opts []httplimit.Option
	if cfg.Key != nil {
		opts = append(opts, httplimit.WithKey(cfg.Key))
	}
	if cfg.Cost != nil {
		f := cfg.Cost
		opts = append(opts, httplimit.WithCost(func(r keyfunc.Request) (int64, error) { return f(r.Context(), r.Route()) }))
	}
	if cfg.Skip != nil {
		f := cfg.Skip
		opts = append(opts, httplimit.WithSkip(func(r keyfunc.Request) bool { return f(r.Context(), r.Route()) }))
	}
	if cfg.ErrorPolicy != nil {
		opts = append(opts, httplimit.WithErrorPolicy(*cfg.ErrorPolicy))
	}
	if cfg.DryRun {
		report := func(keyfunc.Request, core.Decision) {}
		if f := cfg.DryRunFunc; f != nil {
			report = func(r keyfunc.Request, d core.Decision) { f(r.Context(), r.Route(), d) }
		}
		opts = append(opts, httplimit.WithDryRun(report))
	}
	if f := cfg.CountIf; f != nil {
		// The engine's "status" is the call's code here: Done is given
		// the code the handler ended with.
		opts = append(opts, httplimit.WithCountIf(func(code int) bool { return f(uint32(code)) }))
	}
	var hook func(keyfunc.Request, error)
	if f := cfg.ErrorHook; f != nil {
		hook = func(r keyfunc.Request, err error) { f(r.Context(), r.Route(), err) }
		opts = append(opts, httplimit.WithErrorHook(hook))
	}
	if cfg.Clock != nil {
		opts = append(opts, httplimit.WithClock(cfg.Clock))
	}
	if cfg.InFlight != nil {
		opts = append(opts, httplimit.WithInFlight(cfg.InFlight))
	}
	if cfg.Settle {
		opts = append(opts, httplimit.WithSettle())
	}
	// Calls carry no body a key function could read; keyfunc.Request's
	// Field finds nothing.
	lim := &Limiter{fn: cfg.MethodFunc, opts: opts, hook: hook, PerMessage: cfg.PerMessage}
	var err error
	if lim.def, err = httplimit.New(l, opts...); err != nil {
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	if len(cfg.Methods) > 0 {
		lim.methods = make(map[string]*httplimit.Engine, len(cfg.Methods))
		for m, ml := range cfg.Methods {
			if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 {
				return nil, fmt.Errorf("%s: method %q: want a full method name such as /pkg.Service/Method", who, m)
			}
			if ml == nil {
				return nil, fmt.Errorf("%s: method %s: nil limiter (to exempt a method, skip it)", who, m)
			}
			if lim.methods[m], err = httplimit.New(ml, opts...); err != nil {
				return nil, fmt.Errorf("%s: method %s: %w", who, m, err)
			}
		}
	}
	return lim, nil
}

// engine returns the engine that limits c, and settles c.Unknown: cleared
// for a method Methods names, set for one beyond MaxMethods.
func (l *Limiter) engine(c *Call) (*httplimit.Engine, error) {
	if e, ok := l.methods[c.Procedure]; ok {
		c.Unknown = false
		return e, nil
	}
	if c.Unknown {
		if e, ok := l.methods[UnknownMethod]; ok {
			return e, nil
		}
	}
	if l.fn == nil {
		return l.def, nil
	}
	m := c.Route()
	if e, ok := l.byFunc.Load(m); ok {
		return e.(*httplimit.Engine), nil
	}
	if m != UnknownMethod {
		// A slot is taken before fn is asked, so that racing first calls
		// of new methods never take more than MaxMethods.
		if l.funcN.Add(1) > MaxMethods {
			l.funcN.Add(-1)
			if l.hook != nil && !l.full.Swap(true) {
				l.hook(c, fmt.Errorf("rpclimit: method %s: more than %d methods; it and later ones are limited as %s", m, MaxMethods, UnknownMethod))
			}
			c.Unknown = true
			return l.engine(c)
		}
	}
	e := l.def
	if ml := l.fn(m); ml != nil {
		var err error
		if e, err = httplimit.New(ml, l.opts...); err != nil {
			if m != UnknownMethod {
				l.funcN.Add(-1)
			}
			return nil, err
		}
	}
	got, loaded := l.byFunc.LoadOrStore(m, e)
	if loaded && m != UnknownMethod {
		l.funcN.Add(-1) // a racing first call stored it
	}
	return got.(*httplimit.Engine), nil
}

// Check decides call c. c must stay unchanged until the Verdict's Done;
// Check itself may change c.Unknown (see there).
func (l *Limiter) Check(c *Call) Verdict {
	e, err := l.engine(c)
	if err != nil {
		// A limiter from MethodFunc that cannot be used (it cannot give
		// units back for CountIf): a configuration error, met at the
		// method's first call. The call is refused as when the limiter is
		// down and fails closed, never served unlimited.
		if l.hook != nil {
			l.hook(c, fmt.Errorf("rpclimit: method %s: %w", c.Route(), err))
		}
		return Verdict{broken: true, ctx: c.Ctx}
	}
	return Verdict{res: e.Check(c), ctx: c.Ctx}
}

// Verdict is what [Limiter.Check] decided for a call.
type Verdict struct {
	res    httplimit.Result
	broken bool // the method has no usable limiter
	ctx    context.Context
}

// Serve reports whether the handler should be called.
func (v *Verdict) Serve() bool { return !v.broken && v.res.Serve() }

// Refusal is a refused call in RPC terms.
type Refusal struct {
	// Code is the google.rpc.Code to answer with.
	Code uint32
	// Message is the status message: what the problem+json detail says in
	// HTTP.
	Message string
	// RetryAfter is when to retry, in whole seconds (at least 1), or 0
	// when retrying cannot help.
	RetryAfter int64
	// Policy names the policy that refused the call, or is "".
	Policy string
	// QuotaSubject is the subject of the google.rpc.QuotaFailure violation
	// to attach, "policy:<name>" ("policy:default" for an unnamed policy),
	// or "" when the refusal is not about a quota (Code is not
	// ResourceExhausted). A RetryInfo is attached when RetryAfter > 0.
	QuotaSubject string
}

// Refusal returns what a call that is not served gets.
func (v *Verdict) Refusal() Refusal {
	if v.broken {
		return Refusal{Code: CodeUnavailable, Message: "The call could not be checked against its rate limit.", RetryAfter: 1}
	}
	p := v.res.Problem()
	r := Refusal{Message: p.Detail, RetryAfter: v.res.RetryAfter(), Policy: p.Policy}
	switch p.Type {
	case httplimit.ProblemInFlight:
		r.Code = CodeResourceExhausted
		r.QuotaSubject = "inflight"
	case httplimit.ProblemRateLimited, httplimit.ProblemCostTooHigh:
		r.Code = CodeResourceExhausted
		name := p.Policy
		if name == "" {
			name = httplimit.DefaultPolicyName
		}
		r.QuotaSubject = "policy:" + name
	case httplimit.ProblemInvalidKey, httplimit.ProblemInvalidCost:
		r.Code = CodeInvalidArgument
	case httplimit.ProblemCanceled:
		// The call ended while it waited for its leaky-bucket slot.
		r.Code = CodeCanceled
		if errors.Is(v.ctx.Err(), context.DeadlineExceeded) {
			r.Code = CodeDeadlineExceeded
		}
	default:
		r.Code = CodeUnavailable
	}
	return r
}

// Headers passes add the rate headers of the call, lowercase, as metadata
// keys are: "ratelimit" and "ratelimit-policy" (one member each per
// policy), and "retry-after" when refused with one. Their values are those
// the HTTP adapters write.
func (v *Verdict) Headers(add func(name, value string)) {
	if !v.broken {
		v.res.WriteHeaders(metadataSink(add))
	}
}

// AddHeaders adds to h the headers [Verdict.Headers] passes, under their
// canonical names ("Ratelimit", "Ratelimit-Policy", "Retry-After"), for an
// interceptor whose metadata is an http.Header (Connect). A served call's
// headers are written straight from the engine, without lowercasing each
// name and canonicalizing it back.
func (v *Verdict) AddHeaders(h http.Header) {
	switch {
	case v.broken:
	case v.res.Serve():
		// The engine writes only the rate fields of a served call.
		v.res.WriteHeaders(h)
	default:
		v.Headers(h.Add)
	}
}

// Done tells the limiter the code the handler ended with; with CountIf it
// gives the call's units back unless CountIf accepts the code. The
// verdict is not used after: what it holds for a rule set is released.
func (v *Verdict) Done(code uint32) {
	if !v.broken {
		v.res.Done(int(code))
		v.res.Release()
	}
}

// Context returns ctx for the handler: with Settle, for a call that is
// settled after it ran, one through which the handler reports its cost
// (httplimit.SetCost); otherwise ctx itself.
func (v *Verdict) Context(ctx context.Context) context.Context {
	if v.broken || !v.res.Settling() {
		return ctx
	}
	return v.res.Context(ctx)
}

// Abandon gives back what the call holds when its handler panicked and
// Done is not reached: its in-flight lease. Interceptors defer it, for
// a recovery interceptor around them. The verdict is not used after.
func (v *Verdict) Abandon() {
	if !v.broken {
		v.res.Release()
	}
}

// metadataSink takes the engine's headers as metadata: lowercase, and only
// the rate fields (not an HTTP body's Content-Type or Cache-Control).
type metadataSink func(name, value string)

func (s metadataSink) Set(name, value string) { s.Add(name, value) }

func (s metadataSink) Add(name, value string) {
	// The engine writes canonical names: those need no lowercasing, which
	// would allocate on every call.
	switch name {
	case "Ratelimit":
		s("ratelimit", value)
		return
	case "Ratelimit-Policy":
		s("ratelimit-policy", value)
		return
	case "Retry-After":
		s("retry-after", value)
		return
	}
	switch n := strings.ToLower(name); n {
	case "ratelimit", "ratelimit-policy", "retry-after":
		s(n, value)
	}
}

// Call is one RPC as keyfunc sees it; it implements [keyfunc.Request].
type Call struct {
	// Ctx is the call's context.
	Ctx context.Context
	// Peer is the client's address, "host:port" or a bare IP address.
	Peer string
	// Metadata returns the values of the named metadata key (lowercase,
	// as gRPC keys are), or nil.
	Metadata func(name string) []string
	// Procedure is the full method name, "/pkg.Service/Method", as the
	// client sent it.
	Procedure string
	// Unknown reports that the server does not serve Procedure, so that
	// the name is the client's own: the call is then known by
	// [UnknownMethod]. [Limiter.Check] clears it for a method
	// [Config.Methods] names and sets it for a method beyond [MaxMethods].
	Unknown bool
}

var _ keyfunc.Request = (*Call)(nil)

// RemoteAddr returns the peer's address.
func (c *Call) RemoteAddr() string { return c.Peer }

// Header returns the metadata values of name, matched case-insensitively.
func (c *Call) Header(name string) []string {
	if c.Metadata == nil {
		return nil
	}
	return c.Metadata(strings.ToLower(name))
}

// Method returns "POST", the HTTP method of every gRPC and Connect call
// (Connect's GET for side-effect-free calls aside).
func (c *Call) Method() string { return http.MethodPost }

// Route returns the full method name the call is known by: Procedure, or
// [UnknownMethod] for a method the server does not serve.
func (c *Call) Route() string {
	if c.Unknown {
		return UnknownMethod
	}
	return c.Procedure
}

// Context returns the call's context.
func (c *Call) Context() context.Context { return c.Ctx }

// Field finds nothing: a call's messages are not forms.
func (c *Call) Field(string) (string, error) { return "", nil }
