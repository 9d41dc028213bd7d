package rules

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// An Option configures how a rule set is built ([New], [Parse],
// [ParseFile]) and how a [Source] reloads it ([Open]); each says which
// it applies to. The options given to Open build every set it loads.
// A nil Option is an error.
type Option func(*options)

// OverrideFunc returns the policy of one key of one limit, named by its
// rule and limit names, and true; or false when the key has no policy of its
// own and takes the limit's. It is called concurrently, for keys that no
// override in the set names, and its answers are cached ([WithOverrideCache]).
type OverrideFunc func(rule, limit, key string) (core.Policy, bool, error)

// Defaults of the options.
const (
	// DefaultOverrideCacheSize is how many answers of an OverrideFunc a set
	// keeps unless WithOverrideCache says otherwise.
	DefaultOverrideCacheSize = 10_000
	// DefaultOverrideTTL is how long a set keeps an answer of an
	// OverrideFunc unless WithOverrideCache says otherwise.
	DefaultOverrideTTL = time.Minute
	// DefaultDebounce is how long a Source's Watch waits for a file to stop
	// changing before it reloads it, unless WithDebounce says otherwise.
	DefaultDebounce = 100 * time.Millisecond
)

type options struct {
	ctor        string // the function given the options: New, Parse, ParseFile or Open
	nilOption   int    // the position of the first nil option, from 1; 0 if none
	clockSet    bool
	plan        func(keyfunc.Request) (string, error)
	planSet     bool
	keyFuncs    map[string]keyfunc.Func
	contextKeys map[string]any
	dupKey      string // a key name registered twice
	badKey      string // a key name that cannot be registered, with why
	secret      []byte
	ipOptions   []keyfunc.IPOption
	override    OverrideFunc
	overrideSet bool
	cacheSize   int
	cacheTTL    time.Duration
	clock       core.Clock

	errorHook func(error)
	debounce  time.Duration
	signals   []os.Signal
}

func buildOptions(ctor string, opts []Option) *options {
	o := &options{ctor: ctor, cacheSize: DefaultOverrideCacheSize, cacheTTL: DefaultOverrideTTL, debounce: DefaultDebounce}
	for i, opt := range opts {
		if opt == nil {
			if o.nilOption == 0 {
				o.nilOption = i + 1
			}
			continue
		}
		opt(o)
	}
	if !o.clockSet {
		o.clock = core.SystemClock{}
	}
	return o
}

// WithPlan gives the function that returns a request's plan, which a rule's
// match.plans compares. A rule set with plans in its matches needs it.
// It is called at most once per [Set.Match], and only when a rule with
// plans is reached; its error is Match's. Applies to: New, Parse, Open.
func WithPlan(plan func(keyfunc.Request) (string, error)) Option {
	return func(o *options) { o.plan, o.planSet = plan, true }
}

// WithKeyFunc registers a key function under a name that a limit's key may
// then name, such as "tenant". The name must not be a built-in key spec,
// hold a ':' nor be registered twice (with WithContextKey either).
// Applies to: New, Parse, Open.
func WithKeyFunc(name string, f keyfunc.Func) Option {
	return func(o *options) {
		switch {
		case f == nil:
			o.badKey = "WithKeyFunc(" + strconv.Quote(name) + "): the function is nil"
		default:
			o.register(name, "WithKeyFunc")
			if o.keyFuncs == nil {
				o.keyFuncs = make(map[string]keyfunc.Func)
			}
			o.keyFuncs[name] = f
		}
	}
}

// WithContextKey registers a context key under a name, so that the key spec
// "context:<name>" keys a request by the value stored under key in its
// context (keyfunc.ContextValue), such as the user ID set by an
// authentication middleware. Applies to: New, Parse, Open.
func WithContextKey(name string, key any) Option {
	return func(o *options) {
		if keyfunc.ContextValue(key) == nil {
			o.badKey = "WithContextKey(" + strconv.Quote(name) + "): the key is nil or not comparable"
			return
		}
		if o.contextKeys == nil {
			o.contextKeys = make(map[string]any)
		}
		if _, dup := o.contextKeys[name]; dup {
			o.dupKey = "context:" + name
		}
		if checkName(name) != nil {
			o.badKey = "WithContextKey(" + strconv.Quote(name) + "): the name must be 1 to 64 letters, digits, '-', '_' or '.'"
		}
		o.contextKeys[name] = key
	}
}

func (o *options) register(name, by string) {
	if _, dup := o.keyFuncs[name]; dup {
		o.dupKey = name
	}
	switch {
	case name == "" || strings.IndexByte(name, ':') >= 0:
		o.badKey = by + "(" + strconv.Quote(name) + "): the name must be non-empty and hold no ':'"
	case isBuiltinKey(name):
		o.badKey = by + "(" + strconv.Quote(name) + "): the name is a built-in key spec"
	}
}

// WithHeaderSecret sets the secret with which "header:" keys are hashed
// (keyfunc.Header). Default: none, a plain SHA-256. Applies to: New, Parse,
// Open.
func WithHeaderSecret(secret []byte) Option {
	return func(o *options) { o.secret = append([]byte(nil), secret...) }
}

// WithIPOptions gives keyfunc.ClientIP options for the "ip" key, such as
// keyfunc.UseForwarded or keyfunc.IPv6Prefix; the set's trusted_proxies are
// added to them as keyfunc.TrustProxies. Applies to: New, Parse, Open.
func WithIPOptions(opts ...keyfunc.IPOption) Option {
	return func(o *options) { o.ipOptions = append(o.ipOptions, opts...) }
}

// WithOverride gives a function that finds a key's own policy at run time,
// such as a customer's contract read from a database, for the keys that no
// override in the set names. Its answers, policies and "none" alike, are
// cached per set ([WithOverrideCache]); its errors are not. A policy it
// returns is validated and must allow the limit's cost; its Name is set to
// the limit's. Applies to: New, Parse, Open.
func WithOverride(f OverrideFunc) Option {
	return func(o *options) { o.override, o.overrideSet = f, true }
}

// WithOverrideCache bounds the cache of an OverrideFunc's answers: at most
// size of them (least recently used dropped first), each kept for ttl at
// most (0: until the set is replaced). Default: DefaultOverrideCacheSize,
// DefaultOverrideTTL. Applies to: New, Parse, Open.
func WithOverrideCache(size int, ttl time.Duration) Option {
	return func(o *options) { o.cacheSize, o.cacheTTL = size, ttl }
}

// WithClock sets the clock that ages an OverrideFunc's cached answers.
// Default: core.SystemClock. Applies to: New, Parse, Open.
func WithClock(c core.Clock) Option {
	return func(o *options) { o.clock, o.clockSet = c, true }
}

// WithErrorHook gives a function that a Source calls with every reload that
// fails (the file unreadable or invalid: the running set is kept) and every
// error of its file watch. Default: none. Applies to: Open.
func WithErrorHook(hook func(error)) Option {
	return func(o *options) { o.errorHook = hook }
}

// WithDebounce sets how long a Source's Watch waits after the last change
// to the file's directory before it reloads, so that a file written in
// several steps is read once, whole. Default: DefaultDebounce. Applies to:
// Open.
func WithDebounce(d time.Duration) Option {
	return func(o *options) { o.debounce = d }
}

// WithSignal makes a Source's Watch also reload when the process receives
// one of sigs, such as syscall.SIGHUP. Default: none. Applies to: Open.
func WithSignal(sigs ...os.Signal) Option {
	return func(o *options) { o.signals = append(o.signals, sigs...) }
}
