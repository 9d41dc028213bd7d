package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/inflight"
	"github.com/ratekit/ratekit/internal/ratehdr"
)

// Problem type URIs (RFC 9457), one per reason a request is refused. They are
// stable: clients may compare them. Each one resolves to this package's
// documentation of the constant, which says what the problem means.
const (
	// ProblemRateLimited: 429, the limit is reached; retry after the
	// Retry-After header's seconds.
	ProblemRateLimited = "https://pkg.go.dev/github.com/ratekit/ratekit/httplimit#ProblemRateLimited"
	// ProblemCostTooHigh: 429 without Retry-After, with the rate headers of
	// the key as it is; the request costs more than the policy can ever
	// allow ([core.ErrCostTooHigh]), so retrying it cannot help.
	ProblemCostTooHigh = "https://pkg.go.dev/github.com/ratekit/ratekit/httplimit#ProblemCostTooHigh"
	// ProblemInFlight: 429 with Retry-After; the key has as many requests
	// in flight as [WithInFlight] allows; retry once one of them has
	// ended. The rate limit counted nothing.
	ProblemInFlight = "https://pkg.go.dev/github.com/ratekit/ratekit/httplimit#ProblemInFlight"
	// ProblemUnavailable: 503 with Retry-After; the limiter failed and the
	// error policy is [core.FailClosed] (or [core.Fallback] failed too).
	ProblemUnavailable = "https://pkg.go.dev/github.com/ratekit/ratekit/httplimit#ProblemUnavailable"
	// ProblemInvalidKey: 400; the request carries a malformed key (see
	// [WithInvalidKey]) or none where one is required (see [WithNoKey]).
	ProblemInvalidKey = "https://pkg.go.dev/github.com/ratekit/ratekit/httplimit#ProblemInvalidKey"
	// ProblemInvalidCost: 400; the request's cost could not be worked out
	// (the [WithCost] function failed) or is below 1. The request is never
	// served unlimited for it.
	ProblemInvalidCost = "https://pkg.go.dev/github.com/ratekit/ratekit/httplimit#ProblemInvalidCost"
	// ProblemCanceled: 503 without Retry-After; the request's context ended
	// while it waited for its leaky-bucket slot. A client that went away
	// does not see it.
	ProblemCanceled = "https://pkg.go.dev/github.com/ratekit/ratekit/httplimit#ProblemCanceled"
)

// ContentTypeProblem is the media type of every refusal body.
const ContentTypeProblem = "application/problem+json"

// Problem is the RFC 9457 problem details body of a refusal. Its JSON field
// names are those of the RFC plus "policy", the name of the policy that
// refused the request ("default" for an unnamed policy) when one did. It
// never holds an error's text.
type Problem struct {
	// Type is one of the Problem* URIs, such as [ProblemRateLimited].
	Type string `json:"type"`
	// Title is a short summary of the type, the same for every occurrence.
	Title string `json:"title"`
	// Status is the response's status code.
	Status int `json:"status"`
	// Detail explains this occurrence, such as "Try again in 12 seconds.".
	Detail string `json:"detail"`
	// Policy is the name of the policy that decided, if one did.
	Policy string `json:"policy,omitempty"`
}

// Response is a framework-neutral HTTP response that an adapter writes the
// framework's way: the refusals, and what a [WithDenied] function returns.
type Response struct {
	// Status is the status code; 0 means 429.
	Status int
	// Header holds headers to set, over the ones the middleware set.
	Header http.Header
	// Body is the response body.
	Body []byte

	problem Problem // the engine's own refusals: what Body encodes
}

// DeniedResponse returns the default response to a request denied by d: 429
// Too Many Requests, Content-Type application/problem+json and a
// [ProblemRateLimited] body whose detail says when to retry, such as "Try
// again in 12 seconds.". The middleware sets Retry-After and Cache-Control
// itself.
func DeniedResponse(d core.Decision) Response {
	secs := RetryAfterSeconds(d.RetryAfter)
	return problemResponse(Problem{
		Type:   ProblemRateLimited,
		Title:  "Too many requests",
		Status: http.StatusTooManyRequests,
		Detail: "Try again in " + plural(secs, "second") + ".",
		Policy: PolicyName(d.Policy),
	})
}

func costTooHighResponse(n int64, d core.Decision) Response {
	detail := "This request costs " + plural(n, "unit") + ", more than the policy can ever allow; retrying cannot help."
	if c := d.Policy.Capacity(); c > 0 {
		detail = "This request costs " + plural(n, "unit") + "; the policy allows at most " + strconv.FormatInt(c, 10) + " at once, so retrying cannot help."
	}
	return problemResponse(Problem{
		Type:   ProblemCostTooHigh,
		Title:  "Request too expensive",
		Status: http.StatusTooManyRequests,
		Detail: detail,
		Policy: PolicyName(d.Policy),
	})
}

// unavailableResponse returns the refusal of a request the limiter could
// not decide ([core.UnavailableError]), to retry after retry.
func unavailableResponse(retry time.Duration) Response {
	secs := RetryAfterSeconds(retry)
	r := problemResponse(Problem{
		Type:   ProblemUnavailable,
		Title:  "Rate limiter unavailable",
		Status: http.StatusServiceUnavailable,
		Detail: "The request could not be checked against its rate limit. Try again in " + plural(secs, "second") + ".",
	})
	r.Header.Set("Retry-After", strconv.FormatInt(secs, 10))
	return r
}

// inFlightResponse returns the refusal of a request over its key's cap in
// flight (see [WithInFlight]), to retry after retry.
func inFlightResponse(d inflight.Decision) Response {
	secs := RetryAfterSeconds(d.RetryAfter)
	detail := "This client already has " + plural(d.InFlight, "request") + " in progress, as many as allowed at once."
	if d.InFlight == 0 {
		// A memory limiter whose table of keys is full of keys in flight.
		detail = "Too many clients have requests in progress."
	}
	r := problemResponse(Problem{
		Type:   ProblemInFlight,
		Title:  "Too many requests in flight",
		Status: http.StatusTooManyRequests,
		Detail: detail + " Try again in " + plural(secs, "second") + ".",
	})
	r.Header[hRetryAfter] = []string{strconv.FormatInt(secs, 10)}
	return r
}

func invalidKeyResponse() Response {
	return problemResponse(Problem{
		Type:   ProblemInvalidKey,
		Title:  "Request not identifiable",
		Status: http.StatusBadRequest,
		Detail: "The request does not carry a valid identity to apply the rate limit to.",
	})
}

func invalidCostResponse() Response {
	return problemResponse(Problem{
		Type:   ProblemInvalidCost,
		Title:  "Request cost not valid",
		Status: http.StatusBadRequest,
		Detail: "The cost of this request against its rate limit could not be determined.",
	})
}

func canceledResponse(d core.Decision) Response {
	return problemResponse(Problem{
		Type:   ProblemCanceled,
		Title:  "Request canceled while queued",
		Status: http.StatusServiceUnavailable,
		Detail: "The request ended before its turn came.",
		Policy: PolicyName(d.Policy),
	})
}

func problemResponse(p Problem) Response {
	body, err := json.Marshal(p)
	if err != nil { // unreachable: strings and an int always marshal
		body = []byte(`{"status":` + strconv.Itoa(p.Status) + `}`)
	}
	h := make(http.Header, 3)
	h["Content-Type"] = []string{ContentTypeProblem}
	h["Cache-Control"] = []string{"no-store"}
	return Response{Status: p.Status, Header: h, Body: body, problem: p}
}

// WriteDenied writes the default answer to a request denied by d on a
// net/http response: 429, Retry-After (d.RetryAfter in whole seconds,
// rounded up, at least 1), Cache-Control: no-store and the problem+json body
// of [DeniedResponse]. It is for handlers that decide without the middleware,
// such as a login handler asking a [github.com/ratekit/ratekit/guard.Guard];
// it writes no RateLimit headers. On a CORS response (a CORS middleware set
// Access-Control-Allow-Origin) it adds Retry-After to
// Access-Control-Expose-Headers, as the middleware does.
func WriteDenied(w http.ResponseWriter, d core.Decision) {
	res := DeniedResponse(d)
	h := w.Header()
	for k, v := range res.Header {
		h[k] = v
	}
	h[hRetryAfter] = retryAfterValue(d.RetryAfter)
	exposeNames(&httpSink{h: h}, []string{"Retry-After"}, []string{"Retry-After"})
	w.WriteHeader(res.Status)
	w.Write(res.Body)
}

// RetryAfterSeconds returns d in whole seconds, rounded up and at least 1:
// the Retry-After value of a denial, as the header cannot say "0" or a
// fraction without telling clients to retry too early.
func RetryAfterSeconds(d time.Duration) int64 { return ratehdr.RetryAfterSeconds(d) }

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 { return ratehdr.CeilSeconds(d) }

func plural(n int64, unit string) string {
	s := strconv.FormatInt(n, 10) + " " + unit
	if n != 1 {
		s += "s"
	}
	return s
}
