// Package fiberlimit is ratekit's rate-limiting middleware for fiber
// (github.com/gofiber/fiber/v2): one line in front of an API or a route,
//
//	app.Use(fiberlimit.New(limiter))
//
// It is glue around [httplimit.Engine]: the options, headers and responses
// are [httplimit]'s, the same in every framework.
package fiberlimit

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/httplimit"
	"github.com/ratekit/ratekit/internal/bodyfield"
	"github.com/ratekit/ratekit/keyfunc"
)

// New returns fiber middleware that limits requests with l, configured by the
// [httplimit.Option] values opts. Allowed requests get the rate headers and
// go on to the next handler; refused ones get the [httplimit.Engine]
// response.
//
// The [keyfunc.Request] that key functions see reads fiber's request: its
// Route is the path the middleware was registered with (c.Route().Path), so
// for route keys register it on the route, as in
// app.Post("/login", fiberlimit.New(l), login), not with app.Use, whose
// route is the prefix. Its Context is c.UserContext(): fasthttp does not
// report a client that went away, so a leaky bucket's wait ends early only
// when that context is canceled.
//
// With [httplimit.WithCountIf], an error returned by the handler is passed to
// the app's ErrorHandler here, so that the status it answers with is the one
// counted; the middleware then returns nil, as fiber's logger does.
//
// New panics if l is nil or an option is invalid (see [httplimit.New]): a
// configuration mistake, found when the server starts.
func New(l core.Limiter, opts ...httplimit.Option) fiber.Handler {
	e := httplimit.MustNew(l, opts...)
	bounded := e.MaxBodyBytes() != keyfunc.DefaultMaxBodyBytes
	return func(c *fiber.Ctx) error {
		var req keyfunc.Request = request{c}
		if bounded {
			// A view of two words costs an allocation: only when the bound
			// is not the default.
			req = boundedRequest{request{c}, e.MaxBodyBytes()}
		}
		res := e.Check(req)
		res.WriteHeaders(&c.Response().Header)
		if !res.Serve() {
			if c.Request().IsBodyStream() {
				// fasthttp does not drain a streamed body the handler
				// leaves unread (StreamRequestBody): its rest would be
				// parsed as the next request on the connection.
				c.Context().SetConnectionClose()
			}
			resp := res.Response()
			return c.Status(resp.Status).Send(resp.Body)
		}
		if !res.Counting() {
			return c.Next()
		}
		if err := c.Next(); err != nil {
			if err := c.App().Config().ErrorHandler(c, err); err != nil {
				c.Status(fiber.StatusInternalServerError)
			}
		}
		res.Done(c.Response().StatusCode())
		return nil
	}
}

// request is the keyfunc.Request view of a fiber request. fasthttp reuses
// its buffers, so every string it returns is a copy.
type request struct{ c *fiber.Ctx }

func (r request) RemoteAddr() string       { return r.c.Context().RemoteAddr().String() }
func (r request) Method() string           { return r.c.Method() }
func (r request) Route() string            { return r.c.Route().Path }
func (r request) Context() context.Context { return r.c.UserContext() }

func (r request) Header(name string) []string {
	raw := r.c.Request().Header.PeekAll(name)
	if len(raw) == 0 {
		return nil
	}
	vs := make([]string, len(raw))
	for i, v := range raw {
		vs[i] = string(v)
	}
	return vs
}

// Field reads the body as sent, c.Request().Body(), and decodes it with
// bodyfield.Decode, which bounds every layer: c.Body() would decode it
// whole first, however large it inflates.
func (r request) Field(name string) (string, error) {
	return r.field(name, keyfunc.DefaultMaxBodyBytes)
}

// boundedRequest is a request whose body bound is not the default
// ([httplimit.WithMaxBodyBytes]).
type boundedRequest struct {
	request
	maxBody int64
}

func (r boundedRequest) Field(name string) (string, error) { return r.field(name, r.maxBody) }

func (r request) field(name string, maxBody int64) (string, error) {
	req := r.c.Request()
	ct := string(req.Header.ContentType())
	raw, err := r.rawBody(maxBody)
	if err != nil {
		return "", err
	}
	body, err := bodyfield.Decode(r.Header("Content-Encoding"), raw, maxBody)
	if err != nil {
		return "", err
	}
	return bodyfield.Field(ct, body, string(req.URI().QueryString()), name)
}

// rawBody returns the request body as sent, or an error when it is
// declared longer than maxBytes. fasthttp holds the body in memory unless
// the app streams request bodies (StreamRequestBody); a streamed body of a
// declared length up to maxBytes is read and put back as the body stream,
// and one of unknown length is refused unread, since what was read of it
// could not be put back in front of the rest.
func (r request) rawBody(maxBytes int64) ([]byte, error) {
	req := r.c.Request()
	n := int64(req.Header.ContentLength()) // -1: chunked
	if n > maxBytes {
		return nil, fmt.Errorf("%w: request body of %d bytes is larger than %d", keyfunc.ErrInvalidKey, n, maxBytes)
	}
	if !req.IsBodyStream() {
		return req.Body(), nil
	}
	if n < 0 {
		return nil, fmt.Errorf("fiberlimit: %w: a streamed request body of unknown length is not read to find a key", keyfunc.ErrInvalidKey)
	}
	data, err := io.ReadAll(io.LimitReader(req.BodyStream(), n))
	var replay io.Reader = bytes.NewReader(data)
	if err != nil {
		replay = io.MultiReader(replay, errReader{err})
	}
	req.SetBodyStream(replay, int(n))
	if err != nil {
		return nil, fmt.Errorf("fiberlimit: read request body: %w", err)
	}
	return data, nil
}

// errReader is the rest of a body stream that failed.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
