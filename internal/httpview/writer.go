package httpview

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// Writer is the http.ResponseWriter a limit passes on to the handlers after
// it: it records the final status the handler writes, and carries the
// limit's Value (an httplimit.Result) so that a limit further down on the
// same request finds it with [Outer] and decides together with it. It
// unwraps for [http.ResponseController], and flushes, hijacks, pushes and
// copies (sendfile) through the writer it wraps, so a streaming, upgrading
// or file-serving handler works behind it as without it.
//
// Adapters keep Writers in a sync.Pool: a ResponseWriter is not used after
// the handler returns. A Writer also holds the [Request] view of its
// request, so that neither costs an allocation.
type Writer[V any] struct {
	http.ResponseWriter
	status int
	Value  V
	View   Request
}

// Reset makes w a writer over rw with the zero Value and a View of no
// request, which keeps its Scratch.
func (w *Writer[V]) Reset(rw http.ResponseWriter) {
	*w = Writer[V]{ResponseWriter: rw, View: Request{Scratch: w.View.Scratch}}
}

// Outer returns the Value of the nearest Writer[V] around rw, found along
// rw's Unwrap chain, or nil.
func Outer[V any](rw http.ResponseWriter) *V {
	if w, ok := Find[*Writer[V]](rw); ok {
		return &w.Value
	}
	return nil
}

// Find returns the nearest writer of type W along rw's Unwrap chain (rw
// itself first), for an adapter whose framework wraps the writer in a type
// of its own (gin's).
func Find[W http.ResponseWriter](rw http.ResponseWriter) (W, bool) {
	for rw != nil {
		if w, ok := rw.(W); ok {
			return w, true
		}
		u, ok := rw.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		rw = u.Unwrap()
	}
	var zero W
	return zero, false
}

// WriteHeader records the first final status and writes it.
func (w *Writer[V]) WriteHeader(code int) {
	// 1xx responses are informational, except 101 Switching Protocols,
	// which is final.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes b, the status being 200 if none was written.
func (w *Writer[V]) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends buffered data, as the wrapped writer's Flush does.
func (w *Writer[V]) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes over the connection, as the wrapped writer's Hijack does.
func (w *Writer[V]) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// ReadFrom copies from src as the wrapped writer's ReadFrom does (net/http's
// sends a file with sendfile).
func (w *Writer[V]) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides every method of a writer but Write, so that io.Copy
// does not call ReadFrom back.
type writerOnly struct{ io.Writer }

// Push initiates an HTTP/2 server push through the wrapped writer, or
// returns [http.ErrNotSupported] when it cannot push.
func (w *Writer[V]) Push(target string, opts *http.PushOptions) error {
	if p, ok := w.ResponseWriter.(http.Pusher); ok {
		return p.Push(target, opts)
	}
	return http.ErrNotSupported
}

// Unwrap returns the wrapped writer, for [http.ResponseController].
func (w *Writer[V]) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status returns the status the client got: 200 when the handler wrote
// nothing, as net/http sends.
func (w *Writer[V]) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
