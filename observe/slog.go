package observe

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// KeyHash returns the hash under which a [Slog] logs key: the first
// 8 bytes, in lowercase hex (16 characters), of the HMAC-SHA256 of key under
// salt, or of the plain SHA-256 of key when salt is empty. It is stable
// across processes and restarts, so that the log lines of one key can be
// found from the key:
//
//	printf %s "$KEY" | sha256sum | cut -c1-16                        # no salt
//	printf %s "$KEY" | openssl dgst -sha256 -hmac "$SALT" | sed 's/.*= //' | cut -c1-16
//
// Without a salt, anyone holding the logs can test guesses of a key against
// its hash, and the IPv4 address space is small enough to try in full:
// prefer a salt known to the operators only.
func KeyHash(salt []byte, key string) string {
	var sum [sha256.Size]byte
	if len(salt) == 0 {
		sum = sha256.Sum256([]byte(key))
	} else {
		h := hmac.New(sha256.New, salt)
		h.Write([]byte(key))
		h.Sum(sum[:0])
	}
	return hex.EncodeToString(sum[:8])
}

// Slog is an [Observer] that logs through log/slog what an operator
// wants to see: denials at Debug, store errors and circuit breaker
// transitions at Warn. Allowed requests are not logged. Errors that are the
// caller's doing ([core.CallerError]: an invalid cost, a cancelled request;
// and a request with no usable key, keyfunc.ErrNoKey or
// keyfunc.ErrInvalidKey, as a rule set's limits report) are logged at
// Debug, as a denial is.
//
// Each record carries the policy name ("policy"), the rule's ("rule") for
// an event of a rules Limiter, the op ("op"), the key's
// class ("key_class") when the observed limiter has [WithKeyClass], and
// the key's [KeyHash] ("key_hash") when it has [WithRawKey]; the key
// itself is never logged. A denial also carries "cost" and "retry_after", a
// shadow decision "shadow"=true, an error "err".
//
// The level is checked before anything is formatted, so a denial costs one
// Enabled call while Debug is off. A Slog is safe for concurrent
// use. Create one with [NewSlog].
type Slog struct {
	logger *slog.Logger
	salt   []byte
}

var _ Observer = (*Slog)(nil)

// NewSlog returns an observer that logs to logger, or to [slog.Default]
// when logger is nil, with key hashes salted by salt (see [KeyHash]; salt
// is copied, and nil means a plain SHA-256).
func NewSlog(logger *slog.Logger, salt []byte) *Slog {
	return &Slog{logger: logger, salt: append([]byte(nil), salt...)}
}

// Observe logs e if it is a denial, an error or a breaker transition.
func (s *Slog) Observe(ctx context.Context, e Event) {
	level, msg := slog.LevelDebug, ""
	switch {
	case e.Op == OpBreakerOpen:
		level, msg = slog.LevelWarn, "ratekit: circuit breaker open"
	case e.Op == OpBreakerClose:
		level, msg = slog.LevelWarn, "ratekit: circuit breaker closed"
	case e.Err != nil && !core.CallerError(ctx, e.Err) && !keyError(e.Err):
		level, msg = slog.LevelWarn, "ratekit: store error"
	case e.Err != nil:
		msg = "ratekit: request error"
	case e.Outcome() == OutcomeDenied:
		msg = "ratekit: denied"
	default:
		return
	}
	logger := s.logger
	if logger == nil {
		logger = slog.Default()
	}
	if !logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("policy", e.Policy))
	if e.Rule != "" {
		attrs = append(attrs, slog.String("rule", e.Rule))
	}
	attrs = append(attrs, slog.String("op", e.Op.String()))
	if e.KeyClass != "" {
		attrs = append(attrs, slog.String("key_class", e.KeyClass))
	}
	if e.Key != "" {
		attrs = append(attrs, slog.String("key_hash", KeyHash(s.salt, e.Key)))
	}
	if e.Shadow {
		attrs = append(attrs, slog.Bool("shadow", true))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.Any("err", e.Err))
	} else if e.Outcome() == OutcomeDenied {
		attrs = append(attrs, slog.Int64("cost", e.Cost), slog.Duration("retry_after", e.Decision.RetryAfter))
	}
	logger.LogAttrs(ctx, level, msg, attrs...)
}

// keyError reports whether err is a key function's: the request's doing.
func keyError(err error) bool {
	return errors.Is(err, keyfunc.ErrNoKey) || errors.Is(err, keyfunc.ErrInvalidKey)
}
