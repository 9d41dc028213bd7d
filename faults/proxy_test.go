package faults

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy on a free 127.0.0.1 port that forwards every
// connection to one upstream address and injects one network fault at a time:
// latency added to each round trip ([Proxy.SetDelay]), a stall that accepts
// connections and never answers ([Proxy.Stall]), and resets
// ([Proxy.Reset]). [Proxy.Heal] ends the fault.
//
// The delay is latency, not a bandwidth limit: each chunk the client sends is
// forwarded the delay after it arrived, in order, so pipelined commands are
// not serialized behind one another.
//
// A Proxy is safe for concurrent use. Create one with [NewProxy] and stop it
// with [Proxy.Close].
type Proxy struct {
	ln       net.Listener
	upstream string
	delay    atomic.Int64 // nanoseconds added to the client-to-server direction

	mu     sync.Mutex
	fault  proxyFault
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

type proxyFault int

const (
	faultNone proxyFault = iota
	faultStall
	faultReset
)

// proxyConn is one client connection and, unless it is stalled, its
// upstream connection.
type proxyConn struct {
	client  net.Conn
	stalled atomic.Bool   // set when a stall began with the connection open
	done    chan struct{} // closed when the connection is torn down

	mu       sync.Mutex
	upstream net.Conn // nil until connected, and when stalled
	isClosed bool
}

// close tears the connection down; with reset, the client gets a TCP RST
// rather than a FIN.
func (c *proxyConn) close(reset bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed {
		return
	}
	c.isClosed = true
	if tc, ok := c.client.(*net.TCPConn); ok && reset {
		tc.SetLinger(0)
	}
	c.client.Close()
	if c.upstream != nil {
		c.upstream.Close()
	}
	close(c.done)
}

// connect records up as the connection's upstream, or closes it and
// reports false if the connection was closed while dialing.
func (c *proxyConn) connect(up net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed {
		up.Close()
		return false
	}
	c.upstream = up
	return true
}

// NewProxy starts a proxy on a free 127.0.0.1 port that forwards to
// upstream.
func NewProxy(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faults: proxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: make(map[*proxyConn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, host:port, for the clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay adds d to every round trip through the proxy, on open
// connections and new ones; 0 removes it.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Stall makes the proxy accept connections and never answer: open
// connections stop forwarding in both directions and new ones are never
// connected upstream. [Proxy.Heal] closes the stalled connections.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = faultStall
	for c := range p.conns {
		c.stalled.Store(true)
	}
}

// Reset resets every open connection and, until [Proxy.Heal], every new one
// as soon as it is accepted.
func (p *Proxy) Reset() {
	p.mu.Lock()
	p.fault = faultReset
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close(true)
	}
}

// Heal ends a stall or a reset and removes the delay: connections stalled
// are closed (what they held was lost), and new ones are forwarded.
func (p *Proxy) Heal() {
	p.SetDelay(0)
	p.mu.Lock()
	p.fault = faultNone
	var stalled []*proxyConn
	for c := range p.conns {
		if c.stalled.Load() {
			stalled = append(stalled, c)
		}
	}
	p.mu.Unlock()
	for _, c := range stalled {
		c.close(true)
	}
}

// Close stops the proxy, closes every connection and waits, at most a few
// seconds, for its goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close(false)
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		return errors.New("faults: proxy: close: goroutines still running after 5s")
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("faults: proxy: close: %w", err)
	}
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		c := &proxyConn{client: client, done: make(chan struct{})}
		p.mu.Lock()
		fault, closed := p.fault, p.closed
		if !closed {
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		switch {
		case closed:
			client.Close()
			continue
		case fault == faultReset:
			c.close(true)
			p.forget(c)
			continue
		case fault == faultStall:
			c.stalled.Store(true)
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) forget(c *proxyConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// serve forwards one connection until either side closes it.
func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer p.forget(c)
	if c.stalled.Load() {
		discard(c) // never connected upstream
		return
	}
	up, err := net.DialTimeout("tcp", p.upstream, time.Second)
	if err != nil {
		c.close(true)
		return
	}
	if !c.connect(up) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.toUpstream(c, up) }()
	go func() { defer wg.Done(); p.toClient(c, up) }()
	wg.Wait()
}

// discard reads and drops what a stalled connection sends until it closes.
func discard(c *proxyConn) {
	buf := make([]byte, 32<<10)
	for {
		if _, err := c.client.Read(buf); err != nil {
			c.close(false)
			return
		}
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// toUpstream forwards what the client sends, each chunk the proxy's delay
// after it arrived, and drops it while the connection is stalled.
func (p *Proxy) toUpstream(c *proxyConn, up net.Conn) {
	defer c.close(false)
	chunks := make(chan chunk, 1024)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for ch := range chunks {
			if d := time.Duration(p.delay.Load()); d > 0 {
				if wait := time.Until(ch.at.Add(d)); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-t.C:
					case <-c.done:
						t.Stop()
						return
					}
				}
			}
			if c.stalled.Load() {
				continue
			}
			if _, err := up.Write(ch.b); err != nil {
				c.close(false)
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			b := make([]byte, n)
			copy(b, buf[:n])
			select {
			case chunks <- chunk{b: b, at: time.Now()}:
			case <-c.done:
			}
		}
		if err != nil {
			break
		}
	}
	close(chunks)
	c.close(false)
	<-writerDone
}

// toClient forwards what the server answers, and drops it while the
// connection is stalled.
func (p *Proxy) toClient(c *proxyConn, up net.Conn) {
	defer c.close(false)
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 && !c.stalled.Load() {
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
