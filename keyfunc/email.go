package keyfunc

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"
)

// maxEmailBytes bounds the input [NormalizeEmail] accepts: an address is at
// most 254 bytes (RFC 5321), and even spelled with fullwidth letters it stays
// well under this.
const maxEmailBytes = 1024

// An EmailOption configures [Email] and [NormalizeEmail]. A nil one is a
// mistake both report: Email by returning nil, NormalizeEmail with an
// error.
type EmailOption func(*emailConfig)

type emailConfig struct {
	foldGmail bool
}

// FoldGmail makes addresses at gmail.com and googlemail.com that Gmail
// delivers to one mailbox one key: dots in the local part are removed, a
// "+tag" suffix is cut, and googlemail.com becomes gmail.com, so
// "A.na+promo@googlemail.com" is "ana@gmail.com". Other domains are left
// alone: elsewhere dots and plus signs can name different mailboxes.
//
// Default: off.
func FoldGmail() EmailOption {
	return func(c *emailConfig) { c.foldGmail = true }
}

// Email returns a [Func] keying a request by the email address (or account
// name in email form) in its form or JSON body field named field, read with
// [Request.Field] and normalized with [NormalizeEmail], so that
// " Ana@Example.COM " and "ana@example.com" are one account. A JSON body
// is read whatever Content-Type the request claims (text/plain, none, a
// malformed one), as handlers that decode JSON without looking at it
// read it.
//
// A missing or empty field is an error wrapping [ErrNoKey]; an address that
// [NormalizeEmail] rejects is an error wrapping [ErrInvalidKey]; an error
// from [Request.Field] is returned as is.
//
// Email returns nil when field is empty or an option is nil: every adapter
// refuses a nil key function when it is built.
func Email(field string, opts ...EmailOption) Func {
	c, err := emailOptions(opts)
	if field == "" || err != nil {
		return nil
	}
	return func(r Request) (string, error) {
		v, err := r.Field(field)
		if err != nil {
			return "", err
		}
		if strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("%w: field %q missing", ErrNoKey, field)
		}
		return c.normalize(v)
	}
}

// NormalizeEmail returns the canonical form of an email address, for keys and
// for comparing accounts:
//
//   - surrounding white space is trimmed;
//   - invalid UTF-8, control and format characters (such as U+200B ZERO WIDTH
//     SPACE) and inner white space are rejected, not removed: a key must not
//     silently match a different-looking input;
//   - the address is Unicode-normalized (NFKC) and case-folded, so fullwidth
//     "ＡＮＡ＠example.com" is "ana@example.com";
//   - it is split at its last "@"; both parts must be non-empty;
//   - the domain is converted to ASCII with IDNA (UTS #46 lookup), so
//     "bücher.de" is "xn--bcher-kva.de", and a trailing dot is removed;
//   - with [FoldGmail], Gmail dots and "+tags" are folded.
//
// The local part is folded too, though RFC 5321 lets a server treat it as
// case-sensitive: in practice no provider does, and two keys for one
// mailbox would let a client double its limit. A rejected address is an
// error wrapping [ErrInvalidKey]. NormalizeEmail is idempotent.
//
// A nil option is an error ("keyfunc: NormalizeEmail: option N is nil"),
// which wraps neither ErrInvalidKey nor [ErrNoKey]: the mistake is the
// caller's, not the address's.
func NormalizeEmail(s string, opts ...EmailOption) (string, error) {
	c, err := emailOptions(opts)
	if err != nil {
		return "", fmt.Errorf("keyfunc: NormalizeEmail: %w", err)
	}
	return c.normalize(s)
}

// emailOptions applies opts, or reports the first that is nil.
func emailOptions(opts []EmailOption) (emailConfig, error) {
	var c emailConfig
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("option %d is nil", i+1)
		}
		o(&c)
	}
	return c, nil
}

func (c emailConfig) normalize(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("%w: email: empty", ErrInvalidKey)
	}
	if len(s) > maxEmailBytes {
		return "", fmt.Errorf("%w: email: longer than %d bytes", ErrInvalidKey, maxEmailBytes)
	}
	if err := checkEmailRunes(s); err != nil {
		return "", err
	}
	// NFKC_Casefold as Unicode defines it: normalize, fold, normalize again,
	// as folding can leave a string that is not normalized. Lowering before
	// folding works around x/text folding Cherokee letters to the other
	// case and back (go.dev/issue/46101), which would give one address two
	// keys; for every other letter it changes nothing.
	s = norm.NFKC.String(cases.Fold().String(cases.Lower(language.Und).String(norm.NFKC.String(s))))
	// Normalizing can make white space or a format character ("¨" is
	// " \u0308"): check the result too.
	if err := checkEmailRunes(s); err != nil {
		return "", err
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return "", fmt.Errorf("%w: email: no @", ErrInvalidKey)
	}
	local, domain := s[:at], s[at+1:]
	domain = strings.TrimSuffix(domain, ".")
	if local == "" || domain == "" {
		return "", fmt.Errorf("%w: email: empty local part or domain", ErrInvalidKey)
	}
	domain, err := idna.Lookup.ToASCII(domain)
	if err != nil {
		return "", fmt.Errorf("%w: email: domain: %v", ErrInvalidKey, err)
	}
	if domain == "" || len(domain) > 253 || strings.Contains(domain, "..") ||
		domain[0] == '.' || domain[len(domain)-1] == '.' {
		return "", fmt.Errorf("%w: email: invalid domain %q", ErrInvalidKey, domain)
	}
	if c.foldGmail && (domain == "gmail.com" || domain == "googlemail.com") {
		domain = "gmail.com"
		local, _, _ = strings.Cut(local, "+")
		local = strings.ReplaceAll(local, ".", "")
		if local == "" {
			return "", fmt.Errorf("%w: email: empty Gmail local part", ErrInvalidKey)
		}
	}
	return local + "@" + domain, nil
}

// checkEmailRunes rejects invalid UTF-8, control and format characters and
// white space.
func checkEmailRunes(s string) error {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return fmt.Errorf("%w: email: invalid UTF-8", ErrInvalidKey)
		case unicode.In(r, unicode.Cc, unicode.Cf):
			return fmt.Errorf("%w: email: control or format character %U", ErrInvalidKey, r)
		case unicode.IsSpace(r):
			return fmt.Errorf("%w: email: white space %U", ErrInvalidKey, r)
		}
	}
	return nil
}
