package rules

import (
	"context"
	"net/textproto"

	"github.com/ratekit/ratekit/keyfunc"
)

// fakeRequest is a keyfunc.Request built directly, for matching without
// net/http.
type fakeRequest struct {
	method, route, remote string
	header                textproto.MIMEHeader
	ctx                   context.Context
}

func newRequest(method, route string, headers map[string]string) *fakeRequest {
	r := &fakeRequest{method: method, route: route, remote: "203.0.113.7:1234", header: textproto.MIMEHeader{}, ctx: context.Background()}
	for k, v := range headers {
		r.header.Add(k, v)
	}
	return r
}

func (r *fakeRequest) RemoteAddr() string                { return r.remote }
func (r *fakeRequest) Header(name string) []string       { return r.header.Values(name) }
func (r *fakeRequest) Method() string                    { return r.method }
func (r *fakeRequest) Route() string                     { return r.route }
func (r *fakeRequest) Context() context.Context          { return r.ctx }
func (r *fakeRequest) Field(name string) (string, error) { return "", nil }

var _ keyfunc.Request = (*fakeRequest)(nil)
