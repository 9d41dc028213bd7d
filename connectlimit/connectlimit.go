// Package connectlimit is ratekit's rate-limiting interceptor for Connect
// (connectrpc.com/connect) handlers, over the Connect, gRPC and gRPC-Web
// protocols alike: one line where the handler is built,
//
//	path, handler := greetv1connect.NewGreetServiceHandler(greeter,
//		connect.WithInterceptors(connectlimit.NewInterceptor(limiter)))
//
// A unary call is one request; a stream is one request at its start, and
// with [WithPerMessage] each message the client sends is one more. Calls are
// keyed by the peer's address unless [WithKey] says otherwise, and a
// procedure may have a limiter of its own ([WithProcedures]).
//
// A call's procedure is the one its handler was built for, never the path
// the client sent: a handler serves one procedure whatever URL reaches it.
// So what the interceptor keeps per procedure is bounded by the handlers
// it is given, and no name a client makes up mints a key.
//
// A refused call gets a [*connect.Error], and the handler is not called: a
// denial is [connect.CodeResourceExhausted] with a google.rpc.RetryInfo
// detail (retry_delay: the Retry-After, in whole seconds, at least 1) and a
// google.rpc.QuotaFailure detail whose one violation's subject names the
// policy ("policy:api"). The rate headers are those the HTTP middleware
// writes (Ratelimit-Policy, Ratelimit, and Retry-After on a refusal): on the
// response headers of a served call, on the error's Meta of a refused one.
// The other refusals and the options are the HTTP middleware's, in RPC
// terms: see [NewInterceptor].
package connectlimit

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/rpclimit"
)

// NewInterceptor returns an interceptor that limits, by l and as opts
// configure, the calls of the handlers built with it
// (connect.WithInterceptors); on a client it does nothing.
//
// A served call gets the rate headers on its response headers, whether the
// handler succeeds or fails; a leaky bucket's Delay is waited before the
// handler runs. A refused call gets a [*connect.Error] and the
// handler is not called:
//
//   - [connect.CodeResourceExhausted]: the limit is reached, with RetryInfo
//     and QuotaFailure details and a Retry-After header; or the call costs
//     more than the policy can ever allow, with a QuotaFailure only.
//   - [connect.CodeInvalidArgument]: the caller's fault, whatever the error
//     policy: the key function failed ([WithKey]), or the cost function
//     failed or gave a cost below 1 ([WithCost]).
//   - [connect.CodeUnavailable]: the limiter failed and the error policy
//     fails closed ([WithErrorPolicy], a [core.UnavailableError]), with a
//     RetryInfo of its RetryAfter (1 second unless a core.Failover's
//     breaker is open).
//   - [connect.CodeCanceled] or [connect.CodeDeadlineExceeded]: the call
//     ended while it waited for a leaky bucket's Delay.
//
// The error's message says when to retry, as the HTTP middleware's problem
// body does; it never holds an error's text.
//
// NewInterceptor panics if l is nil or an option is invalid (a nil option,
// [WithClock](nil), a malformed procedure name or nil limiter in
// [WithProcedures], core.Fallback(nil), [WithCountIf] over a limiter that
// cannot give units back): a configuration mistake, found when the server
// starts. Nothing a call carries makes the interceptor panic. It is safe
// for concurrent use.
func NewInterceptor(l core.Limiter, opts ...Option) connect.Interceptor {
	var c config
	for i, o := range opts {
		if o == nil {
			panic(fmt.Errorf("connectlimit: NewInterceptor: option %d is nil", i+1))
		}
		o(&c)
	}
	lim, err := rpclimit.New("connectlimit: NewInterceptor", l, c.Config)
	if err != nil {
		panic(err)
	}
	return &interceptor{lim: lim, hook: c.ErrorHook}
}

type interceptor struct {
	lim  *rpclimit.Limiter
	hook func(ctx context.Context, procedure string, err error)
}

// WrapUnary limits a unary call to a handler; a client's calls pass.
func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient {
			return next(ctx, req)
		}
		c := &rpclimit.Call{Ctx: ctx, Peer: req.Peer().Addr, Metadata: req.Header().Values, Procedure: spec.Procedure}
		v := i.lim.Check(c)
		if !v.Serve() {
			return nil, i.refusal(c, &v)
		}
		// The handler's call info sends its response headers whether the
		// handler succeeds or fails, as the HTTP middleware's headers are
		// on every response; without one (a UnaryFunc called directly),
		// the response's headers carry them.
		info, hasInfo := connect.CallInfoForHandlerContext(ctx)
		if hasInfo {
			v.AddHeaders(info.ResponseHeader())
		}
		ended := false
		defer func() {
			if !ended {
				v.Abandon() // the handler panicked: its in-flight lease goes back
			}
		}()
		res, err := next(v.Context(ctx), req)
		ended = true
		if !hasInfo && res != nil {
			v.AddHeaders(res.Header())
		}
		v.Done(code(err))
		return res, err
	}
}

// WrapStreamingClient returns next: clients are not limited.
func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler limits a stream at its start and, with
// WithPerMessage, each message received.
func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c := &rpclimit.Call{Ctx: ctx, Peer: conn.Peer().Addr, Metadata: conn.RequestHeader().Values, Procedure: conn.Spec().Procedure}
		v := i.lim.Check(c)
		if !v.Serve() {
			return i.refusal(c, &v)
		}
		v.AddHeaders(conn.ResponseHeader())
		if i.lim.PerMessage {
			conn = &meteredConn{StreamingHandlerConn: conn, i: i, call: c}
		}
		ended := false
		defer func() {
			if !ended {
				v.Abandon() // the handler panicked: its in-flight lease goes back
			}
		}()
		err := next(v.Context(ctx), conn)
		ended = true
		v.Done(code(err))
		return err
	}
}

// meteredConn charges each message received on a stream.
type meteredConn struct {
	connect.StreamingHandlerConn
	i    *interceptor
	call *rpclimit.Call
}

// Receive receives a message and charges it; a refused message is not
// handed on, and the refusal is returned instead.
func (m *meteredConn) Receive(msg any) error {
	if err := m.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	// A message's units stay counted: CountIf judges the stream's code,
	// at its end, against the units of its start only.
	v := m.i.lim.Check(m.call)
	if !v.Serve() {
		return m.i.refusal(m.call, &v)
	}
	return nil
}

// code is the code a call ended with: 0 when it succeeded.
func code(err error) uint32 {
	if err == nil {
		return rpclimit.CodeOK
	}
	return uint32(connect.CodeOf(err))
}

// refusal returns the error a refused call gets: its code and message, a
// RetryInfo when retrying later can help, a QuotaFailure when a policy
// refused it, and the rate headers in its Meta. grpclimit's refusalError
// builds the same details.
func (i *interceptor) refusal(c *rpclimit.Call, v *rpclimit.Verdict) *connect.Error {
	r := v.Refusal()
	err := connect.NewError(connect.Code(r.Code), errors.New(r.Message))
	if r.RetryAfter > 0 {
		i.addDetail(c, err, &errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: r.RetryAfter}})
	}
	if r.QuotaSubject != "" {
		i.addDetail(c, err, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     r.QuotaSubject,
			Description: r.Message,
		}}})
	}
	v.AddHeaders(err.Meta())
	return err
}

// addDetail adds a detail to err. Marshaling these messages cannot fail;
// if it ever did, the call would still be refused, without the detail.
func (i *interceptor) addDetail(c *rpclimit.Call, err *connect.Error, msg proto.Message) {
	d, derr := connect.NewErrorDetail(msg)
	if derr != nil {
		if i.hook != nil {
			i.hook(c.Ctx, c.Route(), fmt.Errorf("connectlimit: error detail: %w", derr))
		}
		return
	}
	err.AddDetail(d)
}
