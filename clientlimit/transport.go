package clientlimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/ctxsleep"
)

// ErrWaitTooLong is wrapped by the error of a request that was not sent
// because it would have had to wait longer than [WithMaxWait] allows, or
// past its context's deadline (then the error wraps
// [context.DeadlineExceeded] too).
var ErrWaitTooLong = errors.New("wait too long")

// backoffBase is the first retry's backoff when the server names no time;
// it doubles with each retry, up to MaxWait.
const backoffBase = time.Second

// Transport is an [http.RoundTripper] for calls to rate-limited servers.
// Create one with [New].
//
// Before sending a request it waits for its own limiter ([WithLimiter]),
// for the time the server last asked this key to hold off (Retry-After,
// or a quota with nothing left), and for its pace (r units left until
// reset t: one request every t/r). On a 429 or 503 it retries a request
// that is safe to repeat: an idempotent method (RFC 9110) or an
// Idempotency-Key header, and a body it can replay (none, or GetBody); or
// any method whose body GetBody replays. It retries after the server's
// time plus full jitter, at most [WithMaxRetries] times. No wait exceeds
// [WithMaxWait] or the request's context: a request that would wait
// longer fails at once, unsent. It never retries network errors.
//
// A Transport is safe for concurrent use. It remembers a bounded number
// of keys ([WithMaxKeys]). Malformed rate-limit fields are ignored and
// counted; over-long ones are read in part (see the package doc).
type Transport struct {
	base    http.RoundTripper
	limiter core.Limiter
	rl      httplimit.RequestLimiter // limiter, when it is a rule set
	key     func(*http.Request) string
	cost    func(*http.Request) int64
	route   func(*http.Request) string // a rule set's route; nil: the URL's path

	// WithKey, WithCost and WithRoute were given: New refuses the first
	// two with a rule set, the last without one.
	keyGiven, costGiven, routeGiven bool

	maxRetries int
	maxWait    time.Duration
	maxKeys    int
	observer   func(Event)
	errs       []error // mistakes the options found, reported by New
	keys       *lru.Cache[string, *keyState]

	waits, retries, refused, malformed atomic.Uint64
	waited                             atomic.Int64
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport that sends requests through base (nil:
// [http.DefaultTransport]), configured by opts, or an error naming the
// first invalid option: "clientlimit: New: option N is nil", or the
// option's own ("clientlimit: WithMaxWait(0s): must be positive").
func New(base http.RoundTripper, opts ...Option) (*Transport, error) {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{
		base:       base,
		key:        hostKey,
		cost:       oneUnit,
		maxRetries: 2,
		maxWait:    time.Minute,
		maxKeys:    4096,
	}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("clientlimit: New: option %d is nil", i+1)
		}
		opt(t)
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	t.errs = nil
	t.keys, _ = lru.New[string, *keyState](t.maxKeys) // size checked positive
	return t, nil
}

// MustNew is like [New] but panics where New returns an error, so
// that a client is built in one expression:
//
//	client := &http.Client{Transport: clientlimit.MustNew(nil, clientlimit.WithLimiter(quota))}
//
// A configuration mistake is then found when the program starts, as
// [regexp.MustCompile] finds a bad pattern.
func MustNew(base http.RoundTripper, opts ...Option) *Transport {
	t, err := New(base, opts...)
	if err != nil {
		panic(err.Error())
	}
	return t
}

// randN returns a uniform random int64 in [0, n), n > 0. Tests replace it
// to make the jitter's extremes exact.
var randN = rand.Int64N

func hostKey(r *http.Request) string { return r.URL.Host }

func oneUnit(*http.Request) int64 { return 1 }

// EventKind says what an [Event] reports.
type EventKind uint8

// The events a [Transport] reports.
const (
	// EventLimited: a request waited Wait for its own limiter.
	EventLimited EventKind = iota + 1
	// EventHeld: a request waited Wait because the server asked its key
	// to hold off (Retry-After, or a quota with no units left).
	EventHeld
	// EventPaced: a request waited Wait for its place in the pace the
	// server's remaining quota sets.
	EventPaced
	// EventRetry: a response with Status was discarded; the request is
	// sent again after Wait.
	EventRetry
	// EventRefused: a request was not sent: it would have waited Wait,
	// longer than [WithMaxWait] or its context allow. Err is returned.
	EventRefused
	// EventMalformed: the field Header of a response could not be read
	// and was ignored, or was longer than the transport reads and was read
	// in part (see the package doc).
	EventMalformed
)

var eventNames = [...]string{"", "limited", "held", "paced", "retry", "refused", "malformed"}

// String returns the kind's name, such as "retry".
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is one thing a [Transport] did or saw, reported to [WithObserver].
// Kind says what; Request, the request as the caller gave it, and Key are
// always set, and the other fields as their kind's doc says: Wait for a
// wait, a retry or a refusal, Status for EventRetry, Header for
// EventMalformed, Err for EventRefused. With a rule set ([WithLimiter]),
// Rule names the rule that matched the request in the events of its
// limiter wait (EventLimited, and EventRefused when the rule set is the
// reason). An observer must not keep Request nor change it.
type Event struct {
	Kind    EventKind
	Request *http.Request // the request as the caller gave it
	Key     string        // the request's key
	Rule    string        // the rule a rule set matched, "" for none
	Wait    time.Duration // the wait: waited, before a retry, or refused
	Status  int           // EventRetry: the discarded response's status
	Header  string        // EventMalformed: the field ignored
	Err     error         // EventRefused: the error returned
}

// Stats counts what a [Transport] has done since it was created.
type Stats struct {
	// Waits counts the times a request waited before being sent: for the
	// limiter, the server's hold or pace, or before a retry.
	Waits uint64
	// WaitTime is the total time those waits took.
	WaitTime time.Duration
	// Retries counts the requests sent again after a 429 or 503.
	Retries uint64
	// Refused counts the requests not sent because their wait was too
	// long ([ErrWaitTooLong]).
	Refused uint64
	// Malformed counts rate-limit fields ignored because they could not
	// be read, or read in part because they were too long.
	Malformed uint64
}

// Stats returns the counts so far. It is safe to call at any time.
func (t *Transport) Stats() Stats {
	return Stats{
		Waits:     t.waits.Load(),
		WaitTime:  time.Duration(t.waited.Load()),
		Retries:   t.retries.Load(),
		Refused:   t.refused.Load(),
		Malformed: t.malformed.Load(),
	}
}

// CloseIdleConnections closes the base transport's idle connections, if
// it has such a method, as [http.Client.CloseIdleConnections] expects.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req, as the [Transport]'s doc says: after its waits,
// and again after a 429 or 503 (or a 403 that names a rate limit, as
// GitHub's do) when it is safe to repeat. It returns the last response,
// the refusal included when no retry is left or allowed. Its errors are the base transport's, the limiter's, and
// [ErrWaitTooLong].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	key := t.key(req)
	if key == "" {
		closeBody(req)
		return nil, fmt.Errorf("clientlimit: %s %s: the key function returned an empty key: %w", req.Method, req.URL.Redacted(), core.ErrEmptyKey)
	}
	send := req
	for attempt := 0; ; attempt++ {
		if err := t.await(ctx, req, key); err != nil {
			closeBody(send)
			return nil, err
		}
		res, err := t.base.RoundTrip(send)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		sig := readSignals(res.Header, now)
		if sig.malformed != "" {
			t.malformed.Add(1)
			t.report(Event{Kind: EventMalformed, Request: req, Key: key, Header: sig.malformed})
		}
		limited := rateLimited(res.StatusCode, &sig)
		hint, hasHint := t.learn(key, &sig, limited, now)
		if !limited || attempt >= t.maxRetries || !replayable(req) {
			return res, nil
		}
		delay, ok := t.backoff(ctx, attempt, hint, hasHint, now)
		if !ok {
			return res, nil // no retry in time: the caller sees the server's answer
		}
		next := req
		if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
			body, err := req.GetBody()
			if err != nil {
				return res, nil
			}
			r2 := *req
			r2.Body = body
			next = &r2
		}
		discard(res)
		t.retries.Add(1)
		t.report(Event{Kind: EventRetry, Request: req, Key: key, Wait: delay, Status: res.StatusCode})
		if err := t.sleep(ctx, delay); err != nil {
			closeBody(next)
			return nil, fmt.Errorf("clientlimit: %s %s: before retry %d: %w", req.Method, req.URL.Redacted(), attempt+1, err)
		}
		send = next
	}
}

// rateLimited reports whether a response of status with signals sig says
// the request was refused for a rate limit: a 429 or a 503, or a 403 that
// says so, as GitHub answers a spent quota (X-RateLimit-Remaining: 0) or
// its secondary limits (Retry-After). A 403 without either is a refusal
// that waiting cannot help.
func rateLimited(status int, sig *signals) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusForbidden:
		return sig.exhausted || sig.hasRetryAfter
	}
	return false
}

// await waits for the server's hold and pace of key, then for the
// limiter.
func (t *Transport) await(ctx context.Context, req *http.Request, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("clientlimit: %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	if s, ok := t.keys.Get(key); ok {
		wait, kind, err := s.reserve(ctx, time.Now(), t.maxWait)
		if err != nil {
			return t.refuse(req, key, "", wait, err)
		}
		if wait > 0 {
			t.report(Event{Kind: kind, Request: req, Key: key, Wait: wait})
			if err := t.sleep(ctx, wait); err != nil {
				return fmt.Errorf("clientlimit: %s %s: %w", req.Method, req.URL.Redacted(), err)
			}
		}
	}
	if t.limiter == nil {
		return nil
	}
	wctx, cancel := ctx, context.CancelFunc(nil)
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > t.maxWait {
		wctx, cancel = context.WithTimeout(ctx, t.maxWait)
		defer cancel()
	}
	lim, cost := t.limiter, int64(1)
	var w *ruleWait
	if t.rl != nil {
		w = getRuleWait(t.rl, req, t.route)
		defer w.put()
		lim = w
	} else {
		cost = t.cost(req)
	}
	start := time.Now()
	_, err := core.Wait(wctx, lim, key, cost)
	waited := time.Since(start)
	rule := ""
	if w != nil {
		rule = w.rule
	}
	switch {
	case err == nil:
		if waited > 0 {
			t.waits.Add(1)
			t.waited.Add(int64(waited))
			t.report(Event{Kind: EventLimited, Request: req, Key: key, Rule: rule, Wait: waited})
		}
		return nil
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		// Wait refused at once, or the MaxWait deadline passed.
		if cancel != nil {
			err = fmt.Errorf("%w: %v", ErrWaitTooLong, err)
		} else {
			err = fmt.Errorf("%w: %w", ErrWaitTooLong, err)
		}
		return t.refuse(req, key, rule, 0, err)
	}
	return fmt.Errorf("clientlimit: %s %s: %w", req.Method, req.URL.Redacted(), err)
}

// refuse counts and reports a request not sent.
func (t *Transport) refuse(req *http.Request, key, rule string, wait time.Duration, err error) error {
	err = fmt.Errorf("clientlimit: %s %s: %w", req.Method, req.URL.Redacted(), err)
	t.refused.Add(1)
	t.report(Event{Kind: EventRefused, Request: req, Key: key, Rule: rule, Wait: wait, Err: err})
	return err
}

// learn records what a response says about key's limits at now, and
// returns the time a limited response (429, 503) asks to wait, if it says.
func (t *Transport) learn(key string, sig *signals, limited bool, now time.Time) (time.Duration, bool) {
	var hold time.Duration
	hasHold := false
	switch {
	case limited && sig.hasRetryAfter:
		hold, hasHold = sig.retryAfter, true
	case sig.exhausted:
		hold, hasHold = sig.exhaustedFor, true
	}
	if hold <= 0 && sig.interval <= 0 {
		return hold, hasHold && limited
	}
	s, ok := t.keys.Get(key)
	if !ok {
		var prev *keyState
		s = new(keyState)
		if prev, ok, _ = t.keys.PeekOrAdd(key, s); ok {
			s = prev
		}
	}
	s.learn(now, hold, sig.interval, sig.paceFor)
	return hold, hasHold && limited
}

// backoff returns the wait before retry attempt+1 and whether there is
// time for it: the server's hint plus full jitter, a uniform random share
// of b = min(MaxWait, 1s·2^attempt); without a hint, the share alone. It
// stays within MaxWait and before ctx's deadline; a hint beyond either
// leaves no time.
func (t *Transport) backoff(ctx context.Context, attempt int, hint time.Duration, hasHint bool, now time.Time) (time.Duration, bool) {
	if !hasHint {
		hint = 0
	}
	limit := t.maxWait
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, dl.Sub(now)-1) // strictly before the deadline
	}
	if hint > limit {
		return 0, false
	}
	b := t.maxWait
	if attempt < 30 {
		b = min(b, backoffBase<<attempt)
	}
	b = min(b, limit-hint+1) // hint + jitter <= limit
	if b <= 0 {
		return hint, true
	}
	return hint + time.Duration(randN(int64(b))), true
}

// sleep waits d, or until ctx ends, and counts the wait.
func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	start := time.Now()
	err := ctxsleep.Sleep(ctx, d)
	t.waits.Add(1)
	t.waited.Add(int64(time.Since(start)))
	return err
}

func (t *Transport) report(e Event) {
	if t.observer != nil {
		t.observer(e)
	}
}

// replayable reports whether req is safe to send again after a 429 or
// 503: its body can be replayed through GetBody, or it has none and its
// method is idempotent (RFC 9110 9.2.2) or it carries an Idempotency-Key,
// as net/http judges a request it may retry.
func replayable(req *http.Request) bool {
	if req.GetBody != nil {
		return true
	}
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, ok := req.Header[hIdempotencyKey]
	if !ok {
		_, ok = req.Header[hXIdempotency]
	}
	return ok
}

// discard reads a little of a response body that will not be used, so
// that its connection can be reused, and closes it.
func discard(res *http.Response) {
	io.CopyN(io.Discard, res.Body, 64<<10)
	res.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// keyState is what the server said about one key: no request before hold,
// and one request every interval until paceEnd.
type keyState struct {
	mu         sync.Mutex
	hold       time.Time
	holdSpread time.Duration // jitter for the requests released at hold
	interval   time.Duration
	paceEnd    time.Time
	next       time.Time // the next free place in the pace
}

// learn records, at now, a hold of hold (if positive) and a pace of one
// request every interval for paceFor (if interval is positive).
func (s *keyState) learn(now time.Time, hold, interval, paceFor time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hold > 0 {
		if h := now.Add(hold); h.After(s.hold) {
			s.hold, s.holdSpread = h, min(hold, time.Second)
		}
	}
	if interval > 0 {
		s.interval, s.paceEnd = interval, now.Add(paceFor)
		if s.next.Before(now) {
			s.next = now
		}
	}
}

// reserve returns how long a request at now must wait for key's hold and
// pace, and takes its place in the pace. A wait longer than maxWait or
// past ctx's deadline takes no place and returns an error.
func (s *keyState) reserve(ctx context.Context, now time.Time, maxWait time.Duration) (time.Duration, EventKind, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, kind := now, EventKind(0)
	held := s.hold.After(now)
	if held {
		at, kind = s.hold, EventHeld
	}
	pace := s.interval > 0 && now.Before(s.paceEnd)
	if pace {
		if slot := minTime(s.next, s.paceEnd); slot.After(at) {
			at, kind, held = slot, EventPaced, false
		}
	}
	wait := at.Sub(now)
	room := maxWait - wait
	if room < 0 {
		return wait, EventRefused, fmt.Errorf("%w: the server's limit holds it %v, more than MaxWait %v", ErrWaitTooLong, wait, maxWait)
	}
	if dl, ok := ctx.Deadline(); ok {
		if !at.Before(dl) {
			return wait, EventRefused, fmt.Errorf("%w: the server's limit holds it %v, past the context's deadline: %w", ErrWaitTooLong, wait, context.DeadlineExceeded)
		}
		room = min(room, dl.Sub(at)-1)
	}
	if pace {
		s.next = at.Add(s.interval)
	}
	// Requests released together at the end of a hold go spread over up
	// to min(hold, 1s), within MaxWait and before the deadline.
	if spread := min(s.holdSpread, room); held && spread > 0 {
		wait += time.Duration(randN(int64(spread)))
	}
	return wait, kind, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
