// Package grpclimit is ratekit's rate limiting for gRPC servers
// (google.golang.org/grpc): one interceptor in front of every method,
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter)))
//
// and [StreamServerInterceptor] for streams. A call is keyed by its peer's
// address unless [WithKey] says otherwise, and may have a limit of its own
// per method ([WithMethods], [WithMethodFunc]).
//
// A call over its limit is refused with codes.ResourceExhausted, before
// the handler, with two error details: a google.rpc.RetryInfo whose
// retry_delay is the whole seconds to wait (at least 1), and a
// google.rpc.QuotaFailure naming the policy ("policy:api"). Every call the
// limiter decides, allowed or denied, gets the response header metadata
// "ratelimit" and "ratelimit-policy", the values the HTTP adapters write in
// their RateLimit and RateLimit-Policy headers, and a denied one
// "retry-after".
// The other refusals:
//
//   - a cost above what the policy can ever allow: ResourceExhausted with a
//     QuotaFailure and no RetryInfo, since retrying cannot help;
//   - the call's own faults (an invalid key, a cost that is not positive):
//     InvalidArgument, whatever the error policy;
//   - the limiter failing under [core.FailClosed] (a
//     [core.UnavailableError]): Unavailable with a RetryInfo of its
//     RetryAfter in seconds (1 unless a core.Failover's breaker is open);
//   - a call whose context ends while it waits for its leaky-bucket slot:
//     Canceled or DeadlineExceeded.
//
// A server with a grpc.UnknownServiceHandler (a proxy) receives calls to
// methods it does not serve, named as the client likes. Those calls reach
// only [StreamServerInterceptor], since gRPC makes every call it hands that
// handler a stream, and to every option they are one method,
// [UnknownMethod], unless [WithMethods] names them: they share one route
// key and one limiter, and no name a client makes up mints a key or keeps
// memory. The name the client sent is grpc.Method(ctx).
//
// A refusal with a RetryInfo also carries the trailer grpc-retry-pushback-ms,
// so that gRPC's own client retries, where a retryPolicy allows them, wait
// as long.
//
// The behaviour is [httplimit]'s, the same as in every HTTP framework; the
// options are its vocabulary, in gRPC terms.
package grpclimit

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/rpclimit"
)

// UnknownMethod is the full method name the calls a server hands its
// grpc.UnknownServiceHandler are known by, whatever method they name, unless
// [WithMethods] names it: it is what [WithMethodFunc], [WithCost],
// [WithSkip], the hooks and key functions' route see. No service can be
// registered under it. [WithMethods] may give it a limiter of its own.
const UnknownMethod = "/*/*"

// UnaryServerInterceptor returns an interceptor that limits unary calls
// with l, configured by opts. An allowed call gets the rate header metadata
// and goes on to the handler; a refused one gets the status the package doc
// lists, and the handler is not called. The code the handler returns (see
// [status.Code]) is what [WithCountIf] judges.
//
// It panics if l is nil or an option is invalid (a nil option,
// [WithClock](nil), a malformed method name in [WithMethods], [WithCountIf]
// over a limiter that cannot give units back): a configuration mistake,
// found when the server starts.
func UnaryServerInterceptor(l core.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	lim, _ := mustNew("grpclimit: UnaryServerInterceptor", l, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		// gRPC calls unary interceptors for the methods it serves only.
		c := newCall(ctx, unaryMethod(info), false)
		v := lim.Check(c)
		if md := rateMetadata(&v); md != nil {
			// It fails only when ctx is not a gRPC server call's, as when
			// a test calls the interceptor itself: there is no header to set.
			_ = grpc.SetHeader(ctx, md)
		}
		if !v.Serve() {
			r := v.Refusal()
			if md := pushback(r); md != nil {
				_ = grpc.SetTrailer(ctx, md) // as SetHeader above
			}
			return nil, refusalError(r)
		}
		ended := false
		defer func() {
			if !ended {
				v.Abandon() // the handler panicked: its in-flight lease goes back
			}
		}()
		resp, err := handler(v.Context(ctx), req)
		ended = true
		v.Done(uint32(status.Code(err)))
		return resp, err
	}
}

// StreamServerInterceptor returns an interceptor that limits streaming
// calls with l, configured by opts. A stream is one call, checked when it
// starts, as [UnaryServerInterceptor] checks a unary call: the header
// metadata is set with ServerStream.SetHeader, and a refused stream ends
// before the handler runs.
//
// With [WithPerMessage], every message the client sends is charged too,
// when the handler receives it. A refused message ends the stream with the
// status a refused start gets: RecvMsg returns it, and the stream ends with
// it whatever the handler returns. Its rate metadata go in the trailer, as
// the header may have been sent already.
//
// It panics as [UnaryServerInterceptor] does.
func StreamServerInterceptor(l core.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	lim, counting := mustNew("grpclimit: StreamServerInterceptor", l, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		// gRPC hands a stream to its UnknownServiceHandler, for a method it
		// does not serve, with no service implementation (srv). A service
		// registered with a nil one, which generated handlers cannot
		// serve, is taken for unknown too: the safe side.
		c := newCall(ss.Context(), streamMethod(info), srv == nil)
		v := lim.Check(c)
		if md := rateMetadata(&v); md != nil {
			_ = ss.SetHeader(md) // fails only once the header is sent: not yet
		}
		if !v.Serve() {
			r := v.Refusal()
			if md := pushback(r); md != nil {
				ss.SetTrailer(md)
			}
			return refusalError(r)
		}
		if !lim.PerMessage {
			ended := false
			defer func() {
				if !ended {
					v.Abandon() // the handler panicked: its in-flight lease goes back
				}
			}()
			if sc := v.Context(ss.Context()); sc != ss.Context() {
				ss = &settlingStream{ServerStream: ss, ctx: sc} // WithSettle
			}
			err := handler(srv, ss)
			ended = true
			v.Done(uint32(status.Code(err)))
			return err
		}
		ms := &meteredStream{ServerStream: ss, lim: lim, call: c, counting: counting}
		err := handler(srv, ms)
		if ms.refused != nil {
			err = ms.refused
		}
		code := uint32(status.Code(err))
		v.Done(code)
		for i := range ms.counted {
			ms.counted[i].Done(code)
		}
		return err
	}
}

// mustNew builds the limiter of an interceptor, or panics; counting
// reports whether WithCountIf is set.
func mustNew(who string, l core.Limiter, opts []Option) (lim *rpclimit.Limiter, counting bool) {
	var cfg config
	for i, o := range opts {
		if o == nil {
			panic(fmt.Errorf("%s: option %d is nil", who, i+1))
		}
		o(&cfg)
	}
	lim, err := rpclimit.New(who, l, cfg)
	if err != nil {
		panic(err)
	}
	return lim, cfg.CountIf != nil
}

// settlingStream is a stream whose handler reports its cost through its
// context ([WithSettle]).
type settlingStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *settlingStream) Context() context.Context { return s.ctx }

// meteredStream charges every message the handler receives.
type meteredStream struct {
	grpc.ServerStream
	lim      *rpclimit.Limiter
	call     *rpclimit.Call
	counting bool
	refused  error // the status of the refused message, once one is
	// counted holds, with WithCountIf, the Verdicts of the messages
	// served, judged by the code the stream ends with. gRPC calls RecvMsg
	// from one goroutine at a time, and the interceptor reads these fields
	// after the handler returned.
	counted []rpclimit.Verdict
}

// RecvMsg receives a message and charges it; a refused message ends the
// stream.
func (s *meteredStream) RecvMsg(m any) error {
	if s.refused != nil {
		return s.refused
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	v := s.lim.Check(s.call)
	if !v.Serve() {
		r := v.Refusal()
		md := rateMetadata(&v)
		if pb := pushback(r); pb != nil {
			md = metadata.Join(md, pb)
		}
		if md != nil {
			s.ServerStream.SetTrailer(md)
		}
		s.refused = refusalError(r)
		return s.refused
	}
	if s.counting {
		s.counted = append(s.counted, v)
	}
	return nil
}

// newCall returns the view of the call key functions read; unknown
// reports that the server does not serve method.
func newCall(ctx context.Context, method string, unknown bool) *rpclimit.Call {
	c := &rpclimit.Call{Ctx: ctx, Procedure: method, Unknown: unknown}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.Peer = peerAddr(p.Addr)
	}
	// One key at a time, without copying the whole of the metadata as
	// metadata.FromIncomingContext does; keys are lowercase either way.
	c.Metadata = func(name string) []string { return metadata.ValueFromIncomingContext(ctx, name) }
	return c
}

// peerAddr returns a's address as net/http's RemoteAddr has it,
// "host:port", with fewer allocations than net.TCPAddr's String.
func peerAddr(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}

func unaryMethod(info *grpc.UnaryServerInfo) string {
	if info == nil {
		return ""
	}
	return info.FullMethod
}

func streamMethod(info *grpc.StreamServerInfo) string {
	if info == nil {
		return ""
	}
	return info.FullMethod
}

// rateMetadata returns the rate header metadata of v, or nil when it has
// none (a skipped call, a limiter failing open).
func rateMetadata(v *rpclimit.Verdict) metadata.MD {
	var s mdSink
	v.Headers(s.add)
	return s.md
}

// mdSink builds the metadata of a Verdict's headers in few allocations:
// the values of the usual three keys share one array.
type mdSink struct {
	md   metadata.MD
	vals [3]string
	n    int
}

func (s *mdSink) add(name, value string) {
	if s.md == nil {
		s.md = make(metadata.MD, len(s.vals))
	}
	if vs := s.md[name]; len(vs) > 0 || s.n == len(s.vals) {
		s.md[name] = append(vs, value) // a key given twice: its own array
		return
	}
	s.vals[s.n] = value
	s.md[name] = s.vals[s.n : s.n+1 : s.n+1]
	s.n++
}

// pushback returns the trailer that tells gRPC's own client retries (a
// service config retryPolicy that retries RESOURCE_EXHAUSTED or
// UNAVAILABLE) to wait the Retry-After: grpc-retry-pushback-ms, from the
// gRPC retry design (A6). It is nil when retrying cannot help.
func pushback(r rpclimit.Refusal) metadata.MD {
	if r.RetryAfter <= 0 {
		return nil
	}
	return metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(r.RetryAfter*1000, 10))
}

// refusalError returns the status error of a refused call: its code and
// message, a RetryInfo when retrying later can help, and a QuotaFailure
// when a policy refused it.
func refusalError(r rpclimit.Refusal) error {
	st := status.New(codes.Code(r.Code), r.Message)
	var retry *errdetails.RetryInfo
	if r.RetryAfter > 0 {
		retry = &errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: r.RetryAfter}}
	}
	var err error
	switch {
	case r.QuotaSubject != "":
		quota := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     r.QuotaSubject,
			Description: r.Message,
		}}}
		if retry != nil {
			st, err = st.WithDetails(retry, quota)
		} else {
			st, err = st.WithDetails(quota)
		}
	case retry != nil:
		st, err = st.WithDetails(retry)
	}
	if err != nil {
		// Unreachable: WithDetails fails only for codes.OK or a detail
		// that cannot be marshaled, and these are neither.
		return status.Error(codes.Code(r.Code), r.Message)
	}
	return st.Err()
}
