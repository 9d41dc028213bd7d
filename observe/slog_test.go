package observe_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/limitercheck"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/observe"
)

func TestKeyHash(t *testing.T) {
	// The same values as:
	//	printf %s 203.0.113.7 | sha256sum | cut -c1-16
	//	printf %s 203.0.113.7 | openssl dgst -sha256 -hmac pepper | sed 's/.*= //' | cut -c1-16
	if got, want := observe.KeyHash(nil, "203.0.113.7"), "fec52565aa0cf18f"; got != want {
		t.Errorf("KeyHash(nil, ...) = %s, want %s", got, want)
	}
	if got, want := observe.KeyHash([]byte("pepper"), "203.0.113.7"), "f9a092447a622340"; got != want {
		t.Errorf("KeyHash(pepper, ...) = %s, want %s", got, want)
	}
}

// newTextLogger logs at level to buf without the time.
func newTextLogger(buf *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
}

func TestSlogObserver(t *testing.T) {
	clock := core.NewManualClock(limitercheck.StartTime())
	store := newFlaky(t, core.Policy{Name: "api", Limit: 1, Window: time.Minute}, clock)
	var buf bytes.Buffer
	slogObs := observe.NewSlog(newTextLogger(&buf, slog.LevelDebug), []byte("pepper"))
	f := mustFailover(t, store, append([]core.FailoverOption{core.WithClock(clock), core.WithBreaker(1, time.Second), core.WithErrorPolicy(core.FailClosed())},
		observe.FailoverHooks(slogObs, "api")...)...)
	l := mustObserved(t, f, slogObs, observe.WithClock(clock), observe.WithRawKey(),
		observe.WithKeyClass(func(string) string { return "ip" }))
	candidate := mustMemory(t, core.Policy{Name: "api-v2", Limit: 1, Window: time.Hour}, clock)
	shadow := mustShadow(t, l, candidate, slogObs, observe.WithClock(clock), observe.WithRawKey())

	shadow.Allow(ctx, "203.0.113.7")     // allowed by both: nothing logged
	shadow.Allow(ctx, "203.0.113.7")     // denied by both
	shadow.AllowN(ctx, "203.0.113.7", 2) // a cost too high: a caller error, at debug
	store.Down.Store(true)
	clock.Advance(time.Minute)
	shadow.Allow(ctx, "203.0.113.7") // store error, breaker opens, refused closed
	store.Down.Store(false)
	clock.Advance(time.Second)
	shadow.Allow(ctx, "203.0.113.7") // the probe closes the breaker

	h := "key_hash=f9a092447a622340"
	want := strings.Join([]string{
		`level=DEBUG msg="ratekit: denied" policy=api op=allow key_class=ip ` + h + ` cost=1 retry_after=1m0s`,
		`level=DEBUG msg="ratekit: denied" policy=api-v2 op=allow ` + h + ` shadow=true cost=1 retry_after=1h0m0s`,
		`level=DEBUG msg="ratekit: request error" policy=api op=allow key_class=ip ` + h + ` err="core: cost 2, at most 1: cost exceeds what the policy can ever allow"`,
		`level=DEBUG msg="ratekit: request error" policy=api-v2 op=allow ` + h + ` shadow=true err="core: cost 2, at most 1: cost exceeds what the policy can ever allow"`,
		`level=WARN msg="ratekit: store error" policy=api op=store-error err="flaky: store: connection refused"`,
		`level=WARN msg="ratekit: circuit breaker open" policy=api op=breaker-open`,
		`level=WARN msg="ratekit: store error" policy=api op=allow key_class=ip ` + h + ` err="core: limiter unavailable: flaky: store: connection refused"`,
		`level=DEBUG msg="ratekit: denied" policy=api-v2 op=allow ` + h + ` shadow=true cost=1 retry_after=59m0s`,
		`level=WARN msg="ratekit: circuit breaker closed" policy=api op=breaker-close`,
		`level=DEBUG msg="ratekit: denied" policy=api-v2 op=allow ` + h + ` shadow=true cost=1 retry_after=58m59s`,
		``,
	}, "\n")
	if got := buf.String(); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}

	// At Info, only the warnings are written.
	buf.Reset()
	slogObs = observe.NewSlog(newTextLogger(&buf, slog.LevelInfo), nil)
	slogObs.Observe(ctx, observe.Event{Op: observe.OpAllow, Policy: "api", Key: "k"})
	slogObs.Observe(ctx, observe.Event{Op: observe.OpAllow, Policy: "api", Key: "k", Decision: core.Decision{Allowed: false}})
	slogObs.Observe(ctx, observe.Event{Op: observe.OpReset, Policy: "api", Err: errDown})
	if got, want := buf.String(), `level=WARN msg="ratekit: store error" policy=api op=reset err="store: connection refused"`+"\n"; got != want {
		t.Errorf("log at Info:\n%s\nwant:\n%s", got, want)
	}
}

// TestSlogRule checks that a rule set's events carry their rule, and that
// a limit's key error is the request's doing, at Debug, never a warning
// a client without the key could flood.
func TestSlogRule(t *testing.T) {
	var buf bytes.Buffer
	slogObs := observe.NewSlog(newTextLogger(&buf, slog.LevelDebug), nil)
	keyErr := fmt.Errorf("rules: limit %q: key: %w", "login/per-account", keyfunc.ErrNoKey)
	slogObs.Observe(ctx, observe.Event{Op: observe.OpAllow, Rule: "login", Policy: "per-ip", Cost: 1, Decision: core.Decision{RetryAfter: time.Second}})
	slogObs.Observe(ctx, observe.Event{Op: observe.OpAllow, Rule: "login", Policy: "per-account", Err: keyErr})
	want := `level=DEBUG msg="ratekit: denied" policy=per-ip rule=login op=allow cost=1 retry_after=1s
level=DEBUG msg="ratekit: request error" policy=per-account rule=login op=allow err="rules: limit \"login/per-account\": key: keyfunc: no key"
`
	if got := buf.String(); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
}

// TestSlogObserverAllocs checks that a denial costs no allocation while
// Debug is off.
func TestSlogObserverAllocs(t *testing.T) {
	var buf bytes.Buffer
	obs := observe.NewSlog(newTextLogger(&buf, slog.LevelInfo), nil)
	e := observe.Event{Op: observe.OpAllow, Policy: "api", Key: "k"}
	if a := testing.AllocsPerRun(100, func() { obs.Observe(ctx, e) }); a != 0 {
		t.Errorf("%v allocs per denial at Info, want 0", a)
	}
}
