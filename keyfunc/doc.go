// Package keyfunc decides who is limited: it turns a request into the key a
// rate limiter counts by.
//
// A limiter is only as good as its key. Keyed by a header the client writes,
// it is bypassed by changing the header; keyed by a proxy's address, one
// client exhausts everyone's limit; keyed by a raw path or an un-normalized
// email, one client becomes many keys. The functions here get these right
// once, for every framework.
//
// # Requests
//
// Key functions read a [Request], a small framework-neutral view of the
// request: socket peer, headers, method, route pattern, context, and a form
// or JSON body field read without consuming the body. [FromHTTP] implements
// it for net/http and the routers built on it; each framework adapter
// implements it for its own request type, and every one of them reads a
// field the one way [Request.Field] documents.
//
// # Key functions
//
// A [Func] maps a request to a key:
//
//   - [ClientIP] and [PeerIP]: the client's IP address, IPv6 grouped by /64;
//     forwarding headers are read only from trusted proxies.
//   - [Header]: an API key or token, hashed so that secrets never become
//     store keys; Authorization read as a credential, so that one Basic
//     or Bearer credential is one key however it is spelled.
//   - [Route]: the route pattern, never the raw path nor the method;
//     [RouteMethod] for a limit per method, HEAD folded into GET.
//   - [Email]: a normalized email address from a form or JSON field,
//     whatever the Content-Type claims; [NormalizeEmail] is the
//     normalization on its own.
//   - [ContextValue]: a value such as a user ID set by earlier middleware.
//   - [Join] and [Prefix]: composite keys (account and IP) and namespaces,
//     encoded unambiguously.
//
// # Behind a proxy or load balancer
//
// By default [ClientIP] keys by the socket peer and reads no header, because
// any header may have been written by the client. Behind a reverse proxy or
// load balancer every request comes from the proxy, so all clients would
// share one key: name the proxies with [TrustProxies]. Then, for requests
// from those addresses only, X-Forwarded-For is walked from the right past
// trusted addresses, and the first untrusted address is the client; a
// client's own X-Forwarded-For entries sit to the left and are never
// reached. [UseForwarded] reads RFC 7239 Forwarded instead, and
// [TrustHeader] reads a single-address header such as CF-Connecting-IP.
//
// # Errors
//
// A request with nothing to key by (no such header, field or context value)
// gets an error wrapping [ErrNoKey]; one with an unusable key (a malformed
// email address or credential, a field given twice with different values)
// gets an error wrapping [ErrInvalidKey]. What the request then gets is
// the adapter's decision; ratekit's adapters refuse both by default,
// since keying such a request by something else (its address) would turn
// an account's limit into an address's. Nothing here panics on request
// input.
//
// A configuration mistake is never a request's error: no constructor
// returns a Func that fails on every request. A constructor with an error
// result returns one that names the mistake: [ClientIP] for its options,
// [NormalizeEmail] for a nil option. A nil option is the same error
// wherever it can be one, "keyfunc: <Func>: option N is nil". A
// constructor without an error result returns nil for a configuration it
// cannot build, as its doc says: [Join] of no or a nil Func, [Prefix] of
// a nil Func, [Header] of a name no header field has, [ContextValue] of a
// nil or uncomparable key, [Email] of an empty field name or with a nil
// option, [RouteFunc] of nil. Every ratekit adapter refuses a nil key
// function when it is built, so the mistake surfaces when the server
// starts. [FromHTTP], built per request with no error result, reports a
// nil option from its view's [Request.Field].
//
// # One identity, one key
//
// A client chooses everything its request carries, so a key must be the
// same however the client spells one identity: [Email] normalizes case,
// Unicode and IDNA; a body field reads alike whatever Content-Type the
// request claims, and one that two readings (form and JSON, body and
// query) give differently is refused; [Header] reads Authorization
// canonically. Where a spelling cannot be read one way, the request is
// refused rather than keyed by its raw bytes.
package keyfunc
